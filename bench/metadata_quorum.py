"""Metadata quorum benchmark: commit latency/throughput and failover time, 3 controllers on
127.0.0.1.

    python3 bench/metadata_quorum.py [--commits 300] [--kills 20] [--concurrency 8]
                                     [--fsync both|on|off]

A commit is one CreateTopics (one topic, one partition, explicit assignment) answered after its
records are committed by Raft. Failover time: SIGKILL of the active controller → the first
write another controller commits (the killed one is restarted before the next round).
`--concurrency N` adds a rate with N CreateTopics in flight at once (what group commit is for).
`--fsync both` (the default) runs the whole measurement on a quorum with
raftka.controller.raft.fsync=false and then on one with it true, and prints both side by side
with their ratio.
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


async def concurrent_rate(q: Quorum, commits: int, concurrency: int) -> float:
    """Commits per second with `concurrency` CreateTopics in flight."""
    names = iter(range(commits))
    start = time.perf_counter()

    async def writer():
        for i in names:
            await create_topic(q, f"bench-c-{i}", 20)
    async with trio.open_nursery() as nursery:
        for _ in range(concurrency):
            nursery.start_soon(writer)
    return commits / (time.perf_counter() - start)


async def measure(q: Quorum, commits: int, kills: int, concurrency: int) -> dict:
    await register_broker(q)
    latencies = []
    start = time.perf_counter()
    for i in range(commits):
        t0 = time.perf_counter()
        await create_topic(q, f"bench-{i}", 20)
        latencies.append(time.perf_counter() - t0)
    elapsed = time.perf_counter() - start
    concurrent = await concurrent_rate(q, commits, concurrency) if concurrency > 1 else None
    failovers = []
    active, _ = await create_topic(q, "before-kills", 20)
    for k in range(kills):
        q.kill(active)
        active, took = await create_topic(q, f"after-kill-{k}", 20)
        failovers.append(took)
        q.start([i for i in range(3) if i not in q.procs][0])
        await trio.sleep(1.5)
    return {"commits_per_s": round(commits / elapsed, 1),
            f"commits_per_s_{concurrency}_in_flight": round(concurrent, 1) if concurrent else None,
            "commit_p50_ms": round(pct(latencies, 0.5) * 1000, 2),
            "commit_p99_ms": round(pct(latencies, 0.99) * 1000, 2),
            "failover_p50_s": round(pct(failovers, 0.5), 3) if failovers else None,
            "failover_max_s": round(max(failovers), 3) if failovers else None,
            "kills": kills}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--commits", type=int, default=300)
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--fsync", choices=("both", "on", "off"), default="both")
    args = ap.parse_args()
    modes = {"both": ["off", "on"], "on": ["on"], "off": ["off"]}[args.fsync]
    results = {}
    for mode in modes:
        q = Quorum(Path(tempfile.mkdtemp(prefix="raftka-quorum-bench-")),
                   {"raftka.controller.raft.fsync": "true" if mode == "on" else "false"})
        q.start_all()
        try:
            results[mode] = trio.run(measure, q, args.commits, args.kills, args.concurrency)
        finally:
            q.stop_all()
        print(f"fsync {mode}: {results[mode]}", flush=True)
    if len(results) == 2:
        ratios = {k: round(results["on"][k] / results["off"][k], 2) for k in results["on"]
                  if k.startswith("commits_per_s") and results["on"][k] and results["off"][k]}
        print(f"fsync on / off: {ratios}")


if __name__ == "__main__":
    main()
