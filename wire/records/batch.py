"""RecordBatch magic v2: a zero-copy header view, validation, patching, and full encode/decode.

Layout (61-byte header, big-endian):

    base_offset i64 | batch_length i32 | partition_leader_epoch i32 | magic i8 | crc u32 |
    attributes i16 | last_offset_delta i32 | base_timestamp i64 | max_timestamp i64 |
    producer_id i64 | producer_epoch i16 | base_sequence i32 | records_count i32 | records...

The CRC-32C covers attributes..end, so a broker can stamp `base_offset` and
`partition_leader_epoch` without recomputing it; the batch is otherwise stored exactly as the
producer sent it. Records (possibly compressed as one block) are varint-encoded:
length, attributes, timestamp delta, offset delta, key, value, headers.

Two levels of API:
- the log's fast path never decodes records: `RecordBatchHeader` (one struct.unpack_from),
  `invalid_reason()`/`is_valid()` (structure + CRC), `iter_batches`, `scan_valid_prefix`
  (crash recovery), `set_base_offset`/`set_partition_leader_epoch` (stamping, CRC untouched);
- clients, the controller and tests: `build_batch`/`RecordBatchBuilder`, `decode_batch`,
  control records (`build_end_txn_marker`, `build_control_batch`, `control_record_type`).
Anything malformed from a peer raises `DecodeError`; misuse by local code raises ValueError.

The per-record loops (decode_records, encode_record, the builder's record loop) run in C when
wire/records/_speedups.c is built (`pip install -e .` builds it; `IMPLEMENTATION` says which is
in use). The Python functions of record_codec.py, re-exported here (`decode_records_py`,
`encode_record_py`, `_encode_records_py`), are the reference: the C code mirrors them check by
check, with the same DecodeError messages, and tests compare the two. RAFTKA_PURE_PYTHON=1
forces the reference. `Record` and `DecodedRecord` live there too.
`encode_record_fields` appends one record from its fields, for producers that encode as they go.
"""

from __future__ import annotations

import dataclasses
import enum
import struct
import time
from typing import Iterator, NamedTuple

from wire.errors import DecodeError
from wire.native import load_extension
from wire.records import compression as codecs
from wire.records.crc32c import crc32c
from wire.records.record_codec import (DecodedRecord, Record, _encode_records_py,
                                       decode_records_py, encode_record_py)
from wire.records.record_codec import _vb, iter_record_fields  # noqa: F401 - re-exported

# The C accelerator (wire/records/_speedups.c, built by setup.py when a compiler is present).
# The pure-Python code (record_codec.py) stays the reference; RAFTKA_PURE_PYTHON=1 forces it.
SPEEDUPS_VERSION = 1           # must equal SPEEDUPS_VERSION in _speedups.c
speedups, SPEEDUPS_UNUSED_BECAUSE = load_extension("wire.records._speedups", SPEEDUPS_VERSION)

HEADER = struct.Struct(">qiibIhiqqqhii")
BATCH_HEADER_SIZE = HEADER.size          # 61
LOG_OVERHEAD = 12                        # base_offset + batch_length precede the counted bytes
MAGIC = 2
CRC_START = 21
_BASE_OFFSET = struct.Struct(">q")
_EPOCH = struct.Struct(">i")
_CRC = struct.Struct(">I")
_I16 = struct.Struct(">h")

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1


