"""Kafka protocol primitives: fixed-width ints, varints, strings, bytes, uuids.

Readers take `(buf, pos)` and return `(value, new_pos)`; writers append to a `bytearray`. A read
past the end, a negative length other than the null marker, an over-long varint or a length larger
than the bytes that remain raises `DecodeError` before anything is allocated, so a peer claiming a
2 GB string costs nothing.
"""

from __future__ import annotations

import struct
import uuid

from wire.errors import DecodeError

INT8 = struct.Struct(">b")
INT16 = struct.Struct(">h")
UINT16 = struct.Struct(">H")
INT32 = struct.Struct(">i")
UINT32 = struct.Struct(">I")
INT64 = struct.Struct(">q")
FLOAT64 = struct.Struct(">d")
BOOL = struct.Struct(">?")

ZERO_UUID = uuid.UUID(int=0)

MAX_VARINT_BYTES = 5
MAX_VARLONG_BYTES = 10


def read_uvarint(buf, pos: int) -> tuple[int, int]:
    """Unsigned LEB128 varint of at most 5 bytes (a 32-bit value)."""
    result = 0
    shift = 0
    end = len(buf)
    for i in range(MAX_VARINT_BYTES):
        if pos >= end:
            raise DecodeError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            if result > 0xFFFFFFFF:
                raise DecodeError("varint out of range")
            return result, pos
        shift += 7
    raise DecodeError("varint longer than 5 bytes")


def read_uvarlong(buf, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    end = len(buf)
    for i in range(MAX_VARLONG_BYTES):
        if pos >= end:
            raise DecodeError("truncated varlong")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            if result >= 1 << 64:
                raise DecodeError("varlong out of range")
            return result, pos
        shift += 7
    raise DecodeError("varlong longer than 10 bytes")


def read_varint(buf, pos: int) -> tuple[int, int]:
    """Zig-zag signed varint (32-bit)."""
    v, pos = read_uvarint(buf, pos)
    return (v >> 1) ^ -(v & 1), pos


def read_varlong(buf, pos: int) -> tuple[int, int]:
    """Zig-zag signed varlong (64-bit)."""
    v, pos = read_uvarlong(buf, pos)
    return (v >> 1) ^ -(v & 1), pos


def write_uvarint(out: bytearray, value: int) -> None:
    if value < 0:
        raise ValueError("unsigned varint cannot be negative")
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def uvarint_bytes(value: int) -> bytes:
    if 0 <= value < 0x80:
        return _SMALL_UVARINTS[value]
    out = bytearray()
    write_uvarint(out, value)
    return bytes(out)


_SMALL_UVARINTS = [bytes([i]) for i in range(0x80)]


def write_varint(out: bytearray, value: int) -> None:
    write_uvarint(out, ((value << 1) ^ (value >> 31)) & 0xFFFFFFFF)


def write_varlong(out: bytearray, value: int) -> None:
    write_uvarint(out, ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)


def varint_size(value: int) -> int:
    v = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    n = 1
    while v >= 0x80:
        v >>= 7
        n += 1
    return n


def take(buf, pos: int, n: int) -> int:
    """Check that `n` bytes are available at `pos`; return the end position."""
    end = pos + n
    if n < 0 or end > len(buf):
        raise DecodeError(f"length {n} exceeds the {len(buf) - pos} bytes remaining")
    return end


def read_uuid(buf, pos: int) -> tuple[uuid.UUID, int]:
    end = take(buf, pos, 16)
    return uuid.UUID(bytes=bytes(buf[pos:end])), end


def uuid_bytes(value) -> bytes:
    if isinstance(value, uuid.UUID):
        return value.bytes
    if isinstance(value, (bytes, bytearray)) and len(value) == 16:
        return bytes(value)
    raise ValueError(f"not a uuid: {value!r}")
