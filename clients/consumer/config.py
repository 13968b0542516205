"""Consumer configuration (Kafka's keys and defaults), the consumer's own error type and the
listener-calling helper, split from consumer.py to keep that module about the consumer itself."""

from __future__ import annotations

import inspect

from wire.errors import ErrorCode, KafkaError

DEFAULTS: dict[str, object] = {
    "bootstrap.servers": None, "group.id": None, "group.instance.id": None,
    "client.id": "raftka-consumer", "auto.offset.reset": "latest", "enable.auto.commit": True,
    "auto.commit.interval.ms": 5000, "isolation.level": "read_uncommitted",
    "max.poll.records": 500, "fetch.min.bytes": 1, "fetch.max.wait.ms": 500,
    "fetch.max.bytes": 52_428_800, "max.partition.fetch.bytes": 1_048_576,
    "session.timeout.ms": 45_000, "heartbeat.interval.ms": 3000, "max.poll.interval.ms": 300_000,
    "partition.assignment.strategy": "range,cooperative-sticky", "request.timeout.ms": 30_000,
    "retry.backoff.ms": 100, "metadata.max.age.ms": 300_000,
    # KIP-848: "consumer" joins with ConsumerGroupHeartbeat and lets the coordinator assign
    # (then partition.assignment.strategy, session.timeout.ms and heartbeat.interval.ms are the
    # broker's business: group.consumer.* on the broker); group.remote.assignor picks one of the
    # broker's assignors (uniform, range), None = the broker's default
    "group.protocol": "classic", "group.remote.assignor": None,
}


CLASSIC_ONLY = {"session.timeout.ms", "heartbeat.interval.ms", "partition.assignment.strategy"}


class NoOffsetForPartitionError(KafkaError):
    """auto.offset.reset=none and the partition has no committed offset (or it is out of
    range)."""
    code = ErrorCode.OFFSET_OUT_OF_RANGE


def parse_config(config: dict | None, kwargs: dict) -> dict[str, object]:
    """Merge Kafka-style keys and keyword arguments over the defaults, coercing strings (from a
    properties file) to the defaults' types; unknown keys are kept (and ignored)."""
    merged = dict(DEFAULTS)
    given = list((config or {}).items()) + [(k.replace("_", "."), v) for k, v in kwargs.items()]
    for key, value in given:
        default = DEFAULTS.get(key)
        if isinstance(value, str) and isinstance(default, bool):
            if value.lower() not in ("true", "false"):
                raise ValueError(f"{key} must be true or false, got {value!r}")
            value = value.lower() == "true"
        elif isinstance(value, str) and isinstance(default, int):
            try:
                value = int(value)
            except ValueError:
                raise ValueError(f"{key} must be an integer, got {value!r}") from None
        merged[key] = value
    if merged["auto.offset.reset"] not in ("earliest", "latest", "none"):
        raise ValueError(f"auto.offset.reset must be earliest, latest or none, got "
                         f"{merged['auto.offset.reset']!r}")
    if merged["isolation.level"] not in ("read_uncommitted", "read_committed"):
        raise ValueError(f"isolation.level must be read_uncommitted or read_committed, got "
                         f"{merged['isolation.level']!r}")
    protocol = str(merged["group.protocol"]).strip().lower()
    if protocol not in ("classic", "consumer"):
        raise ValueError(f"group.protocol must be classic or consumer, got "
                         f"{merged['group.protocol']!r}")
    merged["group.protocol"] = protocol
    assignor = merged["group.remote.assignor"]
    if assignor is not None and (not isinstance(assignor, str) or not assignor.strip()):
        raise ValueError(f"group.remote.assignor must be an assignor name (uniform, range), "
                         f"got {assignor!r}")
    if assignor is not None and protocol != "consumer":
        raise ValueError("group.remote.assignor needs group.protocol=consumer")
    if protocol == "consumer":
        # As Kafka's Java consumer does (a ConfigException): with KIP-848 the coordinator owns
        # these; quietly ignoring one would leave its user believing it applies.
        for key in sorted({k for k, _ in given} & CLASSIC_ONLY):
            raise ValueError(f"{key} is not supported with group.protocol=consumer: the group "
                             f"coordinator decides it (group.consumer.* on the broker"
                             f"{'; group.remote.assignor picks its assignor' if 'assignment' in key else ''})")
    return merged


async def call_listener(fn, tps: list) -> None:
    """Call a rebalance listener, sync or async."""
    if fn is None:
        return
    result = fn(tps)
    if inspect.isawaitable(result):
        await result
