"""Columnar decode of fetched record batches: Arrow-ready buffers, no per-record Python objects.

`decode_columns(data)` turns a Fetch response's records bytes (zero or more RecordBatch v2, the
last one possibly truncated by the broker's byte limit) into `RecordColumns`: little-endian
int64/int32 buffers and Arrow "binary" layouts (int32 offsets, data, LSB-first validity bitmap)
that `pyarrow.Array.from_buffers(pa.binary(), count, [validity, offsets, data])` takes as is.
This is what a columnar reader (the Spark connector) wants: one pass over the bytes, no
DecodedRecord per record, no list of bytes objects to re-pack.

Semantics follow `decode_batch` (the reference): every batch read is checked (structure + CRC),
decompressed with the same bounded codecs, and its records must fill it exactly, else
DecodeError. Control batches (transaction markers) are skipped, records outside
[start_offset, end_offset) are dropped, decoding stops after `max_records`.

The per-batch body decode runs in the C extension (`_speedups.decode_columns`) when it is built,
else in `_decode_body` below (the reference; RAFTKA_PURE_PYTHON=1 forces it).
"""

from __future__ import annotations

import sys
from array import array
from typing import Callable, NamedTuple

from wire.errors import DecodeError
from wire.records import compression as codecs
from wire.records.batch import (BATCH_HEADER_SIZE, Compression, RecordBatchHeader, TimestampType,
                                iter_batches, iter_record_fields, speedups)

_MAX_I32 = 2**31 - 1          # Arrow "binary" offsets are int32: 2 GiB of keys or values at most
_LITTLE = sys.byteorder == "little"
_MIN_I64, _MAX_I64 = -2**63, 2**63 - 1


class RecordColumns(NamedTuple):
    count: int
    offsets: bytes          # int64 little-endian, one per record
    timestamps: bytes       # int64 LE (CREATE_TIME: base_ts+delta; LOG_APPEND_TIME: max_timestamp)
    timestamp_types: bytes  # int32 LE, 0 = CreateTime, 1 = LogAppendTime (Spark's timestampType)
    key_offsets: bytes      # int32 LE, count+1 entries (Arrow binary offsets)
    key_data: bytes
    key_validity: bytes | None   # Arrow validity bitmap (LSB first), None if no null key
    value_offsets: bytes
    value_data: bytes
    value_validity: bytes | None
    headers: list | None    # per record list[tuple[str, bytes|None]] when include_headers else None


class _Columns:
    """Growing buffers shared by the C and the Python body decoders (both only append)."""

    __slots__ = ("offsets", "timestamps", "types", "key_offsets", "key_data", "key_valid",
                 "value_offsets", "value_data", "value_valid", "headers")

    def __init__(self, include_headers: bool):
        self.offsets = bytearray()
        self.timestamps = bytearray()
        self.types = bytearray()
        self.key_offsets = bytearray(4)       # the leading 0 of Arrow's count+1 offsets
        self.key_data = bytearray()
        self.key_valid = bytearray()          # one 0/1 byte per record; packed to bits at the end
        self.value_offsets = bytearray(4)
        self.value_data = bytearray()
        self.value_valid = bytearray()
        self.headers = [] if include_headers else None

    def finish(self) -> RecordColumns:
        if len(self.key_data) > _MAX_I32 or len(self.value_data) > _MAX_I32:
            raise ValueError("more than 2 GiB of keys or values: too large for Arrow binary")
        return RecordColumns(len(self.key_valid), bytes(self.offsets), bytes(self.timestamps),
                             bytes(self.types), bytes(self.key_offsets), bytes(self.key_data),
                             _bitmap(self.key_valid), bytes(self.value_offsets),
                             bytes(self.value_data), _bitmap(self.value_valid), self.headers)


_TO_DIGITS = bytes.maketrans(b"\x00\x01", b"01")


