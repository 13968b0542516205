"""The options of Spark's Kafka integration guide, read into typed settings (no I/O).

Names and defaults follow Spark's guide so a query moves between `format("kafka")` and
`format("raftka")` unchanged. Spark hands options over case-insensitively (lower-cased keys);
`kafka.*` options are passed through to our client without the prefix. Bad options raise
ValueError with a message naming the option, at query start on the driver.
"""

from __future__ import annotations

import dataclasses
import re

from spark_connector import offsets as off
from spark_connector.kafka_io import ClientConfig

# Kafka consumer settings Spark refuses because the source manages them itself.
_UNSUPPORTED_SOURCE = {
    "group.id": None,      # accepted by Spark 3+; we keep no consumer group, so it is ignored
    "auto.offset.reset": "Set the source option 'startingOffsets' instead.",
    "key.deserializer": "Keys are always read as bytes; cast the column (CAST(key AS STRING)).",
    "value.deserializer": "Values are always read as bytes; cast the column.",
    "enable.auto.commit": "The source does not commit any offsets to Kafka.",
    "interceptor.classes": "Raftka's connector does not run Kafka interceptors.",
}
_UNSUPPORTED_SINK = {
    "key.serializer": "Keys are written as bytes; give a string or binary 'key' column.",
    "value.serializer": "Values are written as bytes; give a string or binary 'value' column.",
}


def _bool(opts, name: str, default: bool) -> bool:
    v = opts.get(name.lower())
    if v is None:
        return default
    s = str(v).strip().lower()
    if s not in ("true", "false"):
        raise ValueError(f"option '{name}' must be 'true' or 'false', got {v!r}")
    return s == "true"


def _int(opts, name: str, minimum: int = 1) -> int | None:
    v = opts.get(name.lower())
    if v is None:
        return None
    try:
        n = int(str(v).strip())
    except ValueError:
        raise ValueError(f"option '{name}' must be an integer, got {v!r}") from None
    if n < minimum:
        raise ValueError(f"option '{name}' must be >= {minimum}, got {n}")
    return n


def kafka_params(opts) -> dict[str, str]:
    return {k[len("kafka."):]: str(v) for k, v in opts.items() if k.startswith("kafka.")}


@dataclasses.dataclass(frozen=True)
class Subscription:
    """The topic-partitions a query reads: one of subscribe / subscribePattern / assign."""
    kind: str                                  # "subscribe" | "subscribePattern" | "assign"
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: tuple[off.TopicPartition, ...] = ()

    def matches(self, topic: str) -> bool:
        if self.kind == "subscribe":
            return topic in self.topics
        if self.kind == "subscribePattern":
            return re.fullmatch(self.pattern, topic) is not None
        return any(t == topic for t, _ in self.assigned)

    def metadata_topics(self) -> list[str] | None:
        """Topics to ask Metadata for (None: all of them, for a pattern)."""
        if self.kind == "subscribe":
            return list(self.topics)
        if self.kind == "assign":
            return sorted({t for t, _ in self.assigned})
        return None

    def select(self, found: dict[str, list[int]]) -> set[off.TopicPartition]:
        """The subscribed topic-partitions among those that exist."""
        if self.kind == "assign":
            return {tp for tp in self.assigned if tp[1] in found.get(tp[0], ())}
        return {(t, p) for t, ps in found.items() if self.matches(t) for p in ps}


@dataclasses.dataclass(frozen=True)
class OffsetSpec:
    """A start or end position: 'earliest' | 'latest' | per-partition offsets | timestamps."""
    kind: str                        # earliest | latest | offsets | timestamps | timestamp
    offsets: tuple[tuple[off.TopicPartition, int], ...] = ()
    timestamp: int | None = None               # kind == "timestamp": one for every partition

    @property
    def offset_map(self) -> off.Offsets:
        return dict(self.offsets)


@dataclasses.dataclass(frozen=True)
class SourceOptions:
    client: ClientConfig
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    timestamp_strategy: str = "error"          # startingOffsetsByTimestampStrategy: error | latest
    fail_on_data_loss: bool = True
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60 * 1000
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    include_headers: bool = False
    isolation_level: int = 0                   # kafka.isolation.level: 0 uncommitted, 1 committed
    fetch_max_bytes: int = 4 << 20             # kafka.max.partition.fetch.bytes
    poll_timeout_ms: int = 120_000             # kafkaConsumer.pollTimeoutMs


def _subscription(opts) -> Subscription:
    given = [k for k in ("subscribe", "subscribepattern", "assign") if opts.get(k) is not None]
    if len(given) != 1:
        raise ValueError("exactly one of the options 'subscribe', 'subscribePattern' or 'assign' "
                         f"must be specified ({'none' if not given else ', '.join(given)} given)")
    kind = given[0]
    value = str(opts[kind])
    if kind == "subscribe":
        topics = tuple(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise ValueError("option 'subscribe' names no topic")
        return Subscription("subscribe", topics=topics)
    if kind == "subscribepattern":
        if not value.strip():
            raise ValueError("option 'subscribePattern' is empty")
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"option 'subscribePattern' is not a valid regex: {exc}") from None
        return Subscription("subscribePattern", pattern=value)
    return Subscription("assign", assigned=tuple(off.parse_assign_json(value)))


