"""Record batch compression codecs: gzip, snappy, lz4 (frame), zstd — both directions.

- snappy: librdkafka sends raw snappy blocks, the Java and Python clients send Xerial framing
  (`\\x82SNAPPY\\x00` magic, two big-endian int32 versions, then int32-length-prefixed raw blocks).
  We decode both (told apart by the magic) and encode Xerial by default, which every client
  reads; `snappy_xerial=False` gives a raw block.
- lz4: the LZ4 *frame* format (magic v2 batches; the broken-checksum KafkaLZ4 variant of magic
  0/1 is not needed since we store only v2).
- Every decompression is bounded by `max_bytes`: a small payload claiming to expand to gigabytes
  (a decompression bomb) raises `DecodeError` before that much memory is used, and truncated or
  corrupt input raises `DecodeError` too (codec libraries' own exceptions never escape).
  Concatenated gzip members / lz4 or zstd frames are accepted, as Java's stream readers do.
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
XERIAL_HEADER = struct.Struct(">8sii")          # magic, version, compatible version
XERIAL_BLOCK = 32 * 1024                        # snappy-java's default block size
_I32 = struct.Struct(">i")
# zstd's worst case is an RLE block: ~4 input bytes -> 128 KiB output (ratio 2**15). Feeding the
# input in slices of at most remaining_budget / 2**17 bytes keeps each call's output to about a
# quarter of the budget, so the limit check between slices bounds memory even for a bomb.
_ZSTD_MAX_RATIO_SHIFT = 17
_ZSTD_MIN_SLICE = 128
_MAX_FRAMES = 10_000                            # concatenated members/frames per payload

_zstd_c = zstandard.ZstdCompressor(level=3)
_zstd_d = zstandard.ZstdDecompressor()


def compress(codec: int, data, *, snappy_xerial: bool = True, level: int | None = None) -> bytes:
    """Compress `data` with `codec`; `level` is the codec's own level (None = our default)."""
    if codec == NONE:
        return bytes(data)
    if codec == GZIP:
        c = zlib.compressobj(6 if level is None else level, zlib.DEFLATED, 31)  # 31 = gzip
        return c.compress(data) + c.flush()
    if codec == SNAPPY:
        if snappy_xerial:
            return _xerial_compress(data)
        return bytes(cramjam.snappy.compress_raw(bytes(data)))
    if codec == LZ4:
        return lz4.frame.compress(bytes(data), compression_level=level or 0)
    if codec == ZSTD:
        cctx = _zstd_c if level is None else zstandard.ZstdCompressor(level=level)
        return cctx.compress(bytes(data))
    raise ValueError(f"unknown compression codec {codec}")


def decompress(codec: int, data, max_bytes: int = DEFAULT_MAX_DECOMPRESSED) -> bytes:
    """Inflate `data`; DecodeError if corrupt, truncated, or larger than `max_bytes`."""
    try:
        if codec == NONE:
            out = bytes(data)
        elif codec == GZIP:
            out = _gzip_decompress(bytes(data), max_bytes)
        elif codec == SNAPPY:
            out = _snappy_decompress(bytes(data), max_bytes)
        elif codec == LZ4:
            out = _lz4_decompress(bytes(data), max_bytes)
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


def _too_big(max_bytes: int) -> DecodeError:
    return DecodeError(f"decompressed size exceeds {max_bytes} bytes")


def _gzip_decompress(data: bytes, max_bytes: int) -> bytes:
    out = bytearray()
    for _ in range(_MAX_FRAMES):
        d = zlib.decompressobj(47)                        # 47 = auto-detect gzip/zlib header
        out += d.decompress(data, max_bytes + 1 - len(out))
        if len(out) > max_bytes:
            raise _too_big(max_bytes)
        if not d.eof:
            raise DecodeError("truncated gzip stream")
        data = d.unused_data
        if not data:
            return bytes(out)
    raise DecodeError("too many gzip members")


def _lz4_decompress(data: bytes, max_bytes: int) -> bytes:
    out = bytearray()
    for _ in range(_MAX_FRAMES):
        d = lz4.frame.LZ4FrameDecompressor()
        out += d.decompress(data, max_length=max_bytes + 1 - len(out))
        if len(out) > max_bytes:
            raise _too_big(max_bytes)
        if not d.eof:
            raise DecodeError("truncated lz4 frame")
        data = d.unused_data
        if not data:
            return bytes(out)
    raise DecodeError("too many lz4 frames")


def _zstd_decompress(data: bytes, max_bytes: int) -> bytes:
    out = bytearray()
    view = memoryview(data)
    pos = 0
    for _ in range(_MAX_FRAMES):
        dobj = _zstd_d.decompressobj()
        while pos < len(view) and not dobj.eof:
            step = max(_ZSTD_MIN_SLICE, (max_bytes - len(out)) >> _ZSTD_MAX_RATIO_SHIFT)
            out += dobj.decompress(view[pos:pos + step])
            pos = min(pos + step, len(view))
            if len(out) > max_bytes:
                raise _too_big(max_bytes)
        if not dobj.eof:
            raise DecodeError("truncated zstd frame")
        pos -= len(dobj.unused_data)                  # the slice may overrun into the next frame
        if pos >= len(view):
            return bytes(out)
    raise DecodeError("too many zstd frames")


def _xerial_compress(data) -> bytes:
    out = bytearray(XERIAL_HEADER.pack(XERIAL_MAGIC, 1, 1))
    view = memoryview(data)
    for i in range(0, len(view), XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(bytes(view[i:i + XERIAL_BLOCK])))
        out += _I32.pack(len(block)) + block
    return bytes(out)


def _snappy_declared_length(block: bytes) -> int:
    """The uncompressed length a raw snappy block declares (its leading uvarint)."""
    length = 0
    for i in range(min(len(block), 5)):
        b = block[i]
        length |= (b & 0x7F) << (7 * i)
        if not b & 0x80:
            return length
    raise DecodeError("bad snappy length preamble")


def _raw_snappy_decompress(block: bytes, budget: int) -> bytes:
    # check the declared size before inflating, so a bomb never gets its buffer
    if _snappy_declared_length(block) > budget:
        raise DecodeError("snappy block larger than the decompression limit")
    return bytes(cramjam.snappy.decompress_raw(block))


def _snappy_decompress(data: bytes, max_bytes: int) -> bytes:
    if not data.startswith(XERIAL_MAGIC):
        return _raw_snappy_decompress(data, max_bytes)
    if len(data) < XERIAL_HEADER.size:
        raise DecodeError("truncated xerial snappy header")
    out = bytearray()
    pos = XERIAL_HEADER.size
    while pos < len(data):
        if pos + 4 > len(data):
            raise DecodeError("truncated xerial snappy block header")
        n, = _I32.unpack_from(data, pos)
        pos += 4
        if n < 0 or pos + n > len(data):
            raise DecodeError("truncated xerial snappy block")
        out += _raw_snappy_decompress(data[pos:pos + n], max_bytes - len(out))
        pos += n
    return bytes(out)
