"""Turning Fetch answers into consumer records (pure: no sockets, no clock).

`parse_partition` reads one partition's record data from a Fetch response:

- every batch is CRC-checked and decompressed (gzip, snappy raw or xerial, lz4 frame, zstd) by
  `wire.records.decode_batch`;
- records before the fetch offset are dropped (a compressed batch is returned whole, so it may
  start before the offset we asked for);
- a partial batch at the end (the broker cuts at the byte limit) is ignored; it comes back
  whole in the next fetch;
- control batches (transaction markers) are never returned;
- with read_committed, batches of transactions listed as aborted are skipped, following
  Kafka's Fetcher: an aborted transaction starts at its `first_offset` and ends at the producer's
  ABORT marker.

The answer also says where the next fetch starts: after the last batch we looked at, even when
every record in it was filtered out, so a consumer never fetches the same markers forever.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

from wire.errors import DecodeError
from wire.records.batch import (BATCH_HEADER_SIZE, ControlRecordType, RecordBatchHeader,
                                TimestampType, control_record_type, decode_batch)

READ_UNCOMMITTED = 0
READ_COMMITTED = 1


class TopicPartition(NamedTuple):
    topic: str
    partition: int


@dataclasses.dataclass(slots=True)
class ConsumerRecord:
    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int            # 0 create time, 1 log append time
    key: bytes | None
    value: bytes | None
    headers: list                  # [(str, bytes | None)]
    leader_epoch: int = -1


@dataclasses.dataclass
class PartitionFetch:
    records: list[ConsumerRecord]
    next_offset: int               # where the next fetch of this partition starts
    last_epoch: int = -1           # leader epoch of the last batch seen (-1: none)


def parse_partition(topic: str, partition: int, data, fetch_offset: int,
                    isolation_level: int = READ_UNCOMMITTED,
                    aborted_transactions=None) -> PartitionFetch:
    """Records at or after `fetch_offset` from one partition's record data (bytes or view)."""
    buf = memoryview(data) if data is not None else memoryview(b"")
    aborted = sorted(((a.first_offset, a.producer_id) for a in aborted_transactions or ()),
                     reverse=True)           # pop() yields the lowest first offset
    aborting: set[int] = set()
    out: list[ConsumerRecord] = []
    next_offset = fetch_offset
    last_epoch = -1
    pos = 0
    while len(buf) - pos >= BATCH_HEADER_SIZE:
        header = RecordBatchHeader(buf, pos)
        if pos + header.size_in_bytes > len(buf):
            break                                      # partial tail: fetched again next time
        if header.magic != 2:
            raise DecodeError(f"{topic}-{partition}: record batch magic {header.magic} at offset "
                              f"{header.base_offset}; only v2 is supported")
        pos += header.size_in_bytes
        if header.last_offset < fetch_offset:
            continue
        next_offset = max(next_offset, header.next_offset)
        last_epoch = header.partition_leader_epoch
        if isolation_level == READ_COMMITTED:
            while aborted and aborted[-1][0] <= header.last_offset:
                aborting.add(aborted.pop()[1])
            if header.is_control:
                batch = decode_batch(header.buf, header.pos)
                for r in batch.records:
                    if control_record_type(r.key) == ControlRecordType.ABORT:
                        aborting.discard(header.producer_id)
                continue
            if header.is_transactional and header.producer_id in aborting:
                continue
        elif header.is_control:
            continue
        batch = decode_batch(header.buf, header.pos)
        ts_type = int(header.timestamp_type == TimestampType.LOG_APPEND_TIME)
        epoch = header.partition_leader_epoch
        for r in batch.records:
            if r.offset >= fetch_offset:
                out.append(ConsumerRecord(topic, partition, r.offset, r.timestamp, ts_type,
                                          r.key, r.value, r.headers, epoch))
    return PartitionFetch(out, next_offset, last_epoch)
