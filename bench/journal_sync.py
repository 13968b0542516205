"""What one journal sync costs on this disk: a 300-byte append then fsync or fdatasync, to a file
growing by appends or to a preallocated (zero-written) one where the write changes no size,
the four interleaved so the machine's load weighs on each alike (issue 20 item 4: the Raft
journal's sync per commit).

    python3 bench/journal_sync.py [--syncs 3000] [--dir /tmp]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

MODES = ["append+fsync", "append+fdatasync", "prealloc+fsync", "prealloc+fdatasync"]
RECORD = b"x" * 300


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--syncs", type=int, default=3000)
    ap.add_argument("--dir", default=None, help="where the files go (default: the temp dir)")
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="raftka-journal-sync-", dir=args.dir)
    fds, pos, lat = {}, {}, {m: [] for m in MODES}
    for m in MODES:
        fd = os.open(os.path.join(root, m), os.O_RDWR | os.O_CREAT, 0o644)
        if m.startswith("prealloc"):
            os.pwrite(fd, b"\0" * (len(RECORD) * args.syncs + 4096), 0)
            os.fsync(fd)
        fds[m], pos[m] = fd, 0
    for _ in range(args.syncs):
        for m in MODES:
            t = time.perf_counter()
            if m.startswith("prealloc"):
                os.pwrite(fds[m], RECORD, pos[m])
            else:
                os.write(fds[m], RECORD)
            pos[m] += len(RECORD)
            (os.fdatasync if m.endswith("fdatasync") else os.fsync)(fds[m])
            lat[m].append(time.perf_counter() - t)
    for m in MODES:
        os.close(fds[m])
        os.remove(os.path.join(root, m))
        s = sorted(lat[m])
        n = len(s)
        print(f"{m:20s} p50 {s[n // 2] * 1e3:.3f} ms  p90 {s[int(n * .9)] * 1e3:.3f} ms  "
              f"p99 {s[int(n * .99)] * 1e3:.3f} ms  mean {sum(s) / n * 1e3:.3f} ms")
    os.rmdir(root)


if __name__ == "__main__":
    main()
