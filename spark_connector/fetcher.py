"""Executor side: read one offset range of one partition into Arrow record batches.

Each Spark task calls `read_range` for its `OffsetRange`. It fetches whole record batches from
the partition leader (through the per-process client, so a reused Python worker keeps its
connections), decodes them, keeps the records in [from, until) and yields one Arrow
`RecordBatch` per Fetch response: Spark receives columns, never Python rows.

Data loss while reading (the range's start was deleted by retention or DeleteRecords, or the log
was truncated below the planned end): with failOnDataLoss a `DataLossError` fails the task (and
the query); without it the task skips to what is still there and says so in the executor log.
"""

from __future__ import annotations

import logging
import time
from typing import Iterator

from spark_connector import kafka_io
from spark_connector.offsets import DATA_LOSS_HINT, DataLossError, OffsetRange
from wire.errors import DecodeError, ErrorCode
from wire.records import compression as codecs
from wire.records.batch import (BATCH_HEADER_SIZE, Compression, TimestampType, _varint,
                                _varlong, iter_batches)

log = logging.getLogger(__name__)


def arrow_schema(include_headers: bool):
    """The Arrow schema Spark expects back for the Kafka source schema (see source.py)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    from spark_connector.schema import source_schema
    return to_arrow_schema(source_schema(include_headers), timezone="UTC")


class _Columns:
    """Column lists for one Arrow batch."""

    def __init__(self):
        self.keys, self.values, self.offsets, self.timestamps = [], [], [], []
        self.ts_types, self.headers = [], []

    def __len__(self):
        return len(self.offsets)

    def to_batch(self, schema, topic: str, partition: int, include_headers: bool):
        import pyarrow as pa
        import pyarrow.compute as pc
        n = len(self.offsets)
        ts = pc.multiply(pa.array(self.timestamps, pa.int64()), 1000)
        arrays = [pa.array(self.keys, pa.binary()), pa.array(self.values, pa.binary()),
                  pa.array([topic] * n, pa.string()), pa.array([partition] * n, pa.int32()),
                  pa.array(self.offsets, pa.int64()), ts.cast(schema.field("timestamp").type),
                  pa.array(self.ts_types, pa.int32())]
        if include_headers:
            arrays.append(pa.array(self.headers, schema.field("headers").type))
        return pa.RecordBatch.from_arrays(arrays, schema=schema)


def decode_into(cols: _Columns, h, lo: int, hi: int, include_headers: bool) -> None:
    """Append the records of batch `h` with offsets in [lo, hi) to `cols`.

    The same format as wire.records.batch.decode_records, decoded straight into column lists:
    this loop is the connector's hot path, so one- and two-byte varints (nearly every length
    and delta of a small record) are read inline instead of through a call and no per-record
    object is built. CRC and structure are checked as decode_batch does."""
    reason = h.invalid_reason()
    if reason is not None:
        raise DecodeError(f"invalid record batch at offset {h.base_offset}: {reason}")
    body = h.buf[h.pos + BATCH_HEADER_SIZE:h.pos + h.size_in_bytes]
    if h.compression != Compression.NONE:
        body = codecs.decompress(h.compression, body)
    buf = bytes(body)
    n = len(buf)
    base, base_ts = h.base_offset, h.base_timestamp
    lat = h.max_timestamp if h.timestamp_type == TimestampType.LOG_APPEND_TIME else None
    ts_type = int(h.timestamp_type)
    keys, values, offsets = cols.keys.append, cols.values.append, cols.offsets.append
    stamps, types, headers = cols.timestamps.append, cols.ts_types.append, cols.headers.append
    pos = 0
    try:
        for _ in range(h.records_count):
            b = buf[pos]
            if b < 0x80:
                length, pos = (b >> 1) ^ -(b & 1), pos + 1
            elif buf[pos + 1] < 0x80:
                v = (b & 0x7F) | buf[pos + 1] << 7
                length, pos = (v >> 1) ^ -(v & 1), pos + 2
            else:
                length, pos = _varint(buf, pos)
            end = pos + length
            if length < 1 or end > n:
                raise DecodeError("record length runs past the end of the batch")
            p = pos + 1                                   # attributes: unused
            b = buf[p]
            if b < 0x80:
                ts_delta, p = (b >> 1) ^ -(b & 1), p + 1
            else:
                ts_delta, p = _varlong(buf, p)
            b = buf[p]
            if b < 0x80:
                o, p = base + ((b >> 1) ^ -(b & 1)), p + 1
            elif buf[p + 1] < 0x80:
                v = (b & 0x7F) | buf[p + 1] << 7
                o, p = base + ((v >> 1) ^ -(v & 1)), p + 2
            else:
                d, p = _varint(buf, p)
                o = base + d
            if o < lo or o >= hi:
                pos = end
                continue
            b = buf[p]
            if b < 0x80:
                kl, p = (b >> 1) ^ -(b & 1), p + 1
            else:
                kl, p = _varint(buf, p)
            if kl < 0:
                key = None
            else:
                key, p = buf[p:p + kl], p + kl
            b = buf[p]
            if b < 0x80:
                vl, p = (b >> 1) ^ -(b & 1), p + 1
            else:
                c = buf[p + 1]
                if c < 0x80:
                    v = (b & 0x7F) | c << 7
                    vl, p = (v >> 1) ^ -(v & 1), p + 2
                else:
                    vl, p = _varint(buf, p)
            if vl < 0:
                value = None
            else:
                value, p = buf[p:p + vl], p + vl
            nh, p = _varint(buf, p)
            if include_headers:
                hs = []
                for _h in range(nh):
                    hkl, p = _varint(buf, p)
                    if hkl < 0:
                        raise DecodeError("null header key")
                    hk, p = buf[p:p + hkl].decode("utf-8", "replace"), p + hkl
                    hvl, p = _varint(buf, p)
                    if hvl < 0:
                        hv = None
                    else:
                        hv, p = buf[p:p + hvl], p + hvl
                    hs.append({"key": hk, "value": hv})
                headers(hs)
            elif nh:
                p = end                                   # headers not asked for: skip them
            if p != end:
                raise DecodeError("record length does not match its fields")
            keys(key)
            values(value)
            offsets(o)
            stamps(lat if lat is not None else base_ts + ts_delta)
            types(ts_type)
            pos = end
    except IndexError:
        raise DecodeError("truncated record") from None


def _aborted_filter(aborted: list[tuple[int, int]]):
    """read_committed: a batch is dropped when its producer has an aborted transaction that
    started at or before it and whose abort marker has not been passed yet (KIP-98)."""
    pending = sorted(aborted, key=lambda a: a[1])
    open_aborts: set[int] = set()

    def keep(h) -> bool:
        while pending and pending[0][1] <= h.last_offset:
            open_aborts.add(pending.pop(0)[0])
        if h.is_control:
            open_aborts.discard(h.producer_id)        # the ABORT (or COMMIT) marker ends it
            return False
        return not (h.is_transactional and h.producer_id in open_aborts)
    return keep


def read_range(client_config: kafka_io.ClientConfig, rng: OffsetRange, *,
               include_headers: bool = False, fail_on_data_loss: bool = True,
               isolation_level: int = 0, fetch_max_bytes: int = 4 << 20,
               poll_timeout_ms: int = 120_000) -> Iterator:
    schema = arrow_schema(include_headers)
    client = kafka_io.get_client(client_config)
    topic, partition = rng.topic, rng.partition
    offset, until = rng.from_offset, rng.until_offset
    stalled_since = None
    while offset < until:
        res = client.fetch(topic, partition, offset, fetch_max_bytes, isolation_level)
        if res.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
            earliest = client.list_offsets({(topic, partition): kafka_io.EARLIEST})[
                (topic, partition)]
            if offset < earliest:
                msg = (f"Cannot fetch offset {offset} of {topic}-{partition}: the earliest "
                       f"offset is now {earliest}, so offsets {offset}..{min(earliest, until) - 1} "
                       f"are lost. {DATA_LOSS_HINT}")
                if fail_on_data_loss:
                    raise DataLossError(msg)
                log.warning("skipping lost records: %s", msg)
                offset = earliest
                continue
            # the log ends below our planned range: it was truncated (unclean leader election)
            msg = (f"{topic}-{partition} ends before offset {offset} that was planned to be "
                   f"read up to {until}. {DATA_LOSS_HINT}")
            if fail_on_data_loss:
                raise DataLossError(msg)
            log.warning("skipping lost records: %s", msg)
            return
        cols = _Columns()
        keep = _aborted_filter(res.aborted) if isolation_level == 1 and res.aborted else None
        next_offset = offset
        for h in iter_batches(res.records):
            if h.next_offset <= offset:
                continue                      # the leader answers from the batch holding offset
            next_offset = max(next_offset, min(h.next_offset, until))
            if keep is not None and not keep(h):
                continue
            if h.is_control:
                continue
            decode_into(cols, h, offset, until, include_headers)
        if next_offset > offset:
            stalled_since = None
            offset = next_offset
            if len(cols):
                yield cols.to_batch(schema, topic, partition, include_headers)
            continue
        # Nothing at `offset` yet: below the high watermark that means a leader change in
        # progress; at or past it, the planned end is not readable (yet). Wait, then give up.
        now = time.monotonic()
        stalled_since = stalled_since or now
        if now - stalled_since > poll_timeout_ms / 1000:
            msg = (f"{topic}-{partition}: no record at offset {offset} after "
                   f"{poll_timeout_ms} ms (high watermark {res.high_watermark}, planned end "
                   f"{until}). {DATA_LOSS_HINT}")
            if fail_on_data_loss:
                raise DataLossError(msg)
            log.warning("giving up on the rest of the range: %s", msg)
            return
        time.sleep(0.05)
