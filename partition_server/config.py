"""Partition server (broker) configuration, with Kafka's property names.

Every key a broker reads is declared once in `BROKER_CONFIG_DEFS` with its type, default, unit and
constraint; `BrokerConfig.from_properties()` validates a {name: string} mapping (from a Kafka
`.properties` file plus `--set` overrides) and raises `ConfigError` with one clear line per
problem. Keys this broker does not know are rejected rather than silently ignored, so a typo in
`min.insync.replicas` cannot quietly weaken durability.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from common.properties import ConfigError, parse_endpoint, parse_voters
from common.topic_configs import (ALTER_LOG_DIRS_RATE, DEFAULT_MOVES_THROTTLED_RATE, LONG_MAX,
                                  MOVES_THROTTLED_RATE)


FETCH_MAX_BYTES = 57671680     # Kafka's fetch.max.bytes default (55 MiB)


@dataclasses.dataclass(frozen=True)
class ConfigDef:
    name: str
    type: str            # "int", "long", "bool", "string", "list", "double"
    default: Any
    doc: str
    validator: Callable[[Any], str | None] | None = None


def _at_least(n: int) -> Callable[[Any], str | None]:
    return lambda v: None if v >= n else f"must be >= {n}"


def _one_of(*choices: str) -> Callable[[Any], str | None]:
    return lambda v: None if v in choices else f"must be one of {', '.join(choices)}"


BROKER_CONFIG_DEFS: dict[str, ConfigDef] = {d.name: d for d in [
    ConfigDef("node.id", "int", None, "This broker's id (>= 0); unique across brokers and controllers.",
              _at_least(0)),
    ConfigDef("process.roles", "list", ["broker"], "broker, controller, or both (combined mode)."),
    ConfigDef("listeners", "list", ["PLAINTEXT://127.0.0.1:9092"],
              "Client listeners as NAME://host:port."),
    ConfigDef("advertised.listeners", "list", None,
              "Listeners published in metadata (default: listeners)."),
    ConfigDef("controller.quorum.voters", "list", None,
              "The controller quorum as id@host:port,... (the controllers' Kafka-protocol listeners)."),
    ConfigDef("log.dirs", "list", ["./raftka-data/broker"],
              "Directories holding partition logs (JBOD: new replicas go to the one with the "
              "fewest; a failed one takes only its replicas offline; see log_dirs.py)."),
    ConfigDef("broker.rack", "string", None, "Rack id used by rack-aware replica placement."),
    ConfigDef("num.partitions", "int", 1, "Partitions for auto-created topics.", _at_least(1)),
    ConfigDef("default.replication.factor", "int", 1, "Replication factor of auto-created topics.",
              _at_least(1)),
    ConfigDef("auto.create.topics.enable", "bool", False,
              "Create a topic when a client asks for unknown metadata. Off by default: a typo in a "
              "producer's topic name should fail loudly, not create a stray topic."),
    ConfigDef("min.insync.replicas", "int", 1, "Default min.insync.replicas of topics.", _at_least(1)),
    ConfigDef("unclean.leader.election.enable", "bool", False,
              "Default for topics: allow an out-of-sync replica to become leader (may lose data)."),
    ConfigDef("replica.lag.time.max.ms", "long", 30000,
              "A follower not caught up for this long (ms) leaves the ISR.", _at_least(1)),
    ConfigDef("max.incremental.fetch.session.cache.slots", "int", 1000,
              "Incremental fetch sessions (KIP-227) kept per broker; 0 turns them off.", _at_least(0)),
    ConfigDef("min.incremental.fetch.session.eviction.ms", "int", 120000,
              "A full cache evicts a session only after it was idle this long (ms).", _at_least(0)),
    ConfigDef("replica.high.watermark.checkpoint.interval.ms", "long", 5000,
              "How often high watermarks are written to replication-offset-checkpoint (ms).",
              _at_least(1)),
    ConfigDef("replica.fetch.max.bytes", "int", 1048576, "Bytes per partition per follower fetch.",
              _at_least(1)),
    ConfigDef("replica.fetch.wait.max.ms", "int", 500, "Follower fetch long-poll time (ms).", _at_least(0)),
    # at least 1, where Kafka takes 0: a fetch for 0 bytes is ready at once (min_bytes is cut
    # to it), so the followers would fetch in a busy loop
    ConfigDef("replica.fetch.response.max.bytes", "int", 10485760,
              "Bytes a follower asks for in all (its fetches' max_bytes).", _at_least(1)),
    ConfigDef("replica.fetch.min.bytes", "int", 1,
              "Bytes a follower's fetch waits for (up to replica.fetch.wait.max.ms).", _at_least(1)),
    ConfigDef("fetch.max.bytes", "int", FETCH_MAX_BYTES,
              "Most bytes any Fetch is answered with (consumers and followers; a first batch "
              "larger than this still goes out alone, KIP-74).", _at_least(1024)),
    ConfigDef("broker.heartbeat.interval.ms", "int", 2000, "Heartbeat period to the controller (ms).",
              _at_least(1)),
    ConfigDef("broker.session.timeout.ms", "int", 9000,
              "Session length the controller grants (ms); informational on the broker.", _at_least(1)),
    ConfigDef("message.max.bytes", "int", 1048588, "Largest record batch accepted (bytes).", _at_least(0)),
    ConfigDef("socket.request.max.bytes", "int", 104857600, "Largest request frame (bytes).",
              _at_least(1)),
    ConfigDef("log.segment.bytes", "int", 1073741824, "Segment size before rolling (bytes).",
              _at_least(14)),
    ConfigDef("log.roll.ms", "long", 604800000, "Segment age before rolling (ms).", _at_least(1)),
    ConfigDef("log.retention.ms", "long", 604800000, "Delete closed segments older than this (ms; -1 = never)."),
    ConfigDef("log.retention.bytes", "long", -1, "Delete oldest segments above this size (bytes; -1 = never)."),
    ConfigDef("log.retention.check.interval.ms", "long", 300000, "How often retention runs (ms).",
              _at_least(1)),
    ConfigDef("log.flush.interval.messages", "long", 2**63 - 1, "fsync after this many messages."),
    ConfigDef("log.flush.interval.ms", "long", None, "fsync a partition at least this often (ms)."),
    ConfigDef("log.cleanup.policy", "list", ["delete"], "delete, compact or both."),
    ConfigDef("log.message.timestamp.before.max.ms", "long", 2**63 - 1,
              "Refuse a produced CreateTime record older than now minus this (ms).", _at_least(0)),
    ConfigDef("log.message.timestamp.after.max.ms", "long", 2**63 - 1,
              "Refuse a produced CreateTime record newer than now plus this (ms).", _at_least(0)),
    ConfigDef("log.message.timestamp.difference.max.ms", "long", 2**63 - 1,
              "Deprecated: both limits above while they keep their default (ms).", _at_least(0)),
    ConfigDef("offsets.topic.num.partitions", "int", 50, "Partitions of __consumer_offsets.", _at_least(1)),
    ConfigDef("offsets.topic.replication.factor", "int", 3, "Replication factor of __consumer_offsets.",
              _at_least(1)),
    ConfigDef("offsets.topic.segment.bytes", "int", 104857600,
              "segment.bytes of __consumer_offsets: compaction cleans only rolled segments, and a "
              "new coordinator replays the rest.", _at_least(1)),
    ConfigDef("transaction.state.log.num.partitions", "int", 50,
              "Partitions of __transaction_state.", _at_least(1)),
    ConfigDef("transaction.state.log.replication.factor", "int", 3,
              "Replication factor of __transaction_state.", _at_least(1)),
    ConfigDef("transaction.state.log.min.isr", "int", 2,
              "min.insync.replicas of __transaction_state.", _at_least(1)),
    ConfigDef("transaction.state.log.segment.bytes", "int", 104857600,
              "segment.bytes of __transaction_state (see offsets.topic.segment.bytes).",
              _at_least(1)),
    ConfigDef("transaction.max.timeout.ms", "int", 900000,
              "Largest transaction.timeout.ms a producer may ask for (ms).", _at_least(1)),
    ConfigDef("transaction.abort.timed.out.transaction.cleanup.interval.ms", "int", 10000,
              "How often transactions past their timeout are looked for and aborted (ms).",
              _at_least(1)),
    ConfigDef("transactional.id.expiration.ms", "int", 604800000,
              "A transactional id with no transaction for this long is forgotten (ms).",
              _at_least(1)),
    ConfigDef("producer.id.expiration.ms", "int", 86400000,
              "A partition forgets an idle producer's sequence state after this long (ms).",
              _at_least(1)),
    ConfigDef("group.initial.rebalance.delay.ms", "int", 3000, "Delay of the first rebalance (ms).",
              _at_least(0)),
    ConfigDef("group.min.session.timeout.ms", "int", 6000, "Smallest session timeout a member may ask for.",
              _at_least(1)),
    ConfigDef("group.max.session.timeout.ms", "int", 1800000, "Largest session timeout a member may ask for.",
              _at_least(1)),
    ConfigDef("group.consumer.session.timeout.ms", "int", 45000,
              "KIP-848 consumer groups: session timeout (ms).", _at_least(1)),
    ConfigDef("group.consumer.heartbeat.interval.ms", "int", 5000,
              "KIP-848 consumer groups: heartbeat interval given to members (ms).", _at_least(1)),
    ConfigDef("offsets.retention.minutes", "int", 10080,
              "Committed offsets of a group without members expire this long after it emptied.",
              _at_least(1)),
    ConfigDef("offsets.retention.check.interval.ms", "long", 600000, "How often offsets expire (ms).",
              _at_least(1)),
    ConfigDef("raftka.group.lag.interval.ms", "long", 5000,
              "How often the coordinator refreshes consumer lag (ms).", _at_least(1)),
    ConfigDef("num.recovery.threads.per.data.dir", "int", 2,
              "Threads opening (and after a crash recovering) partition logs when many are "
              "hosted at once, as at start; the event loop keeps serving meanwhile.", _at_least(1)),
    ConfigDef("raftka.log.max.open.files", "int", 0,
              "Segment files a broker keeps open at most (least recently used closed first, "
              "reopened on demand), so its descriptors do not grow with its partitions. 0: half "
              "of the process's open-file limit (after raising the soft limit to the hard one), "
              "leaving the rest for connections. Minimum 16.", _at_least(0)),
    ConfigDef("raftka.storage.fault.file", "string", None,
              "Fault injection for tests: while this file (relative to the log dir) exists, every "
              "log write fails with ENOSPC, like a full disk. Unset in production."),
    ConfigDef("raftka.boot.id.file", "string", None,
              "Tests only: read the kernel boot id from this file (relative to the log dir) "
              "instead of /proc/sys/kernel/random/boot_id, to simulate a reboot (KIP-966 "
              "unclean-shutdown detection). Unset in production."),
    ConfigDef("raftka.clock.offset.file", "string", None,
              "Tests only: this process's wall clock is shifted by the seconds written in this "
              "file (relative to the log dir; re-read every 100 ms), to simulate a clock jump (fault F15). Unset in "
              "production."),
    ConfigDef("raftka.network.source.address", "string", None,
              "Local IP address every connection this broker opens (to controllers, leaders, "
              "coordinators) leaves from; unset, the kernel chooses. Test clusters whose nodes "
              "listen at their own loopback addresses set it, so that network faults by address "
              "cut a node's outgoing links too."),
    ConfigDef("raftka.metrics.listener", "string", None,
              "host:port of the Prometheus /metrics and the /health/live, /health/ready "
              "endpoint (off when unset)."),
    ConfigDef("raftka.offsets.retention.ms", "long", None,
              "Overrides offsets.retention.minutes with milliseconds (tests, finer control).",
              _at_least(1)),
    ConfigDef("connections.max.idle.ms", "long", 600000, "Close idle client connections after (ms).",
              _at_least(1)),
    ConfigDef("metadata.log.dir", "string", None, "Where the metadata image cache is kept."),
    # -- replication throttles (replication/throttle.py); the rates are also dynamic configs --
    ConfigDef("leader.replication.throttled.rate", "long", 2**63 - 1,
              "Bytes/s this broker serves to followers of the replicas listed in topics' "
              "leader.replication.throttled.replicas (default: unlimited).", _at_least(0)),
    ConfigDef("follower.replication.throttled.rate", "long", 2**63 - 1,
              "Bytes/s this broker fetches for the replicas listed in topics' "
              "follower.replication.throttled.replicas (default: unlimited).", _at_least(0)),
    ConfigDef(MOVES_THROTTLED_RATE, "long", DEFAULT_MOVES_THROTTLED_RATE,
              "Bytes/s this broker sends as a source and fetches as a new replica for "
              "reassignment copies that no topic's *.replication.throttled.replicas lists — "
              "the balancer's, re-replication's, and moves started without --throttle "
              f"({LONG_MAX} = unlimited). Also dynamic, per broker or cluster-wide.",
              _at_least(1)),
    ConfigDef(ALTER_LOG_DIRS_RATE, "long", LONG_MAX,
              "Bytes/s copied between this broker's log directories by AlterReplicaLogDirs "
              f"moves, all moves together ({LONG_MAX} = unlimited). Also dynamic, per broker or "
              "cluster-wide (log_dir_moves.py).", _at_least(1)),
    # -- self-healing (issue 19): read by the active controller from the dynamic cluster-wide
    # value only (IncrementalAlterConfigs on the default broker resource); declared here so that
    # DescribeConfigs of a broker shows that value (`raftka cluster balance --status` reads it)
    ConfigDef("raftka.rereplication.timeout.ms", "long", -1,
              "Replicas of a broker unreachable this long are re-placed on live brokers by the "
              "controller; -1 never. Dynamic cluster-wide only.", _at_least(-1)),
    # KIP-966 unclean recovery (metadata_quorum/controller/unclean_recovery.py): read by the
    # active controller from topic configs and the dynamic cluster-wide value only
    ConfigDef("unclean.recovery.strategy", "string", "Balanced",
              "Default for topics: how a partition whose ISR and ELR are both empty gets a "
              "leader. None: the former last ISR member, once every last copy is back; "
              "Balanced: the longest log once every last copy (or a majority of replicas) "
              "reported it, or unclean.recovery.timeout.ms passed; Aggressive: the longest log "
              "among the replicas that reported, at once. Dynamic cluster-wide or per topic.",
              _one_of("None", "Balanced", "Aggressive")),
    ConfigDef("unclean.recovery.timeout.ms", "long", 300_000,
              "How long a Balanced unclean recovery waits for the replicas it wants to hear "
              "from before electing among those it heard. Dynamic cluster-wide only.",
              _at_least(0)),
    ConfigDef("raftka.balancer.enable", "bool", False,
              "The controller evens replica and preferred-leader counts per broker. Dynamic "
              "cluster-wide only."),
    ConfigDef("raftka.balancer.max.moves", "int", 4,
              "At most this many reassignments in progress before the balancer starts more. "
              "Dynamic cluster-wide only.", _at_least(1)),
    ConfigDef("raftka.balancer.threshold", "int", 1,
              "The balancer acts when max - min of replica (or preferred-leader) counts per "
              "broker exceeds this. Dynamic cluster-wide only.", _at_least(1)),
    ConfigDef("raftka.balancer.disk.threshold.percent", "int", 10,
              "The balancer evens disk bytes per broker when max - min exceeds this percent of "
              "the mean (and raftka.balancer.disk.min.skew.bytes). Dynamic cluster-wide only.",
              _at_least(1)),
    ConfigDef("raftka.balancer.disk.min.skew.bytes", "long", 256 << 20,
              "Disk bytes per broker closer than this are balanced whatever the percent. "
              "Dynamic cluster-wide only.", _at_least(0)),
    ConfigDef("raftka.load.report.interval.ms", "int", 30_000,
              "How often this broker reports the sizes of the partitions it leads to the active "
              "controller (on its heartbeat), for the balancer's disk goal.", _at_least(100)),
    ConfigDef("replication.quota.window.num", "int", 11,
              "Samples kept to measure replication throttle rates.", _at_least(1)),
    ConfigDef("replication.quota.window.size.seconds", "int", 1,
              "Length of one replication throttle sample (s).", _at_least(1)),
    ConfigDef("quota.window.num", "int", 11, "Samples kept to measure client quota rates.",
              _at_least(1)),
    ConfigDef("quota.window.size.seconds", "int", 1, "Length of one client quota sample (s).",
              _at_least(1)),
    # -- security (partition_server/security, configs/secure/README.md) --
    ConfigDef("listener.security.protocol.map", "list", None,
              "NAME:PROTOCOL pairs (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL); listeners named "
              "like a protocol use it."),
    ConfigDef("inter.broker.listener.name", "string", None,
              "Listener other brokers use to reach this one (default: the first)."),
    ConfigDef("sasl.enabled.mechanisms", "list", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"],
              "SASL mechanisms offered on SASL listeners."),
    ConfigDef("sasl.server.max.receive.size", "int", 524288,
              "Largest frame (bytes) accepted before a connection has authenticated.", _at_least(64)),
    ConfigDef("connections.max.reauth.ms", "long", 0,
              "SASL session lifetime (ms): clients must re-authenticate before it ends; 0 = never.",
              _at_least(0)),
    ConfigDef("max.connections", "int", 2147483647, "Connections accepted by this broker in total.",
              _at_least(1)),
    ConfigDef("max.connections.per.ip", "int", 2147483647, "Connections accepted per client IP.",
              _at_least(1)),
    ConfigDef("ssl.keystore.location", "string", None,
              "PEM file with the server certificate chain and private key (SSL listeners)."),
    ConfigDef("ssl.keystore.type", "string", "PEM", "Only PEM.", _one_of("PEM")),
    ConfigDef("ssl.key.password", "string", None, "Password of an encrypted private key."),
    ConfigDef("ssl.truststore.location", "string", None,
              "PEM CA bundle: verifies client certificates, and other nodes on inter-node TLS links."),
    ConfigDef("ssl.truststore.type", "string", "PEM", "Only PEM.", _one_of("PEM")),
    ConfigDef("ssl.client.auth", "string", "none", "none, requested or required.",
              _one_of("none", "requested", "required")),
    ConfigDef("authorizer.class.name", "string", None,
              "Set (to any value, e.g. org.apache.kafka.metadata.authorizer.StandardAuthorizer) "
              "to enforce ACLs on every API; unset = no authorization, as in Kafka."),
    ConfigDef("super.users", "string", None, "Principals allowed everything: User:a;User:b."),
    ConfigDef("allow.everyone.if.no.acl.found", "bool", False,
              "With an authorizer: allow access to resources no ACL names."),
    ConfigDef("raftka.inter.node.sasl.mechanism", "string", "SCRAM-SHA-512",
              "SASL mechanism this node uses towards controllers and other brokers.",
              _one_of("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")),
    ConfigDef("raftka.inter.node.sasl.username", "string", None,
              "Inter-node user: authenticates brokers to controllers and followers to leaders; "
              "a super user. Every node of a cluster shares it."),
    ConfigDef("raftka.inter.node.sasl.password", "string", None, "Password of the inter-node user."),
    ConfigDef("raftka.controller.security.protocol", "string", "PLAINTEXT",
              "How to reach the controllers' listener.",
              _one_of("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")),
]}


# broker defaults of topic configs: a topic without its own value takes the broker's
BROKER_TO_TOPIC = {
    "log.segment.bytes": "segment.bytes", "log.roll.ms": "segment.ms",
    "log.retention.ms": "retention.ms", "log.retention.bytes": "retention.bytes",
    "log.flush.interval.messages": "flush.messages", "log.flush.interval.ms": "flush.ms",
    "log.cleanup.policy": "cleanup.policy", "message.max.bytes": "max.message.bytes",
    "min.insync.replicas": "min.insync.replicas",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
    "unclean.recovery.strategy": "unclean.recovery.strategy",
    "log.message.timestamp.before.max.ms": "message.timestamp.before.max.ms",
    "log.message.timestamp.after.max.ms": "message.timestamp.after.max.ms",
    "log.message.timestamp.difference.max.ms": "message.timestamp.difference.max.ms",
}


def config_value(config, key: str) -> Any:
    """Broker setting `key` from `config` (a BrokerConfig, or the plain dict a test built, which
    may leave it out: then its default from BROKER_CONFIG_DEFS)."""
    try:
        return config[key]
    except KeyError:
        return BROKER_CONFIG_DEFS[key].default


def _parse(defn: ConfigDef, raw: str) -> Any:
    raw = raw.strip()
    if defn.type in ("int", "long"):
        try:
            return int(raw)
        except ValueError:
            raise ConfigError(f"{defn.name}={raw!r}: not an integer") from None
    if defn.type == "double":
        try:
            return float(raw)
        except ValueError:
            raise ConfigError(f"{defn.name}={raw!r}: not a number") from None
    if defn.type == "bool":
        if raw.lower() in ("true", "false"):
            return raw.lower() == "true"
        raise ConfigError(f"{defn.name}={raw!r}: must be true or false")
    if defn.type == "list":
        return [item.strip() for item in raw.split(",") if item.strip()]
    return raw


# Kafka's `listener.name.<listener>.<key>` overrides accepted for these keys
PER_LISTENER_KEYS = ("sasl.enabled.mechanisms", "sasl.server.max.receive.size",
                     "connections.max.reauth.ms", "ssl.keystore.location", "ssl.key.password",
                     "ssl.truststore.location", "ssl.client.auth")


def _listener_overrides(props: dict, values: dict, problems: list[str]) -> dict:
    """{(LISTENER, key): parsed value} from `listener.name.<listener>.<key>` properties."""
    from common.listeners import ListenerConfigError, parse_listeners
    try:
        names = {x.name for x in parse_listeners(values["listeners"],
                                                 values["listener.security.protocol.map"])}
    except ListenerConfigError:
        return {}                       # reported by the listener check
    out = {}
    for key, raw in props.items():
        if not key.startswith("listener.name."):
            continue
        name, _, setting = key[len("listener.name."):].partition(".")
        if name.upper() not in names:
            problems.append(f"{key}: no listener named {name.upper()}")
        elif setting not in PER_LISTENER_KEYS:
            problems.append(f"{key}: per-listener {setting!r} is not supported "
                            f"(supported: {', '.join(PER_LISTENER_KEYS)})")
        else:
            defn = BROKER_CONFIG_DEFS[setting]
            try:
                value = _parse(defn, raw)
            except ConfigError as exc:
                problems.append(f"{key}: {exc}")
                continue
            err = defn.validator(value) if defn.validator else None
            if err:
                problems.append(f"{key}={raw}: {err}")
                continue
            out[(name.upper(), setting)] = value
    return out


def _check_security(values: dict, problems: list[str], overrides: dict) -> None:
    """Fail at start-up, with the key named, rather than on the first TLS connection."""
    from common.listeners import resolve
    from common.sasl import SUPPORTED_MECHANISMS
    from common.tls import TlsConfigError, server_context
    bound = resolve(values["listeners"], values["advertised.listeners"],
                    values["listener.security.protocol.map"],
                    values["inter.broker.listener.name"]).bound
    for x in bound:
        def get(key, name=x.name):
            return overrides.get((name, key), values[key])
        if x.uses_tls:
            try:
                server_context(get("ssl.keystore.location"), get("ssl.key.password"),
                               get("ssl.truststore.location"), get("ssl.client.auth"))
            except TlsConfigError as exc:
                problems.append(f"listener {x.name}: {exc}")
        unknown = [m for m in get("sasl.enabled.mechanisms") if m not in SUPPORTED_MECHANISMS]
        if unknown:
            problems.append(f"sasl.enabled.mechanisms of {x.name}: {', '.join(unknown)} not "
                            f"supported (supported: {', '.join(SUPPORTED_MECHANISMS)})")


@dataclasses.dataclass(frozen=True)
class BrokerConfig:
    values: dict[str, Any]
    # {(LISTENER, key): value} from listener.name.<listener>.<key> (see PER_LISTENER_KEYS)
    listener_overrides: dict = dataclasses.field(default_factory=dict)
    # keys the properties set (DescribeConfigs: STATIC_BROKER_CONFIG rather than DEFAULT_CONFIG)
    static_keys: frozenset = frozenset()

    @classmethod
    def from_properties(cls, props: dict[str, str], *, allow_unknown_prefixes: tuple[str, ...] = (
            "controller.", "raftka.", "metadata.", "node.", "process.")) -> "BrokerConfig":
        """Validate `props`; keys owned by the controller role are tolerated in combined files."""
        problems: list[str] = []
        values: dict[str, Any] = {name: d.default for name, d in BROKER_CONFIG_DEFS.items()}
        for key, raw in props.items():
            defn = BROKER_CONFIG_DEFS.get(key)
            if defn is None:
                if not key.startswith(allow_unknown_prefixes + ("listener.name.",)):
                    problems.append(f"{key}: unknown broker config")
                continue
            try:
                value = _parse(defn, raw)
            except ConfigError as exc:
                problems.append(str(exc))
                continue
            err = defn.validator(value) if defn.validator else None
            if err:
                problems.append(f"{key}={raw}: {err}")
                continue
            values[key] = value
        if values["node.id"] is None:
            problems.append("node.id: required")
        if not values["controller.quorum.voters"]:
            problems.append("controller.quorum.voters: required")
        else:
            try:
                parse_voters(values["controller.quorum.voters"])
            except ConfigError as exc:
                problems.append(str(exc))
        client_listeners = [x for x in values["listeners"] if not x.upper().startswith("CONTROLLER:")]
        values["listeners"] = client_listeners or values["listeners"]
        for listener in values["listeners"] + (values["advertised.listeners"] or []):
            try:
                parse_endpoint(listener)
            except ConfigError as exc:
                problems.append(str(exc))
        overrides = _listener_overrides(props, values, problems) if not problems else {}
        if not problems:
            try:
                from common.listeners import ListenerConfigError, resolve
                resolve(values["listeners"], values["advertised.listeners"],
                        values["listener.security.protocol.map"],
                        values["inter.broker.listener.name"])
                _check_security(values, problems, overrides)
            except ListenerConfigError as exc:
                problems.append(str(exc))
        if bool(values["raftka.inter.node.sasl.username"]) != \
                bool(values["raftka.inter.node.sasl.password"]):
            problems.append("raftka.inter.node.sasl.username and .password go together")
        if problems:
            raise ConfigError("; ".join(problems))
        return cls(values, overrides, frozenset(k for k in props if k in BROKER_CONFIG_DEFS))

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def listener_get(self, listener_name: str):
        """A `get(key)` for one listener: its override, else the broker-wide value."""
        return lambda key: self.listener_overrides.get((listener_name, key), self.values.get(key))

    @property
    def node_id(self) -> int:
        return self.values["node.id"]

    @property
    def voters(self) -> dict[int, tuple[str, int]]:
        return parse_voters(self.values["controller.quorum.voters"])

    @property
    def client_endpoint(self) -> tuple[str, int]:
        """(host, port) this broker binds for clients: the first listener."""
        _, host, port = parse_endpoint(self.values["listeners"][0])
        return host, port

    @property
    def advertised_endpoint(self) -> tuple[str, str, int]:
        listeners = self.values["advertised.listeners"] or self.values["listeners"]
        return parse_endpoint(listeners[0])
