"""A reassignment through faults, under load (issue 19's first test): RF 3 partitions move onto a
broker that hosted nothing while confluent-kafka (idempotent, acks=all) writes one partition and
our producer the other; mid-move the target broker, the active controller and the source broker
are SIGKILLed in turn (target and controller restarted at once, the source only after the move).
The move state lives in metadata records, so it resumes and completes; every acknowledged record
is read back at its acknowledged offset, none twice.

The copy is slowed by the reassignment throttle tier on the target (`raftka.reassignment.
throttled.rate`, window of one second) so that the kills land while it runs; the test checks
that the move is still in progress after each kill rather than assuming it."""

from __future__ import annotations

import signal
import uuid

import pytest
import trio

from clients.admin import (AdminClient, AlterConfigOp, AlterConfigOpType, ConfigResource,
                           ConfigResourceType, NewTopic)
from clients.cluster import TopicPartition
from clients.producer import Producer
from clients.tests.test_reassignment_live import _read_back, _true, _until
from partition_server.testing import LiveCluster

RATE = 512 * 1024               # bytes/s into the new broker: 4 MB per partition take ~16 s
FILL = 4 * 1024                 # 1 KiB records per partition before the move
KEY = "raftka.reassignment.throttled.rate"


@pytest.mark.live
async def test_live_rf3_move_onto_a_new_broker_through_target_controller_and_source_kills(
        tmp_path):
    with LiveCluster(tmp_path / "cluster", {"replication.quota.window.num": "1"},
                     brokers=4) as live:
        async with AdminClient(live.bootstrap) as admin:
            topic = f"mvf-{uuid.uuid4().hex[:6]}"
            assert await admin.create_topics([NewTopic(topic, replica_assignment={
                0: [0, 1, 2], 1: [1, 2, 0]})]) == {topic: None}
            tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
            targets = {tp0: [3, 1, 2], tp1: [1, 2, 3]}
            await admin.cluster.wait_for_topic(topic, timeout_s=30)
            async with Producer(admin.cluster, {"acks": "all", "linger.ms": "20"}) as p:
                for i in range(FILL):
                    for tp in (tp0, tp1):
                        await p.send(topic, b"f" * 1024, partition=tp.partition)
                await p.flush()
            b3 = ConfigResource(ConfigResourceType.BROKER, "3")
            assert await admin.incremental_alter_configs(
                {b3: [AlterConfigOp(KEY, str(RATE))]}) == {b3: None}

            stop, ck_acked, ours_acked, failed = trio.Event(), {}, {}, []
            async with trio.open_nursery() as n:
                n.start_soon(trio.to_thread.run_sync, _librdkafka, live.bootstrap, topic,
                             stop, ck_acked, failed, trio.lowlevel.current_trio_token())
                n.start_soon(_ours, admin, topic, stop, ours_acked, failed)
                await _until(lambda: _true(len(ck_acked) >= 100 and len(ours_acked) >= 100),
                             60, "both producers writing")
                assert await admin.alter_partition_reassignments(targets) == \
                    {tp0: None, tp1: None}
                for kill in (_kill_target, _kill_active_controller, _kill_source):
                    assert await admin.list_partition_reassignments([tp0, tp1]), \
                        f"the move ended before {kill.__name__}: nothing was tested"
                    await kill(live, admin)

                async def done():
                    if await admin.list_partition_reassignments([tp0, tp1]):
                        return False
                    await admin.cluster.refresh_metadata([topic], force=True)
                    parts = (await admin.describe_topics([topic]))[topic].partitions
                    return all(list(p.replicas) == targets[TopicPartition(topic, p.partition)]
                               and sorted(p.isr) == sorted(p.replicas) for p in parts)
                await _until(done, 180, "the move to complete on the new broker")
                settled = len(ck_acked) + len(ours_acked)
                await _until(lambda: _true(len(ck_acked) + len(ours_acked) > settled + 200),
                             60, "writes after the move")
                stop.set()
            assert not failed, failed[:3]
            await admin.incremental_alter_configs({b3: [
                AlterConfigOp(KEY, None, AlterConfigOpType.DELETE)]})
        await trio.to_thread.run_sync(live.restart_broker, 0)
        for tp, acked in ((tp0, ck_acked), (tp1, ours_acked)):
            got = await _read_back(live, tp, FILL + len(acked))
            values = [v for _, v in got[FILL:]]
            assert len(values) == len(set(values)), f"{tp}: a record was written twice"
            by_offset = dict(got)
            lost = [o for o, v in acked.items() if by_offset.get(o) != v]
            assert not lost, f"{tp}: acknowledged offsets lost or changed: {lost[:5]}"


async def _kill_target(live, admin):
    live.kill("broker-3")
    await trio.to_thread.run_sync(live.restart_broker, 3)


async def _kill_active_controller(live, admin):
    active = (await admin.describe_quorum())["leader_id"]
    await trio.to_thread.run_sync(live.restart_controller, [3000, 3001, 3002].index(active))


async def _kill_source(live, admin):
    live.kill("broker-0")                         # back only after the move (then: stray logs)


def _librdkafka(bootstrap, topic, stop, acked, failed, token):
    from confluent_kafka import Producer as CKProducer

    def delivered(err, msg):
        if err is None:
            acked[msg.offset()] = msg.value()
        else:
            failed.append(err)
    p = CKProducer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                    "linger.ms": 5})
    i = 0
    while not trio.from_thread.run_sync(stop.is_set, trio_token=token):
        p.produce(topic, b"c%d" % i, partition=0, on_delivery=delivered)
        p.poll(0.005)
        i += 1
    p.flush(60)


async def _ours(admin, topic, stop, acked, failed):
    async with Producer(admin.cluster, {"acks": "all", "enable.idempotence": "true"}) as p:
        i = 0
        while not stop.is_set():
            def note(m, e, value=b"o%d" % i):
                if e is None:
                    acked[m.offset] = value
                else:
                    failed.append(e)
            await p.send(topic, b"o%d" % i, partition=1, on_delivery=note)
            i += 1
            if i % 20 == 0:
                await trio.sleep(0.01)
        await p.flush()
