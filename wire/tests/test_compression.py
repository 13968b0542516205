"""Codecs: round trips, snappy raw vs xerial, truncation, concatenation, decompression bombs."""

import gzip
import os
import struct
import tracemalloc

import cramjam
import lz4.frame
import pytest
import zstandard

from wire.errors import DecodeError
from wire.records import compression as c

CODECS = [c.GZIP, c.SNAPPY, c.LZ4, c.ZSTD]
PAYLOAD = b"".join(b"record %d " % i + os.urandom(i % 40) for i in range(5000))


@pytest.mark.parametrize("codec", [c.NONE] + CODECS)
def test_round_trip(codec):
    for data in (b"", b"x", PAYLOAD):
        packed = c.compress(codec, data)
        assert c.decompress(codec, packed) == data
        assert c.decompress(codec, memoryview(packed)) == data


def test_formats_are_the_standard_ones():
    assert gzip.decompress(c.compress(c.GZIP, PAYLOAD)) == PAYLOAD
    assert lz4.frame.decompress(c.compress(c.LZ4, PAYLOAD)) == PAYLOAD
    assert zstandard.ZstdDecompressor().decompressobj().decompress(
        c.compress(c.ZSTD, PAYLOAD)) == PAYLOAD
    assert c.compress(c.LZ4, b"x")[:4] == b"\x04\x22\x4d\x18"      # lz4 frame magic


def test_snappy_xerial_framing_layout():
    packed = c.compress(c.SNAPPY, PAYLOAD)
    assert packed[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    pos, out = 16, b""
    while pos < len(packed):                      # int32 length + raw block, 32 KiB input each
        n, = struct.unpack_from(">i", packed, pos)
        block = bytes(cramjam.snappy.decompress_raw(packed[pos + 4:pos + 4 + n]))
        assert len(block) <= 32 * 1024
        out += block
        pos += 4 + n
    assert out == PAYLOAD


def test_snappy_raw_librdkafka_style_decodes_and_can_be_produced():
    raw = bytes(cramjam.snappy.compress_raw(PAYLOAD))
    assert c.decompress(c.SNAPPY, raw) == PAYLOAD
    ours = c.compress(c.SNAPPY, PAYLOAD, snappy_xerial=False)
    assert not ours.startswith(c.XERIAL_MAGIC)
    assert bytes(cramjam.snappy.decompress_raw(ours)) == PAYLOAD


def test_concatenated_gzip_members_and_lz4_zstd_frames():
    for codec in (c.GZIP, c.LZ4, c.ZSTD):
        two = c.compress(codec, b"first ") + c.compress(codec, b"second")
        assert c.decompress(codec, two) == b"first second"


@pytest.mark.parametrize("codec", CODECS)
def test_truncated_and_corrupt_input_raise_decode_error(codec):
    packed = c.compress(codec, PAYLOAD)
    for cut in (0, 1, 5, 17, len(packed) // 2, len(packed) - 1):
        if codec == c.GZIP and cut == 0:
            continue                               # an empty gzip stream is tested below
        with pytest.raises(DecodeError):
            c.decompress(codec, packed[:cut])
    for junk in (b"\x00" * 40, os.urandom(100), b"\x82SNAPPY\x00\x00"):
        try:
            c.decompress(codec, junk)
        except DecodeError:
            pass
    with pytest.raises(DecodeError):
        c.decompress(codec, packed + b"\x01\x02\x03")  # trailing garbage after the stream


def test_unknown_codec():
    with pytest.raises(DecodeError):
        c.decompress(5, b"abc")
    with pytest.raises(ValueError):
        c.compress(7, b"abc")


def _peak_mib(fn) -> float:
    tracemalloc.start()
    try:
        fn()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak / 2**20


@pytest.mark.parametrize("codec", CODECS)
def test_decompression_bomb_is_refused_within_bounded_memory(codec):
    limit = 1 << 20
    bomb = c.compress(codec, b"\0" * (16 << 20))
    assert len(bomb) < 1 << 20

    def attempt():
        with pytest.raises(DecodeError, match="exceeds|limit"):
            c.decompress(codec, bomb, max_bytes=limit)
    assert _peak_mib(attempt) < 8 * limit / 2**20
    assert c.decompress(codec, c.compress(codec, b"\0" * limit), max_bytes=limit) == b"\0" * limit


def _zstd_rle_bomb(gib: int = 1) -> bytes:
    """A hand-made zstd frame of RLE blocks: 4 bytes each, 128 KiB of output each."""
    frame = bytearray(b"\x28\xb5\x2f\xfd\x00\x38")     # magic, descriptor, 128 KiB window
    blocks = gib * 8192
    for i in range(blocks):
        header = (128 * 1024) << 3 | 1 << 1 | (i == blocks - 1)   # size | RLE | last block
        frame += header.to_bytes(3, "little") + b"\x00"
    return bytes(frame)


def test_zstd_rle_bomb_a_gibibyte_in_32_kib():
    # zstd's RLE blocks expand 32768x: one naive decompress call would allocate ~1 GiB
    bomb = _zstd_rle_bomb()
    assert len(bomb) < 33 * 1024
    small = _zstd_rle_bomb()[:6] + ((128 * 1024) << 3 | 3).to_bytes(3, "little") + b"\x07"
    assert c.decompress(c.ZSTD, small) == b"\x07" * (128 * 1024)   # the hand-made frame is valid

    def attempt():
        with pytest.raises(DecodeError):
            c.decompress(c.ZSTD, bomb, max_bytes=4 << 20)
    assert _peak_mib(attempt) < 16


def test_snappy_bomb_is_refused_from_its_declared_length():
    # a raw block that claims 2 GiB of output and holds nothing: rejected before allocation
    claim = bytes([0xFF, 0xFF, 0xFF, 0xFF, 0x07]) + b"\x00"
    with pytest.raises(DecodeError):
        c.decompress(c.SNAPPY, claim)
    xerial = c.XERIAL_MAGIC + struct.pack(">iii", 1, 1, len(claim)) + claim
    with pytest.raises(DecodeError):
        c.decompress(c.SNAPPY, xerial)
    with pytest.raises(DecodeError):                  # block length past the end
        c.decompress(c.SNAPPY, c.XERIAL_MAGIC + struct.pack(">iii", 1, 1, 1000) + b"ab")


@pytest.mark.parametrize("codec", CODECS)
def test_random_and_mutated_input_only_ever_raises_decode_error(codec):
    import random
    rng = random.Random(codec)
    packed = c.compress(codec, PAYLOAD[:3000])
    for i in range(1500):
        if i % 2:
            data = bytearray(packed)
            for _ in range(rng.randint(1, 3)):
                data[rng.randrange(len(data))] = rng.getrandbits(8)
            data = bytes(data[:rng.randint(0, len(data))] if i % 3 == 0 else data)
        else:
            data = rng.randbytes(rng.randint(0, 300))
        try:
            out = c.decompress(codec, data, max_bytes=1 << 20)
            assert len(out) <= 1 << 20
        except DecodeError:
            pass
