"""The consumer's configuration: Kafka's keys and defaults (`CONSUMER`), and `parse_config`, which
adds the rules between keys (group.protocol=consumer refuses the classic-only settings)."""

from __future__ import annotations

from clients.config import (BOOLEAN, COMMON, INT, STRING, Config, ConfigDef, ConfigDefs,
                            ConfigError, ConfigType, choice)


def _assignors(v):
    # names ("range,cooperative-sticky") or a list of names / PartitionAssignor objects;
    # the consumer resolves them (clients/consumer/assignors)
    if isinstance(v, (str, list, tuple)):
        return v
    raise ValueError("must be a list of assignor names")


def _remote_assignor(v) -> str:
    if not isinstance(v, str) or not v.strip():
        raise ValueError("must be an assignor name (uniform, range)")
    return v.strip()


CONSUMER = ConfigDefs(
    "consumer", COMMON,
    ConfigDef("client.id", STRING, "raftka-consumer", None, "sent with every request"),
    ConfigDef("group.id", STRING, None, None, "the consumer group; None = no group (assign only)"),
    ConfigDef("group.instance.id", STRING, None, None, "static membership (KIP-345)"),
    ConfigDef("auto.offset.reset", choice("earliest", "latest", "none"), "latest", None,
              "where a partition without a committed offset starts (none: raise)"),
    ConfigDef("enable.auto.commit", BOOLEAN, True, None,
              "commit positions in the background and before a rebalance"),
    ConfigDef("auto.commit.interval.ms", INT, 5000, None, "ms between automatic commits"),
    ConfigDef("isolation.level", choice("read_uncommitted", "read_committed"),
              "read_uncommitted", None, "read_committed: only committed transactions' records"),
    ConfigDef("max.poll.records", INT, 500, None, "records one poll returns at most"),
    ConfigDef("fetch.min.bytes", INT, 1, None, "bytes a Fetch waits for (up to fetch.max.wait.ms)"),
    ConfigDef("fetch.max.wait.ms", INT, 500, None, "ms a broker holds a Fetch for fetch.min.bytes"),
    ConfigDef("fetch.max.bytes", INT, 52_428_800, None, "bytes of one Fetch answer"),
    ConfigDef("max.partition.fetch.bytes", INT, 1_048_576, None,
              "bytes of one partition in a Fetch answer"),
    ConfigDef("session.timeout.ms", INT, 45_000, None,
              "classic: ms without a heartbeat before the coordinator drops the member"),
    ConfigDef("heartbeat.interval.ms", INT, 3000, None, "classic: ms between heartbeats"),
    ConfigDef("max.poll.interval.ms", INT, 300_000, None,
              "ms between polls before the member leaves the group (the rebalance timeout)"),
    ConfigDef("partition.assignment.strategy", ConfigType("list", _assignors),
              "range,cooperative-sticky", None,
              "classic: assignors offered to the group, preferred first"),
    # KIP-848: "consumer" joins with ConsumerGroupHeartbeat and lets the coordinator assign
    # (then partition.assignment.strategy, session.timeout.ms and heartbeat.interval.ms are the
    # broker's business: group.consumer.* on the broker)
    ConfigDef("group.protocol", choice("classic", "consumer", lower=True), "classic", None,
              "classic (JoinGroup/SyncGroup) or consumer (KIP-848)"),
    ConfigDef("group.remote.assignor", ConfigType("assignor", _remote_assignor), None, None,
              "consumer protocol: the broker's assignor (uniform, range); None = its default"),
)

CLASSIC_ONLY = {"session.timeout.ms", "heartbeat.interval.ms", "partition.assignment.strategy"}


def parse_config(config: dict | None, kwargs: dict) -> Config:
    """Kafka-style keys, then keyword arguments (`group_id=` for `group.id`), over the defaults,
    typed and checked (ConfigError, a ValueError); unknown keys are kept (and ignored)."""
    props = dict(config or {})
    props.update((k.replace("_", "."), v) for k, v in kwargs.items())
    cfg = CONSUMER.parse(props)
    protocol = cfg["group.protocol"]
    if cfg["group.remote.assignor"] is not None and protocol != "consumer":
        raise ConfigError("group.remote.assignor needs group.protocol=consumer")
    if protocol == "consumer":
        # As Kafka's Java consumer does (a ConfigException): with KIP-848 the coordinator owns
        # these; quietly ignoring one would leave its user believing it applies.
        for key in sorted(cfg.explicit & CLASSIC_ONLY):
            raise ConfigError(f"{key} is not supported with group.protocol=consumer: the group "
                              f"coordinator decides it (group.consumer.* on the broker"
                              f"{'; group.remote.assignor picks its assignor' if 'assignment' in key else ''})")
    return cfg