def _bitmap(flags: bytearray) -> bytes | None:
    """Arrow validity bitmap (bit i of byte i//8 = record i is not null), None if none is null."""
    if flags.count(1) == len(flags):          # also the empty case
        return None
    # the flags, last record first, read as one binary number: its little-endian bytes are the
    # LSB-first bitmap (one C-speed int conversion instead of a loop over bits)
    digits = flags.translate(_TO_DIGITS)[::-1]
    return int(digits, 2).to_bytes((len(flags) + 7) // 8, "little")


def _le(typecode: str, values) -> bytes:
    a = array(typecode, values)
    if not _LITTLE:
        a.byteswap()
    return a.tobytes()


def _decode_body(body, count: int, base_offset: int, base_ts: int, lat, ts_type: int, lo: int,
                 hi: int, limit: int, cols: _Columns) -> int:
    """Append the records of one uncompressed body with offsets in [lo, hi), at most `limit`
    of them, to `cols`; returns how many were appended. Checks exactly what decode_records
    checks (same DecodeError messages), for every record it reads."""
    offs, stamps, key_ends, value_ends = [], [], [], []
    key_data, value_data = cols.key_data, cols.value_data
    key_valid, value_valid, headers = cols.key_valid, cols.value_valid, cols.headers
    kept = 0
    if limit <= 0 and count != 0:
        # over the limit before the first record: nothing is read, only the count is checked
        if count < 0 or count > len(body):
            raise DecodeError(f"record count {count} does not fit the {len(body)} bytes of records")
        return _flush(cols, offs, stamps, key_ends, value_ends, ts_type)
    for i, (ts_delta, off_delta, key, value, hs) in enumerate(iter_record_fields(body, count)):
        offset = base_offset + off_delta
        if not lo <= offset < hi:
            continue
        kept += 1
        offs.append(offset)
        ts = lat if lat is not None else base_ts + ts_delta
        if not _MIN_I64 <= ts <= _MAX_I64:
            raise DecodeError("record timestamp out of the int64 range")
        stamps.append(ts)
        if key is None:
            key_valid.append(0)
        else:
            key_valid.append(1)
            key_data += key
        key_ends.append(len(key_data))
        if value is None:
            value_valid.append(0)
        else:
            value_valid.append(1)
            value_data += value
        value_ends.append(len(value_data))
        if headers is not None:
            headers.append(hs)
        if kept >= limit and i < count - 1:
            break                 # the records left are not read (nor checked); after the
                                  # last one, the parser still checks the body's end
    return _flush(cols, offs, stamps, key_ends, value_ends, ts_type)


def _flush(cols: _Columns, offs, stamps, key_ends, value_ends, ts_type: int) -> int:
    if len(cols.key_data) > _MAX_I32 or len(cols.value_data) > _MAX_I32:
        raise ValueError("more than 2 GiB of keys or values: too large for Arrow binary")
    cols.offsets += _le("q", offs)
    cols.timestamps += _le("q", stamps)
    cols.types += _le("i", [ts_type]) * len(offs)
    cols.key_offsets += _le("i", key_ends)
    cols.value_offsets += _le("i", value_ends)
    return len(offs)


def _decode_body_c(body, count, base_offset, base_ts, lat, ts_type, lo, hi, limit, cols):
    return speedups.decode_columns(body, count, base_offset, base_ts, lat, ts_type, lo, hi,
                                   limit, cols.offsets, cols.timestamps, cols.types,
                                   cols.key_offsets, cols.key_data, cols.key_valid,
                                   cols.value_offsets, cols.value_data, cols.value_valid,
                                   cols.headers)


_decode_one = _decode_body_c if speedups is not None and hasattr(
    speedups, "decode_columns") else _decode_body
IMPLEMENTATION = "c" if _decode_one is _decode_body_c else "python"


def decode_columns(data, *, start_offset: int = 0, end_offset: int = 2**63 - 1,
                   include_headers: bool = False, max_records: int | None = None,
                   keep_batch: Callable[[RecordBatchHeader], bool] | None = None,
                   max_decompressed: int = codecs.DEFAULT_MAX_DECOMPRESSED,
                   verify_crc: bool = True) -> RecordColumns:
    """Columns of the records in `data` with offsets in [start_offset, end_offset).

    `keep_batch(header)`, if given, drops whole batches it returns False for (a read_committed
    reader's aborted-transaction filter); control batches are always dropped. A truncated last
    batch is ignored; anything else malformed raises DecodeError.
    """
    cols = _Columns(include_headers)
    # offsets are int64 on the wire: clamping the range keeps both decoders in int64
    start_offset, end_offset = max(start_offset, _MIN_I64), min(end_offset, _MAX_I64)
    remaining = min(max_records, _MAX_I64) if max_records is not None else _MAX_I64
    decode_one = _decode_one
    for h in iter_batches(data):
        if remaining <= 0 or h.base_offset >= end_offset:
            break
        if h.last_offset < start_offset:
            continue
        reason = h.invalid_reason(check_crc=verify_crc)
        if reason is not None:
            raise DecodeError(f"invalid record batch at offset {h.base_offset}: {reason}")
        if h.is_control or (keep_batch is not None and not keep_batch(h)):
            continue
        body = memoryview(h.buf)[h.pos + BATCH_HEADER_SIZE:h.pos + h.size_in_bytes]
        if h.compression != Compression.NONE:
            body = codecs.decompress(h.compression, body, max_decompressed)
        log_append = h.timestamp_type == TimestampType.LOG_APPEND_TIME
        remaining -= decode_one(body, h.records_count, h.base_offset, h.base_timestamp,
                                h.max_timestamp if log_append else None, int(log_append),
                                start_offset, end_offset, remaining, cols)
    return cols.finish()
