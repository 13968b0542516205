"""The sink: `df.write.format("raftka")` and `df.writeStream.format("raftka")`.

Columns as in Spark's Kafka guide: `value` (required, string or binary), `key` (optional),
`topic` (unless the `topic` option is set, which wins), `partition` (optional int; without it a
keyed record goes to murmur2(key) % partitions like Kafka's default partitioner and an unkeyed
one to a sticky partition), `headers` (optional array<struct<key string, value binary>>).

Delivery is at-least-once: a task returns only after every record it was given is acknowledged
(kafka.acks, default all); a task that fails after some acknowledgements is re-run by Spark and
writes those records again. Exactly-once would need a transactional producer per task whose
transactional.id is derived from (query id, batch id, task partition) so a re-run fences the old
attempt, with the transactions committed from the driver's `commit(messages, batchId)` and
aborted from `abort` (and consumers reading with isolation.level=read_committed). That waits
for the broker's transactions (the exactly-once issue).
"""

from __future__ import annotations

import dataclasses
import logging
import time

from pyspark.sql.datasource import (DataSourceArrowWriter, DataSourceStreamArrowWriter,
                                    WriterCommitMessage)

from spark_connector import kafka_io
from spark_connector.options import SinkOptions
from wire.records.batch import RecordBatchBuilder

log = logging.getLogger(__name__)

