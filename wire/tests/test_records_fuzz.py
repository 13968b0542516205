"""Seeded fuzzing of the batch decoder: every input decodes or raises DecodeError, quickly."""

import os
import random
import struct
import time
import tracemalloc

import pytest

from wire.errors import DecodeError
from wire.records.batch import (BATCH_HEADER_SIZE, Compression, RecordBatchHeader, build_batch,
                                decode_batch, iter_batches, scan_valid_prefix)
from wire.records.crc32c import crc32c

SEED = 20261122


def _seeds(rng: random.Random) -> list[bytes]:
    out = []
    for codec in Compression:
        recs = [(rng.randbytes(rng.randint(0, 8)) if rng.random() < 0.8 else None,
                 rng.randbytes(rng.randint(0, 60)) if rng.random() < 0.9 else None,
                 [(f"h{j}", rng.randbytes(3)) for j in range(rng.randint(0, 3))],
                 1_700_000_000_000 + rng.randint(-1000, 1000)) for _ in range(rng.randint(1, 6))]
        out.append(build_batch(recs, compression=codec, base_offset=rng.randint(0, 10**6)))
    return out


def _mutate(rng: random.Random, data: bytes, recrc: bool) -> bytes:
    kind = rng.randrange(5)
    b = bytearray(data)
    if kind == 0:
        b = b[:rng.randrange(len(b))]                                   # truncated
    elif kind == 1:
        for _ in range(rng.randint(1, 4)):
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)            # bit flips
    elif kind == 2:
        for _ in range(rng.randint(1, 4)):
            b[rng.randrange(len(b))] = rng.getrandbits(8)                # byte smash
    elif kind == 3:                                                      # huge varint somewhere
        at = rng.randrange(BATCH_HEADER_SIZE, len(b) + 1)
        b[at:at] = rng.choice([b"\xfe\xff\xff\xff\x0f", b"\xff\xff\xff\xff\x0f",
                               b"\x80\x80\x80\x80\x80\x01"])
    else:
        b = bytearray(rng.randbytes(rng.randint(0, 200)))                # noise
    if recrc and len(b) >= BATCH_HEADER_SIZE:
        # fix the CRC so the mutation reaches the record decoder instead of the checksum
        struct.pack_into(">I", b, 17, crc32c(bytes(b[21:])))
    return bytes(b)


def _fuzz(seed: int, cases: int, budget_s: float) -> dict:
    rng = random.Random(seed)
    seeds = _seeds(rng)
    outcomes = {"ok": 0, "error": 0}
    deadline = time.monotonic() + budget_s
    for i in range(cases):
        data = _mutate(rng, rng.choice(seeds), recrc=i % 2 == 0)
        try:
            decoded = decode_batch(data, verify_crc=i % 3 != 0, max_decompressed=1 << 20)
            assert len(decoded.records) == decoded.header.records_count
            outcomes["ok"] += 1
        except DecodeError:
            outcomes["error"] += 1
        assert time.monotonic() < deadline, f"fuzz too slow at case {i} (seed {seed})"
    return outcomes


def test_fuzz_decode_batch_ten_thousand_cases():
    outcomes = _fuzz(SEED, 12_000, 60)
    # both paths must be exercised, or the fuzzer is not reaching the decoder
    assert outcomes["ok"] > 500 and outcomes["error"] > 2000, outcomes


@pytest.mark.slow
def test_fuzz_soak_many_seeds():
    base = int(os.environ.get("RAFTKA_SEED", SEED))
    for seed in range(base, base + 50):
        outcomes = _fuzz(seed, 20_000, 300)
        assert outcomes["ok"] and outcomes["error"], (seed, outcomes)


def test_fuzz_header_scan_and_iteration_never_crash():
    rng = random.Random(SEED + 1)
    seeds = _seeds(rng)
    for _ in range(3000):
        buf = b"".join(_mutate(rng, rng.choice(seeds), recrc=False) for _ in range(3))
        res = scan_valid_prefix(buf)
        assert 0 <= res.valid_bytes <= len(buf)
        assert all(h.is_valid() for h in res.headers)
        assert res.reason is None or res.valid_bytes < len(buf)
        total = 0
        for h in iter_batches(buf):
            total += h.size_in_bytes
            assert h.size_in_bytes >= BATCH_HEADER_SIZE
        assert total <= len(buf)


def test_a_varint_claiming_two_gibibytes_never_allocates():
    recs = [(b"key", b"value", [], 0)]
    good = bytearray(build_batch(recs))
    # the record: length, attrs, ts delta, offset delta, key length (varint 3 = b"\x06")
    key_len_at = BATCH_HEADER_SIZE + 4
    assert good[key_len_at] == 0x06
    bomb = good[:key_len_at] + b"\xfe\xff\xff\xff\x0f" + good[key_len_at + 1:]
    struct.pack_into(">i", bomb, 8, len(bomb) - 12)
    struct.pack_into(">i", bomb, 57, 2**31 - 1)                       # and an absurd count
    struct.pack_into(">I", bomb, 17, crc32c(bytes(bomb[21:])))
    assert RecordBatchHeader(bomb).is_valid()
    tracemalloc.start()
    try:
        for count in (1, 2**31 - 1):
            struct.pack_into(">i", bomb, 57, count)
            struct.pack_into(">I", bomb, 17, crc32c(bytes(bomb[21:])))
            try:
                decode_batch(bytes(bomb))
                raise AssertionError("decoded a record claiming a 2 GiB key")
            except DecodeError:
                pass
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20
