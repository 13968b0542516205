"""Record batch compression codecs: gzip, snappy, lz4 (frame), zstd — both directions.

- snappy: librdkafka sends raw snappy blocks, the Java and Python clients send Xerial framing
  (`\\x82SNAPPY\\x00` header, then big-endian length-prefixed raw blocks). We decode both and
  encode Xerial, which every client reads.
- lz4: the LZ4 *frame* format (magic v2 batches; the broken-checksum variant of magic 0/1 is not
  needed since we store only v2).
- Every decompression is bounded by `max_bytes`: a small payload claiming to expand to gigabytes
  (a decompression bomb) raises `DecodeError` instead of exhausting memory.
"""

from __future__ import annotations

import struct
import zlib

import cramjam
import lz4.frame
import zstandard

from wire.errors import DecodeError

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
BY_NAME = {v: k for k, v in NAMES.items()}

DEFAULT_MAX_DECOMPRESSED = 64 * 1024 * 1024
XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_BLOCK = 32 * 1024

_zstd_c = zstandard.ZstdCompressor(level=3)
_zstd_d = zstandard.ZstdDecompressor()


def compress(codec: int, data: bytes) -> bytes:
    if codec == NONE:
        return bytes(data)
    if codec == GZIP:
        c = zlib.compressobj(6, zlib.DEFLATED, 31)          # 31 = gzip container
        return c.compress(data) + c.flush()
    if codec == SNAPPY:
        return _xerial_compress(data)
    if codec == LZ4:
        return lz4.frame.compress(bytes(data))
    if codec == ZSTD:
        return _zstd_c.compress(bytes(data))
    raise ValueError(f"unknown compression codec {codec}")


def decompress(codec: int, data, max_bytes: int = DEFAULT_MAX_DECOMPRESSED) -> bytes:
    try:
        if codec == NONE:
            out = bytes(data)
        elif codec == GZIP:
            d = zlib.decompressobj(47)                    # 47 = auto-detect gzip/zlib
            out = d.decompress(bytes(data), max_bytes + 1)
        elif codec == SNAPPY:
            out = _snappy_decompress(bytes(data), max_bytes)
        elif codec == LZ4:
            d = lz4.frame.LZ4FrameDecompressor()
            out = d.decompress(bytes(data), max_length=max_bytes + 1)
        elif codec == ZSTD:
            out = _zstd_decompress(bytes(data), max_bytes)
        else:
            raise DecodeError(f"unknown compression codec {codec}")
    except DecodeError:
        raise
    except Exception as exc:  # noqa: BLE001 - each codec library raises its own error types
        raise DecodeError(f"{NAMES.get(codec, codec)} decompression failed: {exc}") from None
    if len(out) > max_bytes:
        raise DecodeError(f"decompressed size exceeds {max_bytes} bytes")
    return out


def _zstd_decompress(data: bytes, max_bytes: int) -> bytes:
    dobj = _zstd_d.decompressobj()
    out = bytearray()
    view = memoryview(data)
    for i in range(0, len(view), 65536):
        out += dobj.decompress(view[i:i + 65536])
        if len(out) > max_bytes:
            raise DecodeError(f"decompressed size exceeds {max_bytes} bytes")
    return bytes(out)


def _xerial_compress(data: bytes) -> bytes:
    out = bytearray(XERIAL_MAGIC + struct.pack(">ii", 1, 1))
    view = memoryview(data)
    for i in range(0, len(view), XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(bytes(view[i:i + XERIAL_BLOCK])))
        out += struct.pack(">i", len(block)) + block
    return bytes(out)


def _raw_snappy_decompress(block: bytes, budget: int) -> bytes:
    # the uncompressed length is the block's leading varint: check it before inflating
    length, shift, i = 0, 0, 0
    while i < len(block) and i < 5:
        b = block[i]
        length |= (b & 0x7F) << shift
        i += 1
        if not b & 0x80:
            break
        shift += 7
    if length > budget:
        raise DecodeError("snappy block larger than the decompression limit")
    return bytes(cramjam.snappy.decompress_raw(block))


def _snappy_decompress(data: bytes, max_bytes: int) -> bytes:
    if not data.startswith(XERIAL_MAGIC):
        return _raw_snappy_decompress(data, max_bytes)
    out = bytearray()
    pos = 16
    while pos < len(data):
        if pos + 4 > len(data):
            raise DecodeError("truncated xerial snappy block header")
        n, = struct.unpack_from(">i", data, pos)
        pos += 4
        if n < 0 or pos + n > len(data):
            raise DecodeError("truncated xerial snappy block")
        out += _raw_snappy_decompress(data[pos:pos + n], max_bytes - len(out))
        pos += n
    return bytes(out)
