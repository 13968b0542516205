"""Self-healing (issue 19 item 6a), live on 3 controllers + 4 brokers: with
raftka.rereplication.timeout.ms set cluster-wide, a broker SIGKILLed for good has its replicas
re-placed on the live brokers by the controller, every partition regains RF 3 in sync, and every
acknowledged record is read back once. Every wait is a condition with a deadline."""

from __future__ import annotations

import uuid

import pytest
import trio

from clients.admin import AdminClient, NewTopic
from clients.cli.main import main
from clients.cluster import TopicPartition
from clients.consumer import Consumer
from clients.producer import Producer
from partition_server.testing import LiveCluster

PARTITIONS = 4
RECORDS = 400


async def _until(check, timeout_s: float, what: str):
    last = None
    with trio.move_on_after(timeout_s):
        while True:
            last = await check()
            if last:
                return last
            await trio.sleep(0.3)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}; last: {last!r}")


async def _partitions(admin, topic):
    await admin.cluster.refresh_metadata([topic], force=True)
    desc = (await admin.describe_topics([topic]))[topic]
    return {} if isinstance(desc, Exception) else {p.partition: p for p in desc.partitions}


@pytest.mark.live
async def test_live_lost_broker_replicas_are_re_placed(tmp_path):
    with LiveCluster(tmp_path / "cluster", brokers=4) as live:
        async with AdminClient(live.bootstrap) as admin:
            # the cluster-wide default, as kafka-configs.sh --entity-default sets it
            code = await trio.to_thread.run_sync(main, [
                "configs", "alter", "--entity-type", "brokers", "--entity-default",
                "--add-config", "raftka.rereplication.timeout.ms=2000",
                "--bootstrap-server", live.bootstrap])
            assert code == 0
            topic = f"heal-{uuid.uuid4().hex[:6]}"
            layout = {p: [0, 1, 2] if p % 2 else [1, 0, 2] for p in range(PARTITIONS)}
            assert await admin.create_topics([NewTopic(topic, replica_assignment=layout)]) == \
                {topic: None}

            async def in_sync():
                parts = await _partitions(admin, topic)
                return len(parts) == PARTITIONS and all(
                    sorted(p.isr) == [0, 1, 2] for p in parts.values())
            await _until(in_sync, 30, "the topic in sync")
            acked = {}
            async with Producer(admin.cluster, {"acks": "all"}) as p:
                for i in range(RECORDS):
                    fut = await p.send(topic, b"v%d" % i, key=b"k%d" % i, partition=i % PARTITIONS)
                    acked[b"k%d" % i] = fut
                await p.flush()
            keys = [k for k, fut in acked.items() if fut.done() and fut.exception() is None]
            assert len(keys) == RECORDS

            live.kill("broker-0")

            async def healed():
                parts = await _partitions(admin, topic)
                return all(len(p.replicas) == 3 and 0 not in p.replicas and
                           sorted(p.isr) == sorted(p.replicas) for p in parts.values()) \
                    and not await admin.list_partition_reassignments() and parts
            parts = await _until(healed, 60, "RF 3 back without broker 0")
            assert all(3 in p.replicas for p in parts.values())   # the only spare broker
            # broker 0 is still registered, fenced, hosting nothing: `raftka cluster describe`
            # lists it as fenced; once unregistered it is gone
            cluster = await admin.describe_cluster(include_fenced=True)
            assert [b["id"] for b in cluster["brokers"]] == [1, 2, 3]
            assert [b["id"] for b in cluster["fenced_brokers"]] == [0]
            assert "fenced_brokers" not in await admin.describe_cluster()
            await admin.unregister_broker(0)

            async def unregistered():
                c = await admin.describe_cluster(include_fenced=True)
                return c["fenced_brokers"] == [] and c
            await _until(unregistered, 30, "broker 0 to leave the registrations")

        async with Consumer(live.bootstrap, {"enable.auto.commit": "false"}) as c:
            tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
            c.assign(tps)
            for tp in tps:
                c.seek(tp, 0)
            got: list[bytes] = []

            async def read():
                got.extend(r.key for r in await c.poll(500))
                return len(got) >= RECORDS
            await _until(read, 60, "every record")
            got.extend(r.key for r in await c.poll(300))
        assert sorted(got) == sorted(keys)
