"""Read throughput of PartitionLog.read over a loopback TCP socket: os.sendfile vs read+send.

    python3 -m bench.log_read [--mib 256] [--fetch-kib 1024] [--dir DIR]

Writes a log of --mib MiB (16 KiB batches), then streams it to a receiver process on 127.0.0.1 that discards the bytes: once sending each fetch's `FileRange`s with `os.sendfile`
(zero copy, what the broker does), once reading them into memory and `sendall` (what a TLS or
non-sendfile transport must do); best of three each, with the sender's CPU time per GB.
Pages are warm (just written), as for a consumer near the tail.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

from partition_server.log import LogConfig, PartitionLog
from wire.records.batch import build_batch


def fill(directory: str, total: int) -> PartitionLog:
    plog = PartitionLog(directory, LogConfig())
    payload = os.urandom(1000)
    batch = build_batch([(b"k%d" % i, payload, [], 1_700_000_000_000) for i in range(15)])
    for i in range(total // len(batch)):
        plog.append_as_leader(batch, 1, 1_700_000_000_000)
    plog.flush()
    return plog


RECEIVER = """
import socket, sys
conn = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
buf, got = bytearray(1 << 20), 0
while True:
    n = conn.recv_into(buf)
    if not n:
        break
    got += n
print(got)
"""


def stream(plog: PartitionLog, fetch_bytes: int, use_sendfile: bool) -> tuple[float, float]:
    """(MB/s, sender CPU seconds per GB); the receiver is another process (no shared GIL)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    child = subprocess.Popen([sys.executable, "-c", RECEIVER, str(server.getsockname()[1])],
                             stdout=subprocess.PIPE, text=True)
    sock, _ = server.accept()
    total = sum(s.size for s in plog.segments)
    cpu0, start = time.process_time(), time.perf_counter()
    offset, sent = plog.log_start_offset, 0
    while offset < plog.log_end_offset:
        info = plog.read(offset, fetch_bytes)
        for r in info.ranges:
            if use_sendfile:
                pos, left = r.position, r.size
                f = r.open_file()
                while left:
                    n = os.sendfile(sock.fileno(), f.fd, pos, left)
                    pos, left = pos + n, left - n
            else:
                sock.sendall(r.read())
            sent += r.size
        offset = info.next_offset
    sock.shutdown(socket.SHUT_WR)
    got = int(child.communicate(timeout=60)[0])
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu0
    sock.close()
    server.close()
    assert got == sent == total, (got, sent, total)
    return total / elapsed / 1e6, cpu / (total / 1e9)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--fetch-kib", type=int, default=1024)
    ap.add_argument("--dir", default=".")
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="bench-log-read-", dir=args.dir)
    try:
        plog = fill(os.path.join(root, "r-0"), args.mib << 20)
        results = {True: [], False: []}
        for _ in range(3):
            for mode in (True, False):
                results[mode].append(stream(plog, args.fetch_kib << 10, mode))
        (sf, sf_cpu), (rs, rs_cpu) = max(results[True]), max(results[False])
        print(f"fetch {args.fetch_kib} KiB: sendfile {sf:7.1f} MB/s ({sf_cpu:.2f} CPU s/GB)   "
              f"read+send {rs:7.1f} MB/s ({rs_cpu:.2f} CPU s/GB)   throughput ratio "
              f"{sf / rs:4.2f}, sender CPU ratio {sf_cpu / rs_cpu:4.2f}")
        plog.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
