"""Metadata quorum benchmark: commit latency/throughput and failover time, 3 controllers on
127.0.0.1.

    python3 bench/metadata_quorum.py [--commits 300] [--kills 20]

A commit is one CreateTopics (one topic, one partition, explicit assignment) answered after its
records are committed by Raft. Failover time: SIGKILL of the active controller → the first
write another controller commits (the killed one is restarted before the next round).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from metadata_quorum.tests.test_failover import Quorum, create_topic, register_broker  # noqa: E402


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


async def measure(q: Quorum, commits: int, kills: int) -> dict:
    await register_broker(q)
    latencies = []
    start = time.perf_counter()
    for i in range(commits):
        t0 = time.perf_counter()
        await create_topic(q, f"bench-{i}", 20)
        latencies.append(time.perf_counter() - t0)
    elapsed = time.perf_counter() - start
    failovers = []
    active, _ = await create_topic(q, "before-kills", 20)
    for k in range(kills):
        q.kill(active)
        active, took = await create_topic(q, f"after-kill-{k}", 20)
        failovers.append(took)
        q.start([i for i in range(3) if i not in q.procs][0])
        await trio.sleep(1.5)
    return {"commits_per_s": round(commits / elapsed, 1),
            "commit_p50_ms": round(pct(latencies, 0.5) * 1000, 2),
            "commit_p99_ms": round(pct(latencies, 0.99) * 1000, 2),
            "failover_p50_s": round(pct(failovers, 0.5), 3) if failovers else None,
            "failover_max_s": round(max(failovers), 3) if failovers else None,
            "kills": kills}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--commits", type=int, default=300)
    ap.add_argument("--kills", type=int, default=20)
    args = ap.parse_args()
    q = Quorum(Path(tempfile.mkdtemp(prefix="raftka-quorum-bench-")))
    q.start_all()
    try:
        print(trio.run(measure, q, args.commits, args.kills))
    finally:
        q.stop_all()


if __name__ == "__main__":
    main()
