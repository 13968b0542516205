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
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator, NamedTuple

from spark_connector import kafka_io
from spark_connector.offsets import DATA_LOSS_HINT, DataLossError, OffsetRange
from wire.errors import ErrorCode
from wire.records.batch import iter_batches
from wire.records.columns import RecordColumns, decode_columns

log = logging.getLogger(__name__)


def arrow_schema(include_headers: bool):
    """The Arrow schema Spark expects back for the Kafka source schema (see source.py)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    from spark_connector.schema import source_schema
    return to_arrow_schema(source_schema(include_headers), timezone="UTC")


def to_arrow(cols: RecordColumns, schema, topic: str, partition: int):
    """One Arrow RecordBatch in Spark's Kafka source schema from decoded columns.

    Every column is made from buffers (`Array.from_buffers`) or by Arrow itself (`pa.repeat`
    for topic and partition): no Python object per record, so this costs about a memcpy."""
    import pyarrow as pa
    import pyarrow.compute as pc
    n = cols.count

    def buf(b):
        return None if b is None else pa.py_buffer(b)

    key = pa.Array.from_buffers(pa.binary(), n, [buf(cols.key_validity), buf(cols.key_offsets),
                                                 buf(cols.key_data)])
    value = pa.Array.from_buffers(pa.binary(), n, [buf(cols.value_validity),
                                                   buf(cols.value_offsets),
                                                   buf(cols.value_data)])
    offsets = pa.Array.from_buffers(pa.int64(), n, [None, buf(cols.offsets)])
    # Kafka timestamps are milliseconds, Spark's are microseconds
    millis = pa.Array.from_buffers(pa.int64(), n, [None, buf(cols.timestamps)])
    ts = pc.multiply(millis, 1000).cast(schema.field("timestamp").type)
    ts_types = pa.Array.from_buffers(pa.int32(), n, [None, buf(cols.timestamp_types)])
    arrays = [key, value, pa.repeat(pa.scalar(topic, pa.string()), n),
              pa.repeat(pa.scalar(partition, pa.int32()), n), offsets, ts, ts_types]
    if cols.headers is not None:
        arrays.append(pa.array(cols.headers, schema.field("headers").type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


class FetchedRange(NamedTuple):
    """What one Fetch answer holds for [offset, until): where the next fetch starts, and the
    batches read_committed drops."""
    records: bytes
    offset: int
    until: int
    next_offset: int
    dropped: frozenset


def scan_fetched(records, offset: int, until: int,
                 aborted: list[tuple[int, int]] | None = None) -> FetchedRange:
    """One pass over the batch headers of a Fetch answer (no record is decoded).

    The next offset is past every batch seen (capped at `until`), so control batches and
    batches dropped as aborted still move the reader on. `aborted` (read_committed: the
    response's aborted transactions) drops whole batches; the filter must also see the control
    batches that end each aborted transaction, which decode_columns never hands to its
    `keep_batch`, so the batches to drop are picked here."""
    keep = _aborted_filter(aborted) if aborted else None
    dropped: set[int] = set()
    next_offset = offset
    for h in iter_batches(records):
        if h.next_offset <= offset:
            continue                      # the leader answers from the batch holding offset
        next_offset = max(next_offset, min(h.next_offset, until))
        if keep is not None and not keep(h):
            dropped.add(h.base_offset)
    return FetchedRange(records, offset, until, next_offset, frozenset(dropped))


def decode_scanned(f: FetchedRange, include_headers: bool) -> RecordColumns:
    dropped = f.dropped
    keep_batch = (lambda h: h.base_offset not in dropped) if dropped else None
    return decode_columns(f.records, start_offset=f.offset, end_offset=f.until,
                          include_headers=include_headers, keep_batch=keep_batch)


def decode_fetched(records, offset: int, until: int, include_headers: bool,
                   aborted: list[tuple[int, int]] | None = None):
    """(RecordColumns of the records in [offset, until), next offset to fetch) for one Fetch
    answer's records bytes: `scan_fetched`, then decode."""
    f = scan_fetched(records, offset, until, aborted)
    return decode_scanned(f, include_headers), f.next_offset


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
    """Arrow batches of the records of `rng`, one per Fetch answer.

    The next Fetch is sent (on a helper thread) as soon as an answer's batch headers say
    where it starts, before that answer is decoded and handed to Spark: the broker's work and
    the transfer overlap with Spark consuming the previous batch, instead of the task waiting
    for each round trip in turn. At most one Fetch is in flight per task."""
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="raftka-prefetch")
    try:
        yield from _read_range(pool, client_config, rng, include_headers, fail_on_data_loss,
                               isolation_level, fetch_max_bytes, poll_timeout_ms)
    finally:
        # an abandoned read (task killed, limit reached) leaves at most one Fetch to finish
        pool.shutdown(wait=False, cancel_futures=True)


def _read_range(pool, client_config, rng, include_headers, fail_on_data_loss, isolation_level,
                fetch_max_bytes, poll_timeout_ms):
    schema = arrow_schema(include_headers)
    client = kafka_io.get_client(client_config)
    topic, partition = rng.topic, rng.partition
    offset, until = rng.from_offset, rng.until_offset
    stalled_since = None
    prefetched = None          # Future of the Fetch at `offset`, sent while the last was decoded
    while offset < until:
        if prefetched is not None:
            res, prefetched = prefetched.result(), None
        else:
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
        scanned = scan_fetched(res.records, offset, until,
                               res.aborted if isolation_level == 1 else None)
        next_offset = scanned.next_offset
        if next_offset > offset:
            stalled_since = None
            if next_offset < until:
                prefetched = pool.submit(client.fetch, topic, partition, next_offset,
                                         fetch_max_bytes, isolation_level)
            cols = decode_scanned(scanned, include_headers)
            offset = next_offset
            if cols.count:
                yield to_arrow(cols, schema, topic, partition)
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
