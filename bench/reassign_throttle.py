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

Also the latency of a client producing meanwhile (one 100 B record at a time, acks=all, to an
RF-2 partition on brokers 1 and 0, the move's two ends), p50/p99 over three windows of
`--window-s`: no move; unthrottled moves (the first partition moved back and forth between the
brokers for the whole window); the throttled move past its burst.

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


async def move(admin, tp: TopicPartition, target: list[int] | None = None,
               progress: list | None = None) -> tuple[int, list[tuple[float, int]], float]:
    """Move `tp` to `target` (default [1]): (leader's log size, [(seconds, bytes on the new
    broker)], seconds to complete). `progress` (if given) sees each sample as it is taken."""
    target = target or [1]
    source = 0 if target == [1] else 1
    size = (await admin.describe_replica_log_dirs([source], [tp]))[source][tp][0]
    start = time.monotonic()
    assert await admin.alter_partition_reassignments({tp: target}) == {tp: None}
    samples = progress if progress is not None else []
    while True:
        found = (await admin.describe_replica_log_dirs(target, [tp]))[target[0]]
        if isinstance(found, dict) and tp in found:
            samples.append((time.monotonic() - start, found[tp][0]))
        if not await admin.list_partition_reassignments([tp]):
            return size, samples, time.monotonic() - start
        await trio.sleep(0.2)


async def probe(cluster, tp: TopicPartition, stop: trio.Event, out: list) -> None:
    """A client producing one record at a time (acks=all): (send time, latency s)."""
    async with Producer(cluster, {"acks": "all", "linger.ms": "0"}) as p:
        while not stop.is_set():
            t = time.monotonic()
            await (await p.send(tp.topic, b"p" * 100, partition=tp.partition))
            out.append((t, time.monotonic() - t))
            await trio.sleep(0.005)


def latency(out: list, start: float, end: float) -> str:
    values = sorted(lat for t, lat in out if start <= t < end)
    if not values:
        return "no samples"
    pick = lambda q: values[min(len(values) - 1, int(q * len(values)))] * 1000  # noqa: E731
    return f"p50 {pick(0.5):.1f} ms, p99 {pick(0.99):.1f} ms ({len(values)} sends)"


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
                await measure(admin, args)
        finally:
            cluster.stop()


async def measure(admin, args) -> None:
    free, held = await make_topic(admin, args.mb), await make_topic(admin, args.mb)
    lat_topic = f"lat-{uuid.uuid4().hex[:6]}"
    assert await admin.create_topics([NewTopic(lat_topic, replica_assignment={0: [1, 0]})]) == \
        {lat_topic: None}
    await admin.cluster.wait_for_topic(lat_topic, timeout_s=30)
    stop, sends, windows = trio.Event(), [], {}
    async with trio.open_nursery() as nursery:
        nursery.start_soon(probe, admin.cluster, TopicPartition(lat_topic, 0), stop, sends)
        await trio.sleep(2)                                   # the probe's connections warm
        t = time.monotonic()
        await trio.sleep(args.window_s)
        windows["no move"] = (t, time.monotonic())
        size, _, secs = await move(admin, free)               # the first move: its rate
        print(f"unthrottled: {size / 1e6:.1f} MB in {secs:.1f} s = {size / secs / 1e6:.2f} MB/s")
        t, moves, where = time.monotonic(), 1, [1]
        while time.monotonic() < t + args.window_s:           # keep moving for the window
            where = [0] if where == [1] else [1]
            await move(admin, free, where)
            moves += 1
        windows[f"unthrottled moves ({moves} in a row)"] = (t, time.monotonic())
        await throttle(admin, held, args.throttle)
        await throttled_move(admin, held, args, windows)
        await throttle(admin, held, None)
        stop.set()
    for name, (start, end) in windows.items():
        print(f"produce latency, {name}: {latency(sends, start, end)}")


async def throttled_move(admin, held: TopicPartition, args, windows: dict) -> None:
    burst = args.throttle * args.window_num
    samples: list = []
    async with trio.open_nursery() as nursery:
        result = {}

        async def run_move():
            result["move"] = await move(admin, held, [1], samples)
        nursery.start_soon(run_move)
        while not result and not (samples and samples[-1][1] > burst * 1.05):
            await trio.sleep(0.1)                              # past the burst
        t = time.monotonic()
        while not result and time.monotonic() < t + args.window_s:
            await trio.sleep(0.1)
        windows["throttled move, past its burst"] = (t, time.monotonic())
    size, samples, secs = result["move"]
    steady = steady_rate(samples, burst + 0.05 * size, 0.95 * size)
    print(f"throttle {args.throttle / 1e6:.2f} MB/s (window.num {args.window_num}): "
          f"{size / 1e6:.1f} MB in {secs:.1f} s = {size / secs / 1e6:.2f} MB/s "
          f"overall (burst {burst / 1e6:.1f} MB)")
    if steady is None:
        print("steady rate: too few samples past the burst (use a larger --mb)")
    else:
        print(f"steady rate after the burst: {steady / 1e6:.3f} MB/s = "
              f"{steady / args.throttle:.3f} x the throttle")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, default=48, help="MB in each moved partition")
    ap.add_argument("--throttle", type=int, default=2_000_000, help="bytes/s")
    ap.add_argument("--window-s", type=float, default=8.0,
                    help="length of each produce-latency window (s)")
    ap.add_argument("--window-num", type=int, default=11,
                    help="brokers' replication.quota.window.num (Kafka's default 11)")
    trio.run(run, ap.parse_args())


if __name__ == "__main__":
    main()
