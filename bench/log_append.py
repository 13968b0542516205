"""Append throughput of PartitionLog vs a plain write() loop to the same disk, in one run.

    python3 -m bench.log_append [--mib 256] [--dir DIR] [--fsync-mib 16]

For 1 MiB and 16 KiB batches (1 KiB records, uncompressed) it appends the same batch bytes
through `append_as_leader` (validation + CRC, offset/epoch stamping, index upkeep, rolling at
the default 1 GiB) and through `os.write` of the same bytes to one file, and prints MB/s and the
ratio log/plain (goal >= 0.8 for 1 MiB). With --fsync-mib it also measures fsync-every-append
(flush.messages=1) against write+fsync. Files go in a temp dir under --dir (default: cwd, so the
same disk as the repository, not a tmpfs).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

from partition_server.log import LogConfig, PartitionLog
from wire.records.batch import build_batch


def make_batch(batch_bytes: int) -> bytes:
    n = max(1, batch_bytes // 1040)
    payload = os.urandom(1000)
    return build_batch([(b"key-%06d" % i, payload, [], 1_700_000_000_000 + i) for i in range(n)])


def bench_log(directory: str, batch: bytes, total: int, config: LogConfig) -> float:
    plog = PartitionLog(directory, config)
    count = max(1, total // len(batch))
    start = time.perf_counter()
    for i in range(count):
        plog.append_as_leader(batch, 1, 1_700_000_000_000 + i)
    plog.flush()                         # both sides end with their data on disk
    elapsed = time.perf_counter() - start
    plog.close()
    return count * len(batch) / elapsed / 1e6


def bench_plain(path: str, batch: bytes, total: int, fsync_each: bool) -> float:
    count = max(1, total // len(batch))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    start = time.perf_counter()
    for _ in range(count):
        view = memoryview(batch)
        while view:
            view = view[os.write(fd, view):]
        if fsync_each:
            os.fsync(fd)
    os.fsync(fd)
    elapsed = time.perf_counter() - start
    os.close(fd)
    return count * len(batch) / elapsed / 1e6


def run_case(root: str, label: str, batch_bytes: int, total: int, fsync_each: bool) -> None:
    batch = make_batch(batch_bytes)
    config = LogConfig(flush_messages=1) if fsync_each else LogConfig()
    plain, logged = [], []
    for rnd in range(2):                 # alternate, best of two: the disk is shared and noisy
        plain.append(bench_plain(os.path.join(root, f"plain-{rnd}"), batch, total, fsync_each))
        os.unlink(os.path.join(root, f"plain-{rnd}"))
        d = os.path.join(root, f"log-{rnd}")
        logged.append(bench_log(d, batch, total, config))
        shutil.rmtree(d)
    p, g = max(plain), max(logged)
    print(f"{label:<28} plain {p:8.1f} MB/s   log {g:8.1f} MB/s   ratio {g / p:5.2f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=256, help="MiB written per case and round")
    ap.add_argument("--fsync-mib", type=int, default=16, help="0 skips the fsync cases")
    ap.add_argument("--dir", default=".")
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="bench-log-append-", dir=args.dir)
    try:
        total = args.mib << 20
        run_case(root, "1 MiB batches", 1 << 20, total, False)
        run_case(root, "16 KiB batches", 16 << 10, total // 4, False)
        if args.fsync_mib:
            run_case(root, "1 MiB, fsync every append", 1 << 20, args.fsync_mib << 20, True)
            run_case(root, "16 KiB, fsync every append", 16 << 10, args.fsync_mib << 18, True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
