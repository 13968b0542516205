"""The balancer's disk goal, live (issue 19 item 6b): 3 brokers, RF 1, six partitions, two per
broker — replica and preferred-leader counts even — but 4 MiB on broker 0, 2 MiB on broker 1 and
nothing on broker 2. With the balancer on and a 1 MiB min skew, the leaders' load reports (on
heartbeats, every 500 ms here) reach the controller, which swaps a big partition of broker 0
with an empty one of broker 2: replica counts stay 2/2/2 and the bytes even out. `raftka cluster
balance --status` (sizes from DescribeLogDirs) then says balanced with every broker's bytes;
every record is still there, exactly once."""

from __future__ import annotations

import json
import os
import uuid

import pytest
import trio

from clients.admin import (AdminClient, AlterConfigOp, ConfigResource, ConfigResourceType,
                           NewTopic)
from clients.cli.main import main
from clients.producer import Producer
from clients.tests.test_decommission_live import _partitions, _read_all, _until
from metadata_quorum.controller import balancer, balancer_disk
from partition_server.testing import LiveCluster

MiB = 1 << 20
RECORD = 8 * 1024


@pytest.mark.live
async def test_live_balancer_evens_disk_bytes_without_moving_counts(tmp_path, capsys):
    with LiveCluster(tmp_path / "cluster", {"raftka.load.report.interval.ms": "500"},
                     brokers=3) as live:
        async with AdminClient(live.bootstrap) as admin:
            topic = f"disk-{uuid.uuid4().hex[:6]}"
            plan = {0: [0], 1: [0], 2: [1], 3: [1], 4: [2], 5: [2]}
            assert await admin.create_topics([NewTopic(topic, configs={"min.insync.replicas": "1"},
                                                       replica_assignment=plan)]) == \
                {topic: None}
            acked = []
            async with Producer(admin.cluster, {"acks": "all", "compression.type": "none",
                                                "linger.ms": "5"}) as p:
                for partition in (0, 1, 2):      # 2 MiB each: brokers hold 4, 2 and 0 MiB
                    for i in range(2 * MiB // RECORD):
                        key = b"p%d-%d" % (partition, i)
                        await p.send(topic, os.urandom(RECORD), key=key, partition=partition,
                                     on_delivery=lambda m, e, key=key: acked.append(
                                         key if e is None else e))
                await p.flush()
            assert len(acked) == 3 * 2 * MiB // RECORD and all(isinstance(k, bytes)
                                                                 for k in acked)
            res = ConfigResource(ConfigResourceType.BROKER, "")
            assert await admin.incremental_alter_configs({res: [
                AlterConfigOp(balancer.ENABLE_CONFIG, "true"),
                AlterConfigOp(balancer_disk.DISK_MIN_SKEW_CONFIG, str(MiB))]}) == {res: None}

            async def evened():
                if await admin.list_partition_reassignments():
                    return False
                parts = await _partitions(admin, [topic])
                on = {b: sorted(tp.partition for tp, x in parts.items() if b in x.replicas)
                      for b in range(3)}
                big = [sum(n in (0, 1, 2) for n in ps) for ps in on.values()]
                return big == [1, 1, 1] and all(len(ps) == 2 for ps in on.values()) and on
            on = await _until(evened, 90, "one 2 MiB partition per broker, two partitions each")
            assert sorted(n for ps in on.values() for n in ps) == list(range(6))

            status = await _until(lambda: _status(live.bootstrap, capsys), 30,
                                  "status: balanced")
            disk = [b["disk_bytes"] for b in status["brokers"]]
            assert all(2 * MiB <= d < 3 * MiB for d in disk), status
            assert [b["replicas"] for b in status["brokers"]] == [2, 2, 2]
            tps = list(await _partitions(admin, [topic]))
        got = await _read_all(live, tps, len(acked))
        assert sorted(got) == sorted(acked)


async def _status(bootstrap: str, capsys):
    def run():
        capsys.readouterr()
        code = main(["cluster", "balance", "--status", "--output", "json",
                     "--bootstrap-server", bootstrap])
        return code, capsys.readouterr().out
    code, out = await trio.to_thread.run_sync(run)
    assert code == 0, out
    status = json.loads(out)
    return status["state"] == "balanced" and status
