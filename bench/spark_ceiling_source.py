"""`format("raftka_ceiling")`: the fastest a Python streaming data source shaped like ours can be.

Only the Spark bench (spark_stream.py) registers it. It has the raftka source's schema
(spark_connector/schema.py), plans the same way (one input partition per topic-partition offset
range, through spark_connector.offsets.plan_ranges and the same RangePartition class) from end
offsets given as an option, and its executors yield pyarrow RecordBatches that are built once
per Python worker and then handed out from memory: no network, no decoding, no per-row Python.
Whatever a streaming query over it costs is what Spark's Python Data Source API costs (planner
process, Arrow hand-over to the JVM, the JVM's copy of every row into a full row) — the ceiling
for format("raftka") on the same machine.

The rows have the shape of the bench's rows (16-byte keys, 100-byte values, one topic name, the
partition, the offset, a millisecond timestamp, timestampType 0), generated from the offsets;
the bytes differ, which a query of lengths and counts cannot see.

Options: `ends` (required; Spark's offset JSON, {"topic": {"partition": end}}), `starts`
(same shape; default 0 for every partition in `ends`), `batchRows` (rows per yielded Arrow batch,
default 30000: about what one 4 MiB Fetch of these records gives raftka), `valueBytes` (100),
`keyBytes` (16), `cache` (true: keep built batches per Python worker; false: build every time).
"""

from __future__ import annotations

import json

from pyspark.sql.datasource import DataSource, DataSourceStreamReader
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

from spark_connector import offsets as off
from spark_connector.schema import source_schema
from spark_connector.source import RangePartition

BASE_TIMESTAMP_MS = 1_700_000_000_000

# (topic, partition, from, until, batchRows, keyBytes, valueBytes) -> list of RecordBatch, kept
# for the life of the Python worker: Spark reuses its workers, so after the warm-up query every
# timed read is served from here
_CACHE: dict[tuple, list] = {}
_CACHE_LIMIT_BYTES = 1 << 30
_cache_bytes = 0


def _fixed_width_binary(data, n: int, width: int):
    """A binary Arrow array of n values of `width` bytes each, over one data buffer."""
    import numpy as np
    import pyarrow as pa
    offsets = np.arange(0, (n + 1) * width, width, dtype=np.int32)
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def build_batch(topic: str, partition: int, lo: int, hi: int, key_bytes: int = 16,
                value_bytes: int = 100):
    """Rows [lo, hi) of topic-partition in the raftka source's Arrow schema, with numpy only."""
    import numpy as np
    import pyarrow as pa

    from spark_connector.fetcher import arrow_schema
    schema = arrow_schema(False)
    n = hi - lo
    offs = np.arange(lo, hi, dtype=np.int64)
    # key: the offset in zero-padded decimal, `key_bytes` ASCII digits (like the bench's lpad)
    powers = 10 ** np.arange(key_bytes - 1, -1, -1, dtype=np.int64) if key_bytes <= 18 else None
    if powers is not None:
        digits = (offs[:, None] // powers[None, :]) % 10 + ord("0")
        key_data = digits.astype(np.uint8).tobytes()
    else:
        key_data = b"0" * (n * key_bytes)
    # value: hex-looking bytes from a small pool, rotated by offset so neighbours differ
    pool = np.frombuffer(b"0123456789abcdef" * ((value_bytes + 63) // 16 + 4), dtype=np.uint8)
    starts = (offs % 16).astype(np.int64)
    idx = starts[:, None] + np.arange(value_bytes, dtype=np.int64)[None, :]
    value_data = pool[idx].tobytes()
    ts = pa.array(BASE_TIMESTAMP_MS * 1000 + offs * 1000, pa.int64()).cast(
        schema.field("timestamp").type)
    arrays = [_fixed_width_binary(key_data, n, key_bytes),
              _fixed_width_binary(value_data, n, value_bytes),
              pa.repeat(pa.scalar(topic, pa.string()), n),
              pa.repeat(pa.scalar(partition, pa.int32()), n),
              pa.array(offs, pa.int64()), ts,
              pa.array(np.zeros(n, dtype=np.int32), pa.int32())]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def batches_for(rng: RangePartition, batch_rows: int, key_bytes: int, value_bytes: int,
                cache: bool) -> list:
    global _cache_bytes
    k = (rng.topic, rng.partition, rng.from_offset, rng.until_offset, batch_rows, key_bytes,
         value_bytes)
    hit = _CACHE.get(k) if cache else None
    if hit is not None:
        return hit
    out = [build_batch(rng.topic, rng.partition, lo, min(lo + batch_rows, rng.until_offset),
                       key_bytes, value_bytes)
           for lo in range(rng.from_offset, rng.until_offset, batch_rows)]
    size = sum(b.nbytes for b in out)
    if cache and _cache_bytes + size <= _CACHE_LIMIT_BYTES:
        _CACHE[k] = out
        _cache_bytes += size
    return out


class CeilingStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: dict):
        opts = {str(k).lower(): v for k, v in options.items()}
        if "ends" not in opts:
            raise ValueError("raftka_ceiling needs the 'ends' option (offset JSON)")
        self.ends = off.from_json_dict(json.loads(opts["ends"]))
        starts = opts.get("starts")
        self.starts = (off.from_json_dict(json.loads(starts)) if starts
                       else {tp: 0 for tp in self.ends})
        self.batch_rows = int(opts.get("batchrows", 30000))
        self.key_bytes = int(opts.get("keybytes", 16))
        self.value_bytes = int(opts.get("valuebytes", 100))
        self.cache = str(opts.get("cache", "true")).strip().lower() == "true"
        if self.batch_rows <= 0:
            raise ValueError("batchRows must be positive")

    def initialOffset(self) -> dict:
        return off.to_json_dict(self.starts)

    def prepareForTriggerAvailableNow(self) -> None:
        """Nothing to look up: the end is fixed by the options."""

    def latestOffset(self, start: dict, limit) -> dict:
        return off.to_json_dict(self.ends)

    def partitions(self, start: dict, end: dict):
        ranges = off.plan_ranges(off.from_json_dict(start), off.from_json_dict(end))
        return [RangePartition(r.topic, r.partition, r.from_offset, r.until_offset)
                for r in ranges]

    def read(self, partition: RangePartition):
        return iter(batches_for(partition, self.batch_rows, self.key_bytes, self.value_bytes,
                                self.cache))

    def commit(self, end: dict) -> None:
        """Nothing to commit: the checkpoint is Spark's."""


class CeilingDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "raftka_ceiling"

    def schema(self):
        return source_schema(False)

    def streamReader(self, schema):
        return CeilingStreamReader(self.options)
