"""All-topic Metadata latency over the wire, two code trees side by side on the same data
(issue 17: the per-topic answer cache, partition_server/handlers/metadata_cache.py).

The data directory is built as in broker_start.py (3 controllers + 1 broker, RF 1,
`--partitions` in topics of 100, no records). Then, alternating between the `--tree`s, the broker
is started from that tree, and once it leads every partition `--requests` all-topic Metadata v12
requests are sent one after another on one connection, each timed from the send to the last byte
of the answer (raw bytes: no client-side decoding in the figure).

    git worktree add /tmp/old <base commit>        # then copy its C extension in, or build it
    python3 bench/metadata_live.py --partitions 10000 --tree /tmp/old --tree . --rounds 2
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from broker_start import RF1, all_led, build, start_broker, stop  # noqa: E402
from clients.cli.dev import (CONTROLLER_IDS, DevLayout, ManagedProcess,  # noqa: E402
                             wait_ready, write_properties)
from partition_server.testing import free_base_port  # noqa: E402
from wire.connection import ClientConnection  # noqa: E402
from wire.messages.api_keys import ApiKey  # noqa: E402
from wire.messages.index_generated import REQUESTS  # noqa: E402


def read_frame(sock: socket.socket) -> int:
    head = b""
    while len(head) < 4:
        head += sock.recv(4 - len(head))
    size, got = int.from_bytes(head, "big"), 0
    while got < size:
        chunk = sock.recv(min(1 << 20, size - got))
        if not chunk:
            raise ConnectionError("closed")
        got += len(chunk)
    return size


def metadata_latencies(port: int, n: int) -> tuple[list[float], int]:
    conn = ClientConnection()
    req = REQUESTS[ApiKey.METADATA](topics=None, allow_auto_topic_creation=False)
    out, size = [], 0
    with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
        for i in range(n + 1):
            frame = conn.send_request(req, 12)
            t = time.perf_counter()
            sock.sendall(frame)
            size = read_frame(sock)
            if i:                                   # the first one warms the connection up
                out.append((time.perf_counter() - t) * 1000)
    return out, size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, default=10000)
    ap.add_argument("--tree", action="append", required=True, help="a code tree (repeat)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--requests", type=int, default=30)
    args = ap.parse_args()
    trees = [os.path.abspath(t) for t in args.tree]
    data = Path(tempfile.mkdtemp(prefix="metadata-live-"))
    layout = DevLayout(data, free_base_port(), RF1)
    controllers = []
    for i, cid in enumerate(CONTROLLER_IDS):
        path = data / "configs" / f"controller-{cid}.properties"
        write_properties(path, layout.controller_properties(i))
        controllers.append(ManagedProcess(
            f"controller-{cid}", [sys.executable, "-m", "metadata_quorum", "--config", str(path)],
            "listening on", True, layout.log_path(f"controller-{cid}")))
    results: dict[str, list] = {t: [] for t in trees}
    try:
        assert wait_ready(controllers, 60) is None, "controllers did not start"
        topics = build(layout, trees[-1], args.partitions, 0)
        bootstrap = f"127.0.0.1:{layout.broker_port(0)}"
        for r in range(args.rounds):
            for tree in (trees if r % 2 == 0 else trees[::-1]):
                broker = start_broker(layout, tree)
                try:
                    if wait_ready([broker], 600) or not all_led(bootstrap, topics,
                                                                time.monotonic() + 600):
                        print(f"{tree}: FAILED to start", flush=True)
                        continue
                    times, size = metadata_latencies(layout.broker_port(0), args.requests)
                finally:
                    stop(broker, 300)
                results[tree].extend(times)
                print(f"{tree}: p50 {statistics.median(times):.1f} ms, max {max(times):.1f} ms "
                      f"({size:,} B, load {os.getloadavg()[0]:.1f})", flush=True)
    finally:
        for p in controllers:
            p.stop(30)
    print("\ntree | p50 ms | p90 ms | max ms | requests")
    for tree, times in results.items():
        if times:
            q = statistics.quantiles(times, n=10)
            print(f"{tree} | {statistics.median(times):.1f} | {q[-1]:.1f} | {max(times):.1f} | "
                  f"{len(times)}")


if __name__ == "__main__":
    main()
