"""What one request costs the brokers (issues 17 and 23): CPU per request, one at a time.

On a 3-controller + 3-broker cluster (the `raftka dev` layout), each workload sends requests one
after another (the next once the answer is in) and divides every broker's CPU (utime + stime
from /proc/<pid>/stat, and stime alone) over the workload by the number of requests:

- `apiversions`: ApiVersions v0 on a raw socket — the request path with almost no handler (its
  answer lists every API, so it is not free either);
- `produce rf1 acks=1`: one 100 B record per Produce (librdkafka, linger 0), to a partition on one
  broker — the produce path without replication;
- `produce rf3 acks=all`: the same to an RF 3 partition (min.insync.replicas 1, the dev default)
  — the leader's request plus its two followers' fetch exchanges.

Idle CPU over the same length of time is measured first and shown: it is included in the
figures (at these rates it is a few µs per request). Ticks are 10 ms, so each workload runs long
enough for thousands of requests.

    python3 bench/request_cost.py [--requests 6000]

Code trees side by side (issue #23: before/after): a cluster started from each tree, the
workloads run on each in turn, round after round (the order alternating), and the median of the
rounds' sums over the brokers per tree, with the ratio of the last tree to the first:

    git worktree add /tmp/old <base commit>        # then build its C extensions
    python3 bench/request_cost.py --tree /tmp/old --tree . --rounds 5
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from bench.code_tree import started_from  # noqa: E402
from partition_server.testing import LiveCluster  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def cpu(pid: int) -> tuple[float, float]:
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2:].split()
    return int(fields[11]) / TICK, int(fields[12]) / TICK


def api_versions(port: int, n: int) -> None:
    s = socket.create_connection(("127.0.0.1", port))
    try:
        for i in range(n):
            body = struct.pack(">hhih", 18, 0, i, 5) + b"bench"
            s.sendall(struct.pack(">i", len(body)) + body)
            size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
            s.recv(size, socket.MSG_WAITALL)
    finally:
        s.close()


def produce(bootstrap: str, topic: str, n: int, acks: str) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 0,
                  "enable.idempotence": False})
    for _ in range(n):
        p.produce(topic, b"x" * 100, partition=0)
        p.flush(30)


def measure(brokers: dict[str, int], run, n: int) -> dict:
    before = {name: cpu(pid) for name, pid in brokers.items()}
    started = time.monotonic()
    run()
    wall = time.monotonic() - started
    after = {name: cpu(pid) for name, pid in brokers.items()}
    total = {name: (sum(after[name]) - sum(before[name])) / n * 1e6 for name in brokers}
    system = {name: (after[name][1] - before[name][1]) / n * 1e6 for name in brokers}
    return {"rate": n / wall, "wall_s": wall, "us": total, "sys_us": system}


def start(tree: str | None) -> tuple[LiveCluster, dict[str, int], int]:
    with started_from(tree):
        cluster = LiveCluster(Path(tempfile.mkdtemp(prefix="bench-request-cost-"))).start()
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for f in admin.create_topics([NewTopic("cost-rf1", 1, 1),
                                  NewTopic("cost-rf3", 1, 3)]).values():
        f.result(30)
    produce(cluster.bootstrap, "cost-rf1", 200, "1")          # connections, first appends
    produce(cluster.bootstrap, "cost-rf3", 200, "all")
    brokers = {p.name: p.proc.pid for p in cluster.procs if p.name.startswith("broker")}
    port = int(cluster.bootstrap.split(",")[0].rsplit(":", 1)[1])
    return cluster, brokers, port


def workloads(cluster: LiveCluster, port: int, n: int) -> list:
    return [("apiversions", lambda: api_versions(port, n)),
            ("produce rf1 acks=1", lambda: produce(cluster.bootstrap, "cost-rf1", n, "1")),
            ("produce rf3 acks=all", lambda: produce(cluster.bootstrap, "cost-rf3", n, "all"))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=6000)
    ap.add_argument("--tree", action="append", default=None,
                    help="a code tree to start a cluster from (repeat to compare)")
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    n, trees = args.requests, [os.path.abspath(t) for t in args.tree] if args.tree else [None]
    started = []
    sums: dict = {}
    try:
        for tree in trees:
            started.append(start(tree))
        for rnd in range(args.rounds):
            order = list(zip(trees, started))
            for tree, (cluster, brokers, port) in order if rnd % 2 == 0 else order[::-1]:
                idle = measure(brokers, lambda: time.sleep(3), 1)
                print(f"[{tree or '.'}] idle: {sum(idle['us'].values()) / 3 / 1e4:.2f} % of one "
                      "core over the brokers")
                for name, run in workloads(cluster, port, n):
                    r = measure(brokers, run, n)
                    sums.setdefault((name, tree), []).append(sum(r["us"].values()))
                    per = " ".join(f"{k}={v:.0f}" for k, v in r["us"].items())
                    sys_ = " ".join(f"{v:.0f}" for v in r["sys_us"].values())
                    print(f"[{tree or '.'}] {name:22s} {r['rate']:7.0f}/s  broker CPU per "
                          f"request, µs: {per}  sum={sum(r['us'].values()):.0f}  (of it "
                          f"system: {sys_})", flush=True)
    finally:
        for cluster, _, _ in started:
            cluster.stop()
    if len(trees) > 1 or args.rounds > 1:
        summary(sums, trees)


def summary(sums: dict, trees: list) -> None:
    print("\nworkload | " + " | ".join(f"{t or '.'} (median µs)" for t in trees) +
          " | last / first")
    for name in dict.fromkeys(k[0] for k in sums):
        medians = [statistics.median(sums[(name, t)]) for t in trees]
        print(f"{name} | " + " | ".join(f"{m:.0f}" for m in medians) +
              f" | x{medians[-1] / medians[0]:.2f}")


if __name__ == "__main__":
    main()
