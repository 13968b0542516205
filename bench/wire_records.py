"""Benchmark of wire/records: header view + CRC check, and per-record encode/decode costs with the
C accelerator (wire/records/_speedups.c) and the pure-Python reference side by side.

    python3 -m bench.wire_records [--seconds 1.0] [--records 10000] [--sizes 10,100,1000]
                                  [--heap 300000]

Prints, for a 1 MiB batch, how fast the log validates it without decoding records (the append
and recovery path: one struct.unpack_from + CRC-32C). Then, per record size, microseconds per
record for: decode_batch (DecodedRecord objects: the consumer), decode_columns (Arrow buffers:
the Spark connector), build_batch (RecordBatchBuilder: sink/admin) and encode_record_fields (one
record into a bytearray: a producer's append), each pure Python vs C in the same run, plus the
speedup. Finally decode/encode rates per compression codec with the implementation in use.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time

from wire.records import batch
from wire.records import columns
from wire.records import crc32c as crc_module
from wire.records.batch import (Compression, RecordBatchHeader, build_batch, decode_batch,
                                encode_record_fields)
from wire.records.columns import decode_columns


def _rate(fn, seconds: float) -> tuple[int, float]:
    """Run `fn` repeatedly for about `seconds` of CPU time; returns (iterations, elapsed).
    CPU time, not wall time: the 2-core machines we share are often busy with other work."""
    fn()                                                   # warm up
    n, start = 0, time.process_time()
    while True:
        fn()
        n += 1
        elapsed = time.process_time() - start
        if elapsed >= seconds:
            return n, elapsed


def _us_per_record(fn, count: int, seconds: float) -> float:
    n, elapsed = _rate(fn, seconds)
    return elapsed / n / count * 1e6


@contextlib.contextmanager
def pure_python():
    """Route wire.records through its pure-Python reference for the duration (what
    RAFTKA_PURE_PYTHON=1 does at import time)."""
    saved = (batch._c_encode, batch._c_decode, batch._c_encode_records, columns._decode_one)
    batch._c_encode = batch._c_decode = batch._c_encode_records = None
    columns._decode_one = columns._decode_body
    try:
        yield
    finally:
        (batch._c_encode, batch._c_decode, batch._c_encode_records,
         columns._decode_one) = saved


def _records(count: int, size: int) -> list[tuple]:
    # half random (shared by all records), half a counter: codecs find the repeats
    rnd = os.urandom(max(size // 2, 1))
    value_len = max(size - 12, 1)
    return [(b"key-%08d" % i, (rnd + b"%08d" % i * (size // 16 + 1))[:value_len], [],
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


def _cases(recs: list, data: bytes):
    def producer_append():
        out = bytearray()
        for i, (k, v, h, ts) in enumerate(recs):
            encode_record_fields(out, i, ts - 1_700_000_000_000, k, v, h)
    return [("decode_batch", lambda: decode_batch(data)),
            ("decode_columns", lambda: decode_columns(data)),
            ("build_batch", lambda: build_batch(recs, now_ms=0)),
            ("encode_record_fields", producer_append)]


def bench_pure_vs_c(count: int, size: int, seconds: float) -> dict:
    """µs per record for each case, pure Python and C, measured alternately in one run."""
    recs = _records(count, size)
    data = build_batch(recs)
    results = {}
    for name, fn in _cases(recs, data):
        with pure_python():
            pure = _us_per_record(fn, count, seconds)
        c = _us_per_record(fn, count, seconds) if batch.speedups is not None else float("nan")
        results[name] = (pure, c)
        print(f"  {name:>21}: pure {pure:7.3f} us/rec | C {c:7.3f} us/rec | "
              f"x{pure / c:5.1f}")
    return results


def bench_codec(codec: Compression, count: int, seconds: float) -> None:
    recs = _records(count, 100)
    raw_bytes = sum(len(k) + len(v) for k, v, _, _ in recs)
    data = build_batch(recs, compression=codec)
    dec = _us_per_record(lambda: decode_batch(data), count, seconds)
    cols = _us_per_record(lambda: decode_columns(data), count, seconds)
    enc = _us_per_record(lambda: build_batch(recs, compression=codec), count, seconds)
    print(f"  {codec.name:>6}: wire {len(data) / raw_bytes:5.2f}x of payload | decode_batch "
          f"{dec:6.3f} | decode_columns {cols:6.3f} | build_batch {enc:6.3f} us/rec")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=1.0, help="time per measurement")
    p.add_argument("--records", type=int, default=10_000, help="records per batch")
    p.add_argument("--sizes", default="10,100,1000", help="record sizes (key+value bytes)")
    p.add_argument("--heap", type=int, default=0,
                   help="keep this many small lists alive while measuring, like an application's "
                        "heap: the cyclic GC's full collections scan it, which is what decoding "
                        "into per-record objects pays for in a real consumer")
    args = p.parse_args(argv)
    heap = [[i] for i in range(args.heap)]
    if heap:
        print(f"with {len(heap)} other objects alive on the heap")
    bench_header_crc(args.seconds)
    print(f"implementation in use: {batch.IMPLEMENTATION} (RAFTKA_PURE_PYTHON=1 forces python)")
    for size in (int(s) for s in args.sizes.split(",")):
        print(f"{args.records} records of ~{size} B, uncompressed, pure Python vs C:")
        bench_pure_vs_c(args.records, size, args.seconds)
    print(f"per codec ({batch.IMPLEMENTATION}), {args.records} records of ~100 B:")
    for codec in Compression:
        bench_codec(codec, args.records, args.seconds)


if __name__ == "__main__":
    main()
