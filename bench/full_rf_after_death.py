"""Time from a broker's death to full replication factor again (issue 19, Measure), side by
side in one run for several data sizes.

Per size: a fresh local 3 controllers + 4 brokers; one topic of `--partitions` partitions, RF 3,
every partition placed on broker 0 and two of 1-3 (so every partition loses a replica), each
holding `--mb` MB (one size per run of the list); `raftka.rereplication.timeout.ms` set
cluster-wide to `--timeout-ms`. Then broker 0 is SIGKILLed. Measured from the SIGKILL to every
partition at RF 3 without broker 0, every replica in the ISR and no move in flight: the total,
and the part after the timeout (fencing + the controller's tick + the copy). The controller
notices the death when the session lapses (broker.session.timeout.ms, 9 s by default in `raftka
dev`), re-places after the timeout counted from the last heartbeat, and its rebalance tick runs
every 5 s; moves copy at `raftka.reassignment.throttled.rate` (100 MiB/s by default).

    python3 bench/full_rf_after_death.py [--mb 1,8] [--partitions 8] [--timeout-ms 5000]
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
from clients.producer import Producer  # noqa: E402
from partition_server.testing import LiveCluster  # noqa: E402

RECORD = bytes(range(256)) * 4


async def _healed(admin, topic):
    if await admin.list_partition_reassignments():
        return False
    await admin.cluster.refresh_metadata([topic], force=True)
    parts = (await admin.describe_topics([topic]))[topic].partitions
    return all(len(p.replicas) == 3 and 0 not in p.replicas and
               sorted(p.isr) == sorted(p.replicas) for p in parts)


async def one(mb: int, partitions: int, timeout_ms: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp, LiveCluster(Path(tmp), brokers=4) as live:
        async with AdminClient(live.bootstrap) as admin:
            default = ConfigResource(ConfigResourceType.BROKER, "")
            assert await admin.incremental_alter_configs({default: [AlterConfigOp(
                "raftka.rereplication.timeout.ms", str(timeout_ms))]}) == {default: None}
            topic = f"death-{uuid.uuid4().hex[:6]}"
            plan = {p: [0, 1 + p % 3, 1 + (p + 1) % 3] for p in range(partitions)}
            assert await admin.create_topics([NewTopic(topic, replica_assignment=plan)]) == \
                {topic: None}
            await admin.cluster.wait_for_topic(topic, timeout_s=30)
            async with Producer(admin.cluster, {"acks": "all", "linger.ms": "20",
                                                "batch.size": str(1 << 20)}) as p:
                for part in range(partitions):
                    for _ in range(mb * 1024):
                        await p.send(topic, RECORD, partition=part)
                await p.flush()
            await admin.cluster.refresh_metadata([topic], force=True)
            parts = (await admin.describe_topics([topic]))[topic].partitions
            if await admin.list_partition_reassignments() or not all(
                    0 in p.replicas and sorted(p.isr) == sorted(p.replicas) for p in parts):
                # broker 0 missed heartbeats while filling (a loaded machine) and re-replication
                # already started: this run would measure nothing
                raise SystemExit("broker 0 was fenced before the kill; run again on a quieter "
                                 "machine or with a larger --timeout-ms")
            killed = time.monotonic()
            live.kill("broker-0")
            while not await _healed(admin, topic):
                await trio.sleep(0.2)
            total = time.monotonic() - killed
    return {"mb": mb, "partitions": partitions, "total_s": total,
            "minus_timeout_s": total - timeout_ms / 1000}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", default="1,8", help="MB per partition, comma-separated")
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--timeout-ms", type=int, default=5000)
    args = ap.parse_args()
    print(f"{'MB/partition':>12} {'partitions':>10} {'death->full RF s':>17} "
          f"{'minus timeout s':>16}")
    for mb in (int(x) for x in args.mb.split(",")):
        r = trio.run(one, mb, args.partitions, args.timeout_ms)
        print(f"{r['mb']:>12} {r['partitions']:>10} {r['total_s']:>17.1f} "
              f"{r['minus_timeout_s']:>16.1f}", flush=True)


if __name__ == "__main__":
    main()
