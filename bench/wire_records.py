"""Benchmark of wire/records: header view + CRC check, record decode and encode rates.

    python3 -m bench.wire_records [--seconds 1.0] [--records 10000]

Prints, for a 1 MiB batch, how fast the log can validate it without decoding records (the
append and recovery path: one struct.unpack_from + CRC-32C), and for 100-byte records the
full decode and encode rates per codec (the consumer-side / re-encode path).
"""

from __future__ import annotations

import argparse
import os
import time

from wire.records import crc32c as crc_module
from wire.records.batch import Compression, RecordBatchHeader, build_batch, decode_batch


def _rate(fn, seconds: float) -> tuple[int, float]:
    """Run `fn` repeatedly for about `seconds`; returns (iterations, elapsed)."""
    fn()                                                   # warm up
    n, start = 0, time.perf_counter()
    while True:
        fn()
        n += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return n, elapsed


def _records(count: int, size: int) -> list[tuple]:
    # a random 50-byte block (shared by all records) plus a counter: codecs find the repeats
    rnd = os.urandom(size // 2)
    return [(b"key-%08d" % i, rnd[: size // 2] + (b"%08d" % i) * (size // 16), [],
             1_700_000_000_000 + i) for i in range(count)]


def bench_header_crc(seconds: float) -> float:
    data = build_batch([(None, os.urandom(1000), [], 0) for _ in range(1040)])
    assert 1 << 20 <= len(data) < (1 << 20) + 64 * 1024
    view = memoryview(data)

    def check():
        h = RecordBatchHeader(view)
        if not h.is_valid():
            raise AssertionError("benchmark batch should be valid")
    n, elapsed = _rate(check, seconds)
    gbps = n * len(data) / elapsed / 1e9
    print(f"header view + CRC-32C ({crc_module.IMPLEMENTATION}), {len(data) / 2**20:.2f} MiB "
          f"batch: {gbps:6.2f} GB/s  ({elapsed / n * 1e6:.0f} us/batch)")
    return gbps


def bench_codec(codec: Compression, count: int, seconds: float) -> None:
    recs = _records(count, 100)
    raw_bytes = sum(len(k) + len(v) for k, v, _, _ in recs)
    data = build_batch(recs, compression=codec)
    n, elapsed = _rate(lambda: decode_batch(data), seconds)
    dec_rps = n * count / elapsed
    n, elapsed = _rate(lambda: build_batch(recs, compression=codec), seconds)
    enc_rps = n * count / elapsed
    mb = raw_bytes / count / 1e6
    print(f"{codec.name:>6}: wire {len(data) / raw_bytes:5.2f}x of payload | decode "
          f"{dec_rps / 1e3:8.0f} k rec/s {dec_rps * mb:6.1f} MB/s | encode "
          f"{enc_rps / 1e3:8.0f} k rec/s {enc_rps * mb:6.1f} MB/s")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=1.0, help="time per measurement")
    p.add_argument("--records", type=int, default=10_000, help="records per batch (100 B each)")
    args = p.parse_args(argv)
    bench_header_crc(args.seconds)
    print(f"{args.records} records of ~100 B per batch (MB/s counts key+value bytes):")
    for codec in Compression:
        bench_codec(codec, args.records, args.seconds)


if __name__ == "__main__":
    main()
