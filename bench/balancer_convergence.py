"""Balancer convergence time after adding a broker (issue 19 item 6b), side by side in one run
for several `raftka.balancer.max.moves` values.

Per value: a fresh local 3 + 3 cluster; `--topics` topics of `--partitions` partitions, half
RF 2 and half RF 3, each partition holding `--mb` MB; the balancer switched on as `raftka dev`
does (dev_selfheal) with that max.moves; then broker 3 starts. Measured from broker 3 unfenced
(its process says so) to replica counts within ±1 over the 4 brokers with no move in flight and
every partition in sync: the seconds, the replica moves started (partitions whose replica set
changed) and the bytes that landed on broker 3 (DescribeLogDirs). The controller's rebalance
tick runs every 5 s (metadata_quorum/service.py), which bounds how fast moves start.

    python3 bench/balancer_convergence.py [--max-moves 1,4,16] [--mb 4] [--partitions 6]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import trio  # noqa: E402

from clients.admin import (AdminClient, AlterConfigOp, ConfigResource,  # noqa: E402
                           ConfigResourceType, NewTopic)
from clients.cli import dev_selfheal  # noqa: E402
from clients.cli.dev import start_broker, wait_ready  # noqa: E402
from clients.producer import Producer  # noqa: E402
from common.security import PLAINTEXT  # noqa: E402
from partition_server.testing import LiveCluster  # noqa: E402

RECORD = bytes(range(256)) * 4


async def _fill(admin, topics: dict, partitions: int, mb: int) -> None:
    assert await admin.create_topics([NewTopic(t, partitions, rf) for t, rf in
                                      topics.items()]) == {t: None for t in topics}
    for t in topics:
        await admin.cluster.wait_for_topic(t, timeout_s=30)
    async with Producer(admin.cluster, {"acks": "all", "linger.ms": "20",
                                        "batch.size": str(1 << 20)}) as p:
        for t in topics:
            for part in range(partitions):
                for _ in range(mb * 1024):
                    await p.send(t, RECORD, partition=part)
        await p.flush()


async def _layout(admin, topics):
    await admin.cluster.refresh_metadata(list(topics), force=True)
    desc = await admin.describe_topics(list(topics))
    return {(t, p.partition): p for t in topics for p in desc[t].partitions}


async def _even(admin, topics) -> dict | None:
    if await admin.list_partition_reassignments():
        return None
    parts = await _layout(admin, topics)
    counts = [sum(b in p.replicas for p in parts.values()) for b in range(4)]
    if max(counts) - min(counts) > 1 or any(sorted(p.isr) != sorted(p.replicas)
                                             for p in parts.values()):
        return None
    return parts


async def one_run(root: Path, max_moves: int, args) -> dict:
    live = LiveCluster(root, brokers=3, spare_brokers=1)
    live.start()
    joiner = None
    try:
        async with AdminClient(live.bootstrap) as admin:
            half = args.topics // 2
            topics = {f"bal-{uuid.uuid4().hex[:6]}": 2 if i < half else 3
                      for i in range(args.topics)}
            await _fill(admin, topics, args.partitions, args.mb)
            before = await _layout(admin, topics)
            await dev_selfheal._enable(live.bootstrap, PLAINTEXT, 0)
            res = await admin.incremental_alter_configs({
                ConfigResource(ConfigResourceType.BROKER, ""):
                    [AlterConfigOp("raftka.balancer.max.moves", str(max_moves))]})
            assert all(e is None for e in res.values()), res
            joiner = start_broker(live.layout, 3, quiet=True)
            live.procs.append(joiner)
            problem = await trio.to_thread.run_sync(wait_ready, [joiner], 60)
            assert problem is None, problem
            t0 = time.monotonic()
            parts = None
            with trio.move_on_after(args.timeout_s):
                while parts is None:
                    parts = await _even(admin, topics)
                    if parts is None:
                        await trio.sleep(0.2)
            elapsed = time.monotonic() - t0
            if parts is None:
                return {"max_moves": max_moves, "converged": False, "seconds": elapsed}
            moved = sum(set(parts[k].replicas) != set(before[k].replicas) for k in parts)
            dirs = await admin.describe_replica_log_dirs([3])
            on3 = sum(size for size, _lag in dirs[3].values()) if isinstance(dirs[3], dict) \
                else None
            return {"max_moves": max_moves, "converged": True, "seconds": elapsed,
                    "moves": moved, "bytes_on_3": on3,
                    "replicas": [sum(b in p.replicas for p in parts.values())
                                 for b in range(4)]}
    finally:
        live.stop()


async def main_async(args) -> None:
    rows = []
    for m in [int(x) for x in args.max_moves.split(",")]:
        with tempfile.TemporaryDirectory(prefix="raftka-bal-") as d:
            rows.append(await one_run(Path(d), m, args))
        print(rows[-1], flush=True)
    base = rows[0]["seconds"]
    print(f"\n{args.topics} topics x {args.partitions} partitions (RF 2 and 3), {args.mb} MB "
          "each; broker 3 joins; time to replica counts within +-1, no move, all in sync")
    print(f"{'max.moves':>9} {'seconds':>8} {'ratio':>6} {'moves':>6} {'MB on 3':>8} replicas")
    for r in rows:
        if not r["converged"]:
            print(f"{r['max_moves']:>9} {'>' + str(args.timeout_s):>8}  did not converge")
            continue
        mb = "-" if r["bytes_on_3"] is None else f"{r['bytes_on_3'] / 1e6:.1f}"
        print(f"{r['max_moves']:>9} {r['seconds']:>8.1f} {r['seconds'] / base:>6.2f} "
              f"{r['moves']:>6} {mb:>8} {r['replicas']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-moves", default="1,4,16")
    ap.add_argument("--topics", type=int, default=2)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--mb", type=int, default=4, help="MB per partition")
    ap.add_argument("--timeout-s", type=float, default=300)
    trio.run(main_async, ap.parse_args())


if __name__ == "__main__":
    main()