class Compression(enum.IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class TimestampType(enum.IntEnum):
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class RecordBatchHeader:
    """A view of one batch's header at `pos` in `buf`; nothing below the header is decoded."""

    __slots__ = ("buf", "pos", "base_offset", "batch_length", "partition_leader_epoch", "magic",
                 "crc", "attributes", "last_offset_delta", "base_timestamp", "max_timestamp",
                 "producer_id", "producer_epoch", "base_sequence", "records_count")

    def __init__(self, buf, pos: int = 0):
        if len(buf) - pos < BATCH_HEADER_SIZE:
            raise DecodeError("record batch shorter than its 61-byte header")
        self.buf = buf
        self.pos = pos
        (self.base_offset, self.batch_length, self.partition_leader_epoch, self.magic, self.crc,
         self.attributes, self.last_offset_delta, self.base_timestamp, self.max_timestamp,
         self.producer_id, self.producer_epoch, self.base_sequence,
         self.records_count) = HEADER.unpack_from(buf, pos)

    @property
    def size_in_bytes(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def compression(self) -> Compression:
        codec = self.attributes & COMPRESSION_MASK
        if codec > Compression.ZSTD:
            raise DecodeError(f"unknown compression codec {codec}")
        return Compression(codec)

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType(1 if self.attributes & TIMESTAMP_TYPE_MASK else 0)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_MASK)

    def compute_crc(self) -> int:
        end = self.pos + self.size_in_bytes
        return crc32c(memoryview(self.buf)[self.pos + CRC_START:end])

    def invalid_reason(self, check_crc: bool = True) -> str | None:
        """None for a structurally sound batch whose CRC matches, else why not."""
        if self.magic != MAGIC:
            return f"magic {self.magic} (only v2 is stored)"
        if self.batch_length < BATCH_HEADER_SIZE - LOG_OVERHEAD:
            return f"batch length {self.batch_length} below the header size"
        if self.pos + self.size_in_bytes > len(self.buf):
            return "batch extends past the end of the data"
        if self.last_offset_delta < 0 or self.records_count < 0:
            return "negative record count or offset delta"
        if self.attributes & COMPRESSION_MASK > Compression.ZSTD:
            return "unknown compression codec"
        if check_crc and self.compute_crc() != self.crc:
            return "CRC mismatch"
        return None

    def is_valid(self) -> bool:
        return self.invalid_reason() is None

    def bytes(self) -> memoryview:
        return memoryview(self.buf)[self.pos:self.pos + self.size_in_bytes]

    def __repr__(self):
        return (f"RecordBatchHeader(base_offset={self.base_offset}, last_offset={self.last_offset}, "
                f"epoch={self.partition_leader_epoch}, count={self.records_count}, "
                f"size={self.size_in_bytes}, compression={self.compression.name})")


def iter_batches(buf, pos: int = 0) -> Iterator[RecordBatchHeader]:
    """Every complete batch from `pos`; stops quietly at a partial tail (no CRC check)."""
    end = len(buf)
    while end - pos >= BATCH_HEADER_SIZE:
        h = RecordBatchHeader(buf, pos)
        if h.batch_length < BATCH_HEADER_SIZE - LOG_OVERHEAD or pos + h.size_in_bytes > end:
            return
        yield h
        pos += h.size_in_bytes


class ScanResult(NamedTuple):
    headers: list
    valid_bytes: int
    reason: str | None          # why the scan stopped before the end, None if it did not


def scan_valid_prefix(buf, expected_next_offset: int | None = None, pos: int = 0,
                      check_offsets: bool = True) -> ScanResult:
    """Validate batches from `pos`; stop at the first torn, corrupt or out-of-order one.

    Used by log recovery: everything up to `valid_bytes` is sound and offsets strictly increase.
    A producer's batches all start at offset 0, so the leader's check passes check_offsets=False.
    """
    headers = []
    end = len(buf)
    start = pos
    next_offset = expected_next_offset
    while pos < end:
        if end - pos < BATCH_HEADER_SIZE:
            return ScanResult(headers, pos - start, "torn batch header")
        h = RecordBatchHeader(buf, pos)
        reason = h.invalid_reason()
        if reason is not None:
            return ScanResult(headers, pos - start, reason)
        if check_offsets and next_offset is not None and h.base_offset < next_offset:
            return ScanResult(headers, pos - start,
                              f"base offset {h.base_offset} below expected {next_offset}")
        headers.append(h)
        next_offset = h.next_offset
        pos += h.size_in_bytes
    return ScanResult(headers, pos - start, None)


def set_base_offset(buf, pos: int, base_offset: int) -> None:
    """Stamp the batch at `pos` of a writable buffer (outside the CRC: no recompute)."""
    _BASE_OFFSET.pack_into(buf, pos, base_offset)


def set_partition_leader_epoch(buf, pos: int, epoch: int) -> None:
    """Stamp the leader epoch of the batch at `pos` (outside the CRC: no recompute)."""
    _EPOCH.pack_into(buf, pos + 12, epoch)


# -- records -------------------------------------------------------------------------------------
# (Record, DecodedRecord and the pure-Python reference codec are in record_codec.py)

@dataclasses.dataclass
class DecodedBatch:
    header: RecordBatchHeader
    records: list[DecodedRecord]


def encode_record(out: bytearray, r: Record) -> None:
    """Append record `r` (length-prefixed) to `out`."""
    if _c_encode is not None:
        _c_encode(out, r.attributes, r.timestamp_delta, r.offset_delta, r.key, r.value, r.headers)
    else:
        encode_record_py(out, r)


def encode_record_fields(out: bytearray, offset_delta: int, timestamp_delta: int, key, value,
                         headers=(), attributes: int = 0) -> int:
    """Append one record given by its fields (no Record object) to `out`; returns the bytes
    appended. For producers that encode as they go (C when built, else the reference)."""
    if _c_encode is not None:
        return _c_encode(out, attributes, timestamp_delta, offset_delta, key, value, headers)
    start = len(out)
    encode_record_py(out, Record(offset_delta, timestamp_delta, key, value, headers, attributes))
    return len(out) - start


def decode_records(data, count: int, base_offset: int, base_timestamp: int,
                   log_append_time: int | None = None) -> list[DecodedRecord]:
    """Exactly `count` records filling `data` (uncompressed); DecodeError on anything else."""
    if _c_decode is not None:
        return _c_decode(data, count, base_offset, base_timestamp, log_append_time)
    return decode_records_py(data, count, base_offset, base_timestamp, log_append_time)


_c_encode = _c_decode = _c_encode_records = None
if speedups is not None:
    # the C decoder fills DecodedRecord's slots directly (no __init__ call): tell it which
    speedups.configure(DecodedRecord, tuple(f.name for f in dataclasses.fields(DecodedRecord)))
    _c_encode, _c_decode = speedups.encode_record, speedups.decode_records
    _c_encode_records = speedups.encode_records
IMPLEMENTATION = "c" if speedups is not None else "python"


def decode_batch(buf, pos: int = 0, max_decompressed: int = codecs.DEFAULT_MAX_DECOMPRESSED,
                 verify_crc: bool = True) -> DecodedBatch:
    h = RecordBatchHeader(buf, pos)
    reason = h.invalid_reason(check_crc=verify_crc)
    if reason is not None:
        raise DecodeError(f"invalid record batch: {reason}")
    body = memoryview(buf)[pos + BATCH_HEADER_SIZE:pos + h.size_in_bytes]
    if h.compression != Compression.NONE:
        body = memoryview(codecs.decompress(h.compression, body, max_decompressed))
    lat = h.max_timestamp if h.timestamp_type == TimestampType.LOG_APPEND_TIME else None
    return DecodedBatch(h, decode_records(body, h.records_count, h.base_offset,
                                          h.base_timestamp, lat))


class RecordBatchBuilder:
    """Accumulates records for one v2 batch, then encodes it with `build()`.

    `append(key, value, headers=(), timestamp_ms=None)` assigns consecutive offset deltas;
    `append_record(Record)` keeps the record's own deltas (relative to `base_timestamp`, which
    must then be given). `estimated_size` lets a producer cut batches at a byte budget.
    """

    def __init__(self, *, base_offset: int = 0, partition_leader_epoch: int = -1,
                 compression: int = Compression.NONE, producer_id: int = NO_PRODUCER_ID,
                 producer_epoch: int = NO_PRODUCER_EPOCH, base_sequence: int = NO_SEQUENCE,
                 is_transactional: bool = False, is_control: bool = False,
                 base_timestamp: int | None = None,
                 timestamp_type: int = TimestampType.CREATE_TIME):
        if not 0 <= compression <= Compression.ZSTD:
            raise ValueError(f"unknown compression codec {compression}")
        self.base_offset = base_offset
        self.partition_leader_epoch = partition_leader_epoch
        self.compression = Compression(compression)
        self.producer_id, self.producer_epoch = producer_id, producer_epoch
        self.base_sequence = base_sequence
        self.is_transactional, self.is_control = is_transactional, is_control
        self.base_timestamp = base_timestamp
        self.timestamp_type = TimestampType(timestamp_type)
        # (offset_delta, ts, key, value, headers, attributes, timestamp_delta): ts is the
        # absolute timestamp, _NOW (stamp at build time) or None (keep timestamp_delta).
        # Plain tuples, not Records: appending is the producer's per-record cost.
        self._pending: list[tuple] = []
        self._next_delta = 0
        self.estimated_size = BATCH_HEADER_SIZE

    def __len__(self) -> int:
        return len(self._pending)

    def append(self, key, value, headers=(), timestamp_ms: int | None = None) -> int:
        """Add a record at the next offset delta (no timestamp: the build time); returns it."""
        return self._append_at(self._next_delta, key, value, headers, timestamp_ms)

    def _append_at(self, delta: int, key, value, headers, timestamp_ms) -> int:
        # the producer/sink per-record path: kept to one call, the estimate inlined
        size = 21 + (len(key) if key else 0) + (len(value) if value else 0)
        if headers:
            headers = list(headers)
            size += sum(len(k) + len(v or b"") + 10 for k, v in headers)
        else:
            headers = []
        self._pending.append((delta, _NOW if timestamp_ms is None else timestamp_ms, key,
                              value, headers, 0, 0))
        if delta >= self._next_delta:
            self._next_delta = delta + 1
        self.estimated_size += size
        return delta

    def append_record(self, record: Record) -> None:
        """Add a record that keeps its own offset and timestamp deltas."""
        self._pending.append((record.offset_delta, None, record.key, record.value,
                              record.headers, record.attributes, record.timestamp_delta))
        if record.offset_delta >= self._next_delta:
            self._next_delta = record.offset_delta + 1
        self._grow_estimate(record.key, record.value, record.headers)

    def _grow_estimate(self, key, value, headers) -> None:
        # varint overheads are at most ~20 bytes a record; good enough for batch cutting
        self.estimated_size += 21 + (len(key) if key else 0) + (len(value) if value else 0)
        if headers:
            self.estimated_size += sum(len(k) + len(v or b"") + 10 for k, v in headers)

    def build(self, now_ms: int | None = None) -> bytes:
        """Encode the batch. Records appended without a timestamp get `now_ms` (or the clock)."""
        pending = self._pending
        if not pending:
            raise ValueError("a record batch needs at least one record")
        now = now_ms if now_ms is not None else int(time.time() * 1000)
        base_ts = self.base_timestamp
        if base_ts is None:
            # like the Java and Python producers: the first record's timestamp (later deltas
            # may be negative), which keeps our bytes identical to theirs
            base_ts = next((now if p[1] is _NOW else p[1] for p in pending if p[1] is not None),
                           now)
        # uncompressed records go straight after room for the header (one copy less)
        plain = self.compression == Compression.NONE
        out = bytearray(BATCH_HEADER_SIZE if plain else 0)
        encode = _c_encode_records if _c_encode_records is not None else _encode_records_py
        max_ts, last_delta = encode(out, pending, base_ts, now, _NOW)
        if plain:
            return _assemble(self, out, None, base_ts, max_ts, last_delta, len(pending))
        body = codecs.compress(self.compression, out)
        return _assemble(self, bytearray(BATCH_HEADER_SIZE), body, base_ts, max_ts, last_delta,
                         len(pending))


_NOW = object()          # "stamp with the build time" marker for appended records


def _assemble(b: RecordBatchBuilder, out: bytearray, body, base_ts: int, max_ts: int,
              last_delta: int, count: int) -> bytes:
    """Fill in the header at the start of `out` (then append `body`, unless the records are
    already in `out` after the header), and the CRC."""
    attributes = int(b.compression) | (
        TIMESTAMP_TYPE_MASK if b.timestamp_type == TimestampType.LOG_APPEND_TIME else 0) | (
        TRANSACTIONAL_MASK if b.is_transactional else 0) | (CONTROL_MASK if b.is_control else 0)
    if body is not None:
        out += body
    HEADER.pack_into(out, 0, b.base_offset, len(out) - LOG_OVERHEAD, b.partition_leader_epoch,
                     MAGIC, 0, attributes, last_delta, base_ts, max_ts, b.producer_id,
                     b.producer_epoch, b.base_sequence, count)
    _CRC.pack_into(out, 17, crc32c(memoryview(out)[CRC_START:]))
    return bytes(out)


def build_batch(records, *, base_offset: int = 0, partition_leader_epoch: int = -1,
                compression: int | None = None, producer_id: int = NO_PRODUCER_ID,
                producer_epoch: int = NO_PRODUCER_EPOCH, base_sequence: int = NO_SEQUENCE,
                is_transactional: bool = False, is_control: bool = False,
                base_timestamp: int | None = None,
                timestamp_type: int = TimestampType.CREATE_TIME,
                compression_type: int | None = None, now_ms: int | None = None) -> bytes:
    """Encode a v2 batch. `records`: `Record`s or (key, value, headers, timestamp_ms) tuples.

    Tuples get consecutive offset deltas and the timestamp given (None: `now_ms`, default the
    wall clock). `Record`s keep their own offset and timestamp deltas. `compression_type` is an
    older spelling of `compression`.
    """
    codec = compression if compression is not None else compression_type or Compression.NONE
    b = RecordBatchBuilder(base_offset=base_offset, partition_leader_epoch=partition_leader_epoch,
                           compression=codec, producer_id=producer_id,
                           producer_epoch=producer_epoch, base_sequence=base_sequence,
                           is_transactional=is_transactional, is_control=is_control,
                           base_timestamp=base_timestamp, timestamp_type=timestamp_type)
    append_at = b._append_at
    for i, r in enumerate(records):
        if isinstance(r, Record):
            b.append_record(r)
        elif len(r) == 4:
            append_at(i, *r)
        else:
            append_at(i, *(tuple(r) + (None, None, None, None))[:4])
    return b.build(now_ms)


# -- control records (transaction markers and KRaft control records) -----------------------------

class ControlRecordType(enum.IntEnum):
    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6


_CONTROL_KEY = struct.Struct(">hh")
_TXN_MARKER = struct.Struct(">hi")


def control_key(record_type: int, version: int = 0) -> bytes:
    return _CONTROL_KEY.pack(version, record_type)


def parse_control_key(key: bytes) -> tuple[int, int]:
    """(version, type) of a control record key."""
    if key is None or len(key) < 4:
        raise DecodeError("control record key shorter than 4 bytes")
    return _CONTROL_KEY.unpack_from(key, 0)


def end_txn_marker_value(coordinator_epoch: int, version: int = 0) -> bytes:
    return _TXN_MARKER.pack(version, coordinator_epoch)


def parse_end_txn_marker_value(value: bytes) -> tuple[int, int]:
    """(version, coordinator_epoch) of a COMMIT/ABORT marker's value."""
    if value is None or len(value) < 6:
        raise DecodeError("transaction marker value shorter than 6 bytes")
    return _TXN_MARKER.unpack_from(value, 0)


def build_end_txn_marker(commit: bool, producer_id: int, producer_epoch: int,
                         coordinator_epoch: int, base_offset: int = 0,
                         timestamp_ms: int | None = None, partition_leader_epoch: int = -1) -> bytes:
    """A transaction marker batch: one COMMIT/ABORT control record, transactional + control."""
    rtype = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
    return build_control_batch(rtype, end_txn_marker_value(coordinator_epoch),
                               producer_id=producer_id, producer_epoch=producer_epoch,
                               is_transactional=True, base_offset=base_offset,
                               timestamp_ms=timestamp_ms,
                               partition_leader_epoch=partition_leader_epoch)


def build_control_batch(record_type: int, value: bytes | None, *, base_offset: int = 0,
                        timestamp_ms: int | None = None, partition_leader_epoch: int = -1,
                        producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH,
                        is_transactional: bool = False, key_version: int = 0) -> bytes:
    """A batch of one control record (KRaft's LEADER_CHANGE, SNAPSHOT_HEADER, ... carry their
    own schema-encoded `value`; the caller encodes it)."""
    rec = Record(0, 0, control_key(record_type, key_version), value, [])
    return build_batch([rec], base_offset=base_offset, producer_id=producer_id,
                       producer_epoch=producer_epoch, is_transactional=is_transactional,
                       is_control=True, base_timestamp=timestamp_ms,
                       partition_leader_epoch=partition_leader_epoch)


def control_record_type(key: bytes | None) -> ControlRecordType | int:
    """The type of a control record from its key (unknown types come back as plain ints,
    since Kafka tells readers to skip control types they do not know)."""
    _version, rtype = parse_control_key(key)
    try:
        return ControlRecordType(rtype)
    except ValueError:
        return rtype
