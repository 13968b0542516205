"""CPU of an idle local cluster (3 controllers + 3 brokers), per node process, code trees side
by side (issue #23: `broker_vs_tansu.py` counts every node process, so what the nodes spend
doing nothing is part of each message's cost).

    python3 bench/idle_cluster.py --tree /tmp/old --tree . [--rounds 3] [--seconds 20]

Each tree's cluster is started (from that tree), given a topic and, with `--offsets-topic`,
`__consumer_offsets` (a consumer asking for its group coordinator creates it, as in the
consume load), left alone for a few seconds, then measured for `--seconds`; rounds alternate
the trees' order. Figures: % of one core (user + system, from /proc) per process, median of the
rounds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.broker_vs_tansu import cpu_seconds, create_on_broker0, start_raftka  # noqa: E402


def measure(tree: str | None, seconds: float, offsets_topic: bool) -> dict:
    cluster = start_raftka(tree, Path(tempfile.mkdtemp(prefix="raftka-idle-")))
    try:
        bootstrap = cluster.bootstrap.split(",")[0]
        create_on_broker0(bootstrap, "idle")
        if offsets_topic:
            from confluent_kafka.admin import AdminClient
            admin = AdminClient({"bootstrap.servers": bootstrap})
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:      # COORDINATOR_NOT_AVAILABLE until created
                try:
                    admin.list_consumer_group_offsets(
                        [_request("idle-group")])["idle-group"].result(10)
                    break
                except Exception:  # noqa: BLE001 - not ready yet: ask again
                    time.sleep(0.2)
        time.sleep(3)
        pids = {p.name: p.proc.pid for p in cluster.procs}
        before = {name: cpu_seconds(pid) for name, pid in pids.items()}
        t0 = time.monotonic()
        time.sleep(seconds)
        elapsed = time.monotonic() - t0
        return {name: (cpu_seconds(pid) - before[name]) / elapsed * 100
                for name, pid in pids.items()}
    finally:
        cluster.stop()


def _request(group: str):
    from confluent_kafka import ConsumerGroupTopicPartitions
    return ConsumerGroupTopicPartitions(group)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tree", action="append", help="a code tree (repeat); default this one")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--offsets-topic", action="store_true",
                    help="create __consumer_offsets first (its replication runs while idle)")
    args = ap.parse_args()
    trees = [os.path.abspath(t) for t in args.tree] if args.tree else [None]
    runs: dict = {t: [] for t in trees}
    for rnd in range(args.rounds):
        for tree in (trees if rnd % 2 == 0 else trees[::-1]):
            r = measure(tree, args.seconds, args.offsets_topic)
            runs[tree].append(r)
            print(f"round {rnd} {tree or '.'}: " + ", ".join(f"{k} {v:.2f}%" for k, v in r.items())
                  + f"; total {sum(r.values()):.2f}%", flush=True)
    print("\nmedian % of one core: tree | controllers | brokers | total")
    totals = {}
    for tree, rs in runs.items():
        ctl = statistics.median(sum(v for k, v in r.items() if k.startswith("controller"))
                                for r in rs)
        brk = statistics.median(sum(v for k, v in r.items() if k.startswith("broker")) for r in rs)
        totals[tree] = statistics.median(sum(r.values()) for r in rs)
        print(f"{tree or '.'} | {ctl:.2f} | {brk:.2f} | {totals[tree]:.2f}")
    if len(trees) == 2 and totals[trees[1]]:
        print(f"total, first / last tree: {totals[trees[0]] / totals[trees[1]]:.2f}")


if __name__ == "__main__":
    main()