def _offset_spec(opts, prefix: str, default: str, streaming: bool) -> OffsetSpec:
    """Spark's precedence: <prefix>Timestamp > <prefix>OffsetsByTimestamp > <prefix>Offsets."""
    ts = opts.get(f"{prefix}timestamp")
    if ts is not None:
        try:
            return OffsetSpec("timestamp", timestamp=int(ts))
        except ValueError:
            raise ValueError(f"option '{prefix}Timestamp' must be epoch milliseconds, got {ts!r}") \
                from None
    by_ts = opts.get(f"{prefix}offsetsbytimestamp")
    if by_ts is not None:
        parsed = off.parse_offsets_json(str(by_ts), f"{prefix}OffsetsByTimestamp")
        return OffsetSpec("timestamps", offsets=tuple(sorted(parsed.items())))
    raw = opts.get(f"{prefix}offsets", default)
    name = f"{prefix}Offsets"
    s = str(raw).strip()
    if s.lower() in ("earliest", "latest"):
        kind = s.lower()
        if not streaming and prefix == "starting" and kind == "latest":
            raise ValueError("option 'startingOffsets' cannot be 'latest' for a batch query")
        if prefix == "ending" and kind == "earliest":
            raise ValueError("option 'endingOffsets' cannot be 'earliest'")
        return OffsetSpec(kind)
    parsed = off.parse_offsets_json(s, name)
    for tp, n in parsed.items():
        if n < off.EARLIEST:
            raise ValueError(f"option '{name}': offset {n} of {tp[0]}-{tp[1]} is invalid "
                             "(use -2 for earliest, -1 for latest, or an offset >= 0)")
        if prefix == "ending" and n == off.EARLIEST:
            raise ValueError(f"option '{name}': -2 (earliest) is not allowed as an ending offset")
        if prefix == "starting" and not streaming and n == off.LATEST:
            raise ValueError(f"option '{name}': -1 (latest) is not allowed as a starting offset "
                             "of a batch query")
    return OffsetSpec("offsets", offsets=tuple(sorted(parsed.items())))


def source_options(opts, streaming: bool) -> SourceOptions:
    opts = {str(k).lower(): v for k, v in opts.items()}
    params = kafka_params(opts)
    for name, why in _UNSUPPORTED_SOURCE.items():
        if name in params and why is not None:
            raise ValueError(f"Kafka option 'kafka.{name}' is not supported. {why}")
    if streaming and any(k in opts for k in ("endingoffsets", "endingoffsetsbytimestamp",
                                             "endingtimestamp")):
        raise ValueError("ending offsets options are for batch queries only "
                         "(spark.read), not for readStream")
    strategy = str(opts.get("startingoffsetsbytimestampstrategy", "error")).strip().lower()
    if strategy not in ("error", "latest"):
        raise ValueError("option 'startingOffsetsByTimestampStrategy' must be 'error' or 'latest'")
    isolation = params.get("isolation.level", "read_uncommitted").strip().lower()
    if isolation not in ("read_uncommitted", "read_committed"):
        raise ValueError("kafka.isolation.level must be read_uncommitted or read_committed")
    delay = opts.get("maxtriggerdelay")
    max_offsets = _int(opts, "maxOffsetsPerTrigger")
    min_offsets = _int(opts, "minOffsetsPerTrigger")
    if max_offsets is not None and min_offsets is not None and min_offsets > max_offsets:
        raise ValueError(f"option 'minOffsetsPerTrigger' ({min_offsets}) must not be above "
                         f"'maxOffsetsPerTrigger' ({max_offsets})")
    return SourceOptions(
        client=ClientConfig.from_kafka_params(params),
        subscription=_subscription(opts),
        starting=_offset_spec(opts, "starting", "latest" if streaming else "earliest", streaming),
        ending=_offset_spec(opts, "ending", "latest", streaming) if not streaming
        else OffsetSpec("latest"),
        timestamp_strategy=strategy,
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        max_offsets_per_trigger=max_offsets,
        min_offsets_per_trigger=min_offsets,
        max_trigger_delay_ms=off.parse_duration_ms(str(delay)) if delay is not None
        else 15 * 60 * 1000,
        min_partitions=_int(opts, "minPartitions"),
        max_records_per_partition=_int(opts, "maxRecordsPerPartition"),
        include_headers=_bool(opts, "includeHeaders", False),
        isolation_level=1 if isolation == "read_committed" else 0,
        fetch_max_bytes=int(params.get("max.partition.fetch.bytes", 4 << 20)),
        poll_timeout_ms=_int(opts, "kafkaConsumer.pollTimeoutMs", 0) or 120_000,
    )


@dataclasses.dataclass(frozen=True)
class SinkOptions:
    client: ClientConfig
    topic: str | None
    acks: int = -1
    compression: int = 0
    batch_bytes: int = 1 << 20
    include_headers: bool = True


_ACKS = {"all": -1, "-1": -1, "1": 1, "0": 0}
_COMPRESSION = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def sink_options(opts) -> SinkOptions:
    opts = {str(k).lower(): v for k, v in opts.items()}
    params = kafka_params(opts)
    for name, why in _UNSUPPORTED_SINK.items():
        if name in params:
            raise ValueError(f"Kafka option 'kafka.{name}' is not supported. {why}")
    acks = str(params.get("acks", "all")).strip().lower()
    if acks not in _ACKS:
        raise ValueError(f"kafka.acks must be all, -1, 1 or 0, got {acks!r}")
    comp = str(params.get("compression.type", "none")).strip().lower()
    if comp not in _COMPRESSION:
        raise ValueError(f"kafka.compression.type must be one of {', '.join(_COMPRESSION)}")
    topic = opts.get("topic")
    return SinkOptions(client=ClientConfig.from_kafka_params(params),
                       topic=str(topic) if topic is not None else None,
                       acks=_ACKS[acks], compression=_COMPRESSION[comp],
                       batch_bytes=int(params.get("batch.size", 1 << 20)))