MAX_BUFFERED_BYTES = 8 << 20        # send what is buffered once this much is waiting


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (as the Java client's Utils.murmur2), as an unsigned 32-bit value."""
    m, r = 0x5BD1E995, 24
    length = len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    end4 = length & ~3
    for i in range(0, end4, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    extra = length & 3
    if extra == 3:
        h ^= data[end4 + 2] << 16
    if extra >= 2:
        h ^= data[end4 + 1] << 8
    if extra >= 1:
        h ^= data[end4]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h


def default_partition(key: bytes, num_partitions: int) -> int:
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


def key_partitions(keys, num_partitions: int) -> list | None:
    """`default_partition` of every key of an Arrow binary/string array at once (None for a
    null key), with numpy: murmur2 in Python was a third of the sink's CPU. Keys are grouped
    by length, so each group is a (keys x length) byte matrix hashed column by column in
    wrapping uint32 arithmetic. None when numpy is not there (the caller hashes per row)."""
    try:
        import numpy as np
    except ImportError:
        return None
    import pyarrow as pa
    if pa.types.is_large_binary(keys.type) or pa.types.is_large_string(keys.type):
        return None
    n = len(keys)
    _, offsets_buf, data_buf = keys.buffers()[:3]
    offsets = np.frombuffer(offsets_buf, dtype=np.int32, count=keys.offset + n + 1)[keys.offset:]
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None and len(data_buf) \
        else np.zeros(0, np.uint8)
    lengths = np.diff(offsets)
    valid = keys.is_valid().to_numpy(zero_copy_only=False)
    m = np.uint32(0x5BD1E995)
    out = np.zeros(n, dtype=np.uint32)
    for length in np.unique(lengths[valid]):
        length = int(length)
        rows = np.nonzero(valid & (lengths == length))[0]
        mat = data[offsets[rows][:, None] + np.arange(length)].astype(np.uint32)
        h = np.full(len(rows), (0x9747B28C ^ length) & 0xFFFFFFFF, dtype=np.uint32)
        end4 = length & ~3
        for i in range(0, end4, 4):
            k = mat[:, i] | (mat[:, i + 1] << 8) | (mat[:, i + 2] << 16) | (mat[:, i + 3] << 24)
            k *= m
            k ^= k >> 24
            k *= m
            h *= m
            h ^= k
        extra = length & 3
        if extra == 3:
            h ^= mat[:, end4 + 2] << 16
        if extra >= 2:
            h ^= mat[:, end4 + 1] << 8
        if extra >= 1:
            h ^= mat[:, end4]
            h *= m
        h ^= h >> 13
        h *= m
        h ^= h >> 15
        out[rows] = h
    parts = ((out & np.uint32(0x7FFFFFFF)) % np.uint32(num_partitions)).tolist()
    if not valid.all():
        parts = [p if v else None for p, v in zip(parts, valid.tolist())]
    return parts


@dataclasses.dataclass
class SinkCommitMessage(WriterCommitMessage):
    records: int
    bytes: int


def _as_bytes(v):
    if v is None or isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return v.encode("utf-8")
    return bytes(v)


class TopicWriter:
    """Buffers records into one record batch per partition and sends them with acks; no Spark
    here, so tests drive it directly."""

    def __init__(self, o: SinkOptions):
        self.o = o
        self.client = kafka_io.get_client(o.client)
        self._num_partitions: dict[str, int] = {}
        self._sticky: dict[str, int] = {}
        self._builders: dict[tuple[str, int], RecordBatchBuilder] = {}
        self._ready: list[tuple[tuple[str, int], bytes]] = []
        self._ready_bytes = 0
        self.records = 0
        self.bytes = 0

    def partitions_of(self, topic: str) -> int:
        n = self._num_partitions.get(topic)
        if n is None:
            found = self.client.topic_partitions([topic])
            if topic not in found or not found[topic]:
                raise ValueError(f"topic {topic!r} does not exist (create it before writing)")
            n = self._num_partitions[topic] = len(found[topic])
        return n

    def add(self, topic: str, partition: int | None, key, value, headers=(),
            timestamp_ms: int | None = None) -> None:
        if topic is None:
            raise ValueError("a row has a null topic and no 'topic' option is set")
        n = self.partitions_of(topic)
        if partition is None:
            if key is not None:
                partition = default_partition(key, n)
            else:
                partition = self._sticky.setdefault(topic, int(time.time_ns()) % n)
        elif not 0 <= partition < n:
            raise ValueError(f"partition {partition} does not exist in topic {topic!r} "
                             f"({n} partitions)")
        self._append(topic, partition, key, value, headers, timestamp_ms)

    def _append(self, topic: str, partition: int, key, value, headers=(),
                timestamp_ms: int | None = None) -> None:
        """Add a record to an existing `partition` of `topic` (checked by the caller)."""
        tp = (topic, partition)
        b = self._builders.get(tp)
        if b is None:
            b = self._builders[tp] = RecordBatchBuilder(compression=self.o.compression)
        b.append(key, value, headers, timestamp_ms)
        self.records += 1
        if b.estimated_size >= self.o.batch_bytes:
            self._seal(tp)
            if partition == self._sticky.get(topic):
                n = self._num_partitions[topic]
                self._sticky[topic] = (partition + 1) % n      # the sticky partitioner moves on
            if self._ready_bytes >= MAX_BUFFERED_BYTES:
                self.flush()

    def _seal(self, tp) -> None:
        data = self._builders.pop(tp).build()
        self._ready.append((tp, data))
        self._ready_bytes += len(data)
        self.bytes += len(data)

    def flush(self) -> None:
        for tp in list(self._builders):
            self._seal(tp)
        # Produce v3+ takes one batch per partition a request: send in rounds
        while self._ready:
            round_: dict[tuple[str, int], bytes] = {}
            rest = []
            for tp, data in self._ready:
                if tp in round_:
                    rest.append((tp, data))
                else:
                    round_[tp] = data
            self.client.produce(round_, acks=self.o.acks,
                                timeout_ms=self.o.client.request_timeout_ms)
            self._ready = rest
        self._ready_bytes = 0

    def write_arrow(self, batch) -> None:
        import pyarrow as pa
        cols = {name.lower(): batch.column(i) for i, name in enumerate(batch.schema.names)}
        for name in ("key", "value"):
            # string columns as their UTF-8 bytes (a zero-copy cast): bytes out of to_pylist
            if name in cols and pa.types.is_string(cols[name].type):
                cols[name] = cols[name].cast(pa.binary())
        n = batch.num_rows
        values = cols["value"].to_pylist()
        keys = cols["key"].to_pylist() if "key" in cols else [None] * n
        topics = [self.o.topic] * n if self.o.topic is not None else cols["topic"].to_pylist()
        parts = cols["partition"].to_pylist() if "partition" in cols else [None] * n
        headers = cols["headers"].to_pylist() if "headers" in cols else None
        hashed = None
        if self.o.topic is not None and "key" in cols and n and cols["key"].null_count < n \
                and ("partition" not in cols or cols["partition"].null_count == n):
            # one topic, partitions from the keys: hash the whole column at once; the
            # partition handed to add() is then the one Kafka's partitioner would pick
            hashed = key_partitions(cols["key"], self.partitions_of(self.o.topic))
        if hashed is not None and headers is None:
            # the common case (one topic, keyed, no headers): partitions known and valid
            topic, append = self.o.topic, self._append
            for p, k, v in zip(hashed, keys, values):
                if p is None:
                    self.add(topic, None, k, v)
                else:
                    append(topic, p, k, v)
            return
        if hashed is not None:
            parts = hashed
        for i in range(n):
            hs = [(h["key"], _as_bytes(h["value"])) for h in headers[i] or ()] if headers else ()
            self.add(topics[i], parts[i], _as_bytes(keys[i]), _as_bytes(values[i]), hs)


def _write_all(o: SinkOptions, iterator) -> SinkCommitMessage:
    w = TopicWriter(o)
    for batch in iterator:
        w.write_arrow(batch)
    w.flush()
    return SinkCommitMessage(w.records, w.bytes)


class RaftkaBatchWriter(DataSourceArrowWriter):
    def __init__(self, o: SinkOptions, schema):
        self.o = o

    def write(self, iterator):
        return _write_all(self.o, iterator)

    def commit(self, messages) -> None:
        total = sum(m.records for m in messages if m is not None)
        log.info("raftka sink: %d records written", total)

    def abort(self, messages) -> None:
        # records already acknowledged stay in the topic (at-least-once, no transactions yet)
        log.warning("raftka sink: write aborted; acknowledged records remain in the topic")


class RaftkaStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, o: SinkOptions, schema):
        self.o = o

    def write(self, iterator):
        return _write_all(self.o, iterator)

    def commit(self, messages, batchId: int) -> None:
        total = sum(m.records for m in messages if m is not None)
        log.info("raftka sink: batch %d, %d records written", batchId, total)

    def abort(self, messages, batchId: int) -> None:
        log.warning("raftka sink: batch %d aborted; acknowledged records remain (at-least-once)",
                    batchId)
