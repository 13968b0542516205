"""Frames: a 4-byte big-endian size prefix, then a request or response header, then the body.

Request header v0: api_key, api_version, correlation_id. v1 adds a classic nullable client_id.
v2 (flexible requests) adds a tagged-field block. Response header v0: correlation_id; v1 adds a
tagged-field block. The size is checked against the connection's limit *before* buffering, so a
frame claiming 2 GB is refused after reading 4 bytes.
"""

from __future__ import annotations

from wire.errors import DecodeError
from wire.messages.index_generated import ALL
from wire.primitives import INT16, INT32

RequestHeader = ALL["RequestHeader"]
ResponseHeader = ALL["ResponseHeader"]

DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024   # Kafka's socket.request.max.bytes default


def frame_size(buf, max_frame_bytes: int) -> int | None:
    """The size of the frame at the start of `buf`, None if fewer than 4 bytes are there."""
    if len(buf) < 4:
        return None
    size, = INT32.unpack_from(buf, 0)
    if size < 0:
        raise DecodeError(f"negative frame size {size}")
    if size > max_frame_bytes:
        raise DecodeError(f"frame of {size} bytes exceeds the limit of {max_frame_bytes}")
    return size


def peek_api(payload) -> tuple[int, int]:
    """api_key and api_version sit first in every request header version."""
    if len(payload) < 4:
        raise DecodeError("request shorter than its header")
    return INT16.unpack_from(payload, 0)[0], INT16.unpack_from(payload, 2)[0]


def peek_correlation_id(payload) -> int:
    if len(payload) < 8:
        raise DecodeError("request shorter than its header")
    return INT32.unpack_from(payload, 4)[0]


def decode_request_header(payload, header_version: int):
    """Returns (RequestHeader, position of the body)."""
    return RequestHeader.decode_from(payload, 0, header_version)


def encode_response_header(correlation_id: int, header_version: int) -> bytes:
    if header_version == 0:
        return INT32.pack(correlation_id)
    return INT32.pack(correlation_id) + b"\x00"     # v1: no tagged fields


def size_prefix(n: int) -> bytes:
    return INT32.pack(n)
