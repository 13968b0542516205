"""One record of a v2 batch: `Record` (to encode), `DecodedRecord`, and the pure-Python
reference codec of a records body — split from batch.py, which re-exports all of it.

A record is varint-encoded: length, attributes, timestamp delta, offset delta, key, value,
headers (a null key, value or header value is length -1). `encode_record_py`,
`iter_record_fields`/`decode_records_py` and `_encode_records_py` (the builder's record loop)
are what wire/records/_speedups.c mirrors check by check, with the same DecodeError messages;
batch.py picks the C functions when they are built and these otherwise.
"""

from __future__ import annotations

import dataclasses

from wire.errors import DecodeError
from wire.primitives import read_varint, read_varlong, write_uvarint


@dataclasses.dataclass
class Record:
    offset_delta: int = 0
    timestamp_delta: int = 0
    key: bytes | None = None
    value: bytes | None = None
    headers: list = dataclasses.field(default_factory=list)   # [(str, bytes | None)]
    attributes: int = 0


@dataclasses.dataclass(slots=True)
class DecodedRecord:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list


_ONE_BYTE = [bytes([z]) for z in range(0x80)]
_NULL = _ONE_BYTE[1]                        # zig-zag -1: a null key, value or header value


def _vb(value: int) -> bytes:
    """Zig-zag varint bytes (the same encoding serves varint and varlong in range)."""
    z = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    if z < 0x80:
        return _ONE_BYTE[z]
    if z < 0x4000:
        return bytes(((z & 0x7F) | 0x80, z >> 7))
    out = bytearray()
    write_uvarint(out, z)
    return bytes(out)


def encode_record_py(out: bytearray, r: Record) -> None:
    """The pure-Python reference encoder (the C `encode_record` must produce the same bytes)."""
    key, value = r.key, r.value
    parts = [_ONE_BYTE[r.attributes & 0x7F], _vb(r.timestamp_delta), _vb(r.offset_delta)]
    if key is None:
        parts.append(_NULL)
    else:
        parts += (_vb(len(key)), key)
    if value is None:
        parts.append(_NULL)
    else:
        parts += (_vb(len(value)), value)
    parts.append(_vb(len(r.headers)))
    for hk, hv in r.headers:
        hk = hk.encode("utf-8") if isinstance(hk, str) else hk
        parts += (_vb(len(hk)), hk)
        if hv is None:
            parts.append(_NULL)
        else:
            parts += (_vb(len(hv)), hv)
    body = b"".join(parts)
    out += _vb(len(body))
    out += body


def _varint(buf: bytes, pos: int, slow=read_varint) -> tuple[int, int]:
    # fast path for the one- and two-byte varints that make up most of a record
    try:
        b = buf[pos]
        if b < 0x80:
            return (b >> 1) ^ -(b & 1), pos + 1
        c = buf[pos + 1]
        if c < 0x80:
            v = (b & 0x7F) | c << 7
            return (v >> 1) ^ -(v & 1), pos + 2
    except IndexError:
        raise DecodeError("truncated varint") from None
    return slow(buf, pos)


def _varlong(buf: bytes, pos: int) -> tuple[int, int]:
    return _varint(buf, pos, read_varlong)


def _read_bytes(buf: bytes, pos: int):
    n, pos = _varint(buf, pos)
    if n < 0:
        return None, pos
    end = pos + n
    if end > len(buf):
        raise DecodeError("record field runs past the end of the batch")
    return buf[pos:end], end


def iter_record_fields(data, count: int):
    """The pure-Python reference parser of an uncompressed records body: yields
    (timestamp_delta, offset_delta, key, value, headers) for each of `count` records, checking
    each record as it goes and, once all are read, that they fill `data` exactly. The C
    decoders mirror its checks and DecodeError messages one by one."""
    if count < 0 or count > len(data):
        raise DecodeError(f"record count {count} does not fit the {len(data)} bytes of records")
    buf = data if isinstance(data, bytes) else bytes(data)   # bytes index and slice fastest
    n = len(buf)
    pos = 0
    for _ in range(count):
        length, pos = _varint(buf, pos)
        end = pos + length
        if length < 1 or end > n:
            raise DecodeError("record length runs past the end of the batch")
        ts_delta, pos = _varlong(buf, pos + 1)             # skip the unused attributes
        off_delta, pos = _varint(buf, pos)
        key, pos = _read_bytes(buf, pos)
        value, pos = _read_bytes(buf, pos)
        nh, pos = _varint(buf, pos)
        if nh < 0 or nh > end - pos:
            raise DecodeError("bad header count")
        headers = []
        for _ in range(nh):
            hk, pos = _read_bytes(buf, pos)
            hv, pos = _read_bytes(buf, pos)
            if hk is None:
                raise DecodeError("null header key")
            # Java decodes header keys leniently (malformed UTF-8 becomes U+FFFD); so do we
            headers.append((hk.decode("utf-8", "replace"), hv))
        if pos != end:
            raise DecodeError("record length does not match its fields")
        yield ts_delta, off_delta, key, value, headers
    if pos != n:
        # Kafka rejects a batch whose records do not fill it exactly ("records still remaining")
        raise DecodeError(f"{n - pos} bytes left after the batch's {count} records")


def decode_records_py(data, count: int, base_offset: int, base_timestamp: int,
                      log_append_time: int | None = None) -> list[DecodedRecord]:
    """The pure-Python reference decoder (the C `decode_records` mirrors it check by check)."""
    return [DecodedRecord(base_offset + off_delta,
                          log_append_time if log_append_time is not None
                          else base_timestamp + ts_delta, key, value, headers)
            for ts_delta, off_delta, key, value, headers in iter_record_fields(data, count)]


def _encode_records_py(body: bytearray, pending: list, base_ts: int, now: int, now_marker
                       ) -> tuple[int | None, int]:
    """The reference for the C `encode_records`: RecordBatchBuilder.build's record loop."""
    max_ts = None
    last_delta = 0
    for off_delta, ts, key, value, headers, attributes, ts_delta in pending:
        if ts is not None:
            ts_delta = (now if ts is now_marker else ts) - base_ts
        rec_ts = base_ts + ts_delta
        if max_ts is None or rec_ts > max_ts:
            max_ts = rec_ts
        if off_delta > last_delta:
            last_delta = off_delta
        encode_record_py(body, Record(off_delta, ts_delta, key, value, headers, attributes))
    return max_ts, last_delta

