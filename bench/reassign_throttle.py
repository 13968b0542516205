"""Reassignment copy rate, unthrottled vs throttled, side by side in one run (issue 19).

A local 3 + 3 cluster; two topics of one RF-1 partition on broker 0 holding `--mb` MB each; the
first moves to broker 1 with no throttle, the second with the throttles `raftka reassign execute
--throttle` sets (leader and follower rates on brokers 0 and 1, the topic's throttled replicas).
The new replica's log size is sampled (DescribeLogDirs) every 0.2 s.

Reported per move: the overall copy rate (bytes / time to complete) and, for the throttled one,
the steady rate after the initial burst (an idle throttle lets `replication.quota.window.num` x
`replication.quota.window.size.seconds` x rate pass at once, 11 s worth with Kafka's defaults):
the slope of copied bytes between burst + 5 % and 95 % of the log. Target: steady within 10 %
of the throttle.

    python3 bench/reassign_throttle.py [--mb 48] [--throttle 2000000] [--window-num 11]
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

from clients.admin import (AdminClient, AlterConfigOp, AlterConfigOpType,  # noqa: E402
                           ConfigResource, ConfigResourceType, NewTopic)
from clients.cluster import TopicPartition  # noqa: E402
from clients.producer import Producer  # noqa: E402
from partition_server.testing import LiveCluster  # noqa: E402

RECORD = bytes(range(256)) * 4            # 1 KiB, not trivially compressible (none is used)


async def make_topic(admin, mb: int) -> TopicPartition:
    topic = f"copy-{uuid.uuid4().hex[:6]}"
    assert await admin.create_topics([NewTopic(topic, replica_assignment={0: [0]})]) == \
        {topic: None}
    await admin.cluster.wait_for_topic(topic, timeout_s=30)
    async with Producer(admin.cluster, {"acks": "1", "linger.ms": "20",
                                        "batch.size": str(1 << 20)}) as p:
        for _ in range(mb * 1024):
            await p.send(topic, RECORD, partition=0)
        await p.flush()
    return TopicPartition(topic, 0)


async def throttle(admin, tp: TopicPartition, rate: int | None) -> None:
    """What `raftka reassign execute --throttle` sets for a move 0 -> 1 (None: remove)."""
    op = AlterConfigOpType.DELETE if rate is None else AlterConfigOpType.SET
    value = None if rate is None else str(rate)
    changes = {ConfigResource(ConfigResourceType.BROKER, str(b)): [
        AlterConfigOp(f"{side}.replication.throttled.rate", value, op)
        for side in ("leader", "follower")] for b in (0, 1)}
    changes[ConfigResource(ConfigResourceType.TOPIC, tp.topic)] = [
        AlterConfigOp("leader.replication.throttled.replicas", value and "0:0", op),
        AlterConfigOp("follower.replication.throttled.replicas", value and "0:1", op)]
    assert all(e is None for e in (await admin.incremental_alter_configs(changes)).values())
    await trio.sleep(2)          # every broker applies the configs from the metadata stream


async def move(admin, tp: TopicPartition) -> tuple[int, list[tuple[float, int]], float]:
    """(leader's log size, [(seconds, bytes on broker 1)], seconds to complete)."""
    size = (await admin.describe_replica_log_dirs([0], [tp]))[0][tp][0]
    start = time.monotonic()
    assert await admin.alter_partition_reassignments({tp: [1]}) == {tp: None}
    samples = []
    while True:
        found = (await admin.describe_replica_log_dirs([1], [tp]))[1]
        if isinstance(found, dict) and tp in found:
            samples.append((time.monotonic() - start, found[tp][0]))
        if not await admin.list_partition_reassignments([tp]):
            return size, samples, time.monotonic() - start
        await trio.sleep(0.2)


def steady_rate(samples, lo: float, hi: float) -> float | None:
    inside = [(t, b) for t, b in samples if lo <= b <= hi]
    if len(inside) < 3 or inside[-1][0] <= inside[0][0]:
        return None
    (t0, b0), (t1, b1) = inside[0], inside[-1]
    return (b1 - b0) / (t1 - t0)


async def run(args) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        cluster = LiveCluster(Path(tmp), {"replication.quota.window.num": str(args.window_num)})
        cluster.start()
        try:
            async with AdminClient(cluster.bootstrap) as admin:
                free, held = await make_topic(admin, args.mb), await make_topic(admin, args.mb)
                size, _, secs = await move(admin, free)
                print(f"unthrottled: {size / 1e6:.1f} MB in {secs:.1f} s = "
                      f"{size / secs / 1e6:.2f} MB/s")
                await throttle(admin, held, args.throttle)
                size, samples, secs = await move(admin, held)
                await throttle(admin, held, None)
                burst = args.throttle * args.window_num
                steady = steady_rate(samples, burst + 0.05 * size, 0.95 * size)
                print(f"throttle {args.throttle / 1e6:.2f} MB/s (window.num {args.window_num}): "
                      f"{size / 1e6:.1f} MB in {secs:.1f} s = {size / secs / 1e6:.2f} MB/s "
                      f"overall (burst {burst / 1e6:.1f} MB)")
                if steady is None:
                    print("steady rate: too few samples past the burst (use a larger --mb)")
                else:
                    print(f"steady rate after the burst: {steady / 1e6:.3f} MB/s = "
                          f"{steady / args.throttle:.3f} x the throttle")
        finally:
            cluster.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, default=48, help="MB in each moved partition")
    ap.add_argument("--throttle", type=int, default=2_000_000, help="bytes/s")
    ap.add_argument("--window-num", type=int, default=11,
                    help="brokers' replication.quota.window.num (Kafka's default 11)")
    trio.run(run, ap.parse_args())


if __name__ == "__main__":
    main()
