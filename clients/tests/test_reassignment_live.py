"""Partition reassignment (KIP-455) on a live 3 + 3 cluster: a move under acks=all data (the old
replica's log is deleted, every record read back once), cancel and replacement of a move that
cannot finish (its new replica's broker is stopped), bad plans over the wire, and kafka-python's
admin calls. Every wait is a condition with a deadline."""

from __future__ import annotations

import signal
import uuid

import pytest
import trio

from clients.admin import AdminClient, NewTopic
from clients.cluster import TopicPartition
from clients.consumer import Consumer
from clients.producer import Producer
from partition_server.testing import LiveCluster
from wire.errors import (InvalidReplicaAssignmentError, NoReassignmentInProgressError,
                         UnknownTopicOrPartitionError)

RECORDS = 300


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    c = LiveCluster(tmp_path_factory.mktemp("cluster"))
    c.start()
    yield c
    c.stop()


async def _until(check, timeout_s: float, what: str):
    """Poll the async `check()` until it returns something truthy, or fail saying `what`."""
    last = None
    with trio.move_on_after(timeout_s):
        while True:
            last = await check()
            if last:
                return last
            await trio.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}; last: {last!r}")


async def _partition(admin, topic):
    await admin.cluster.refresh_metadata([topic], force=True)
    return (await admin.describe_topics([topic]))[topic].partitions[0]


async def _new_topic(admin, replicas):
    topic = f"mv-{uuid.uuid4().hex[:6]}"
    res = await admin.create_topics([NewTopic(topic, replica_assignment={0: replicas})])
    assert res == {topic: None}
    await _until(lambda: _isr_is(admin, topic, replicas), 30, f"{topic} in sync")
    return topic


async def _isr_is(admin, topic, replicas):
    described = (await _describe(admin, topic))
    if isinstance(described, Exception):       # a new topic may not have reached the broker yet
        return False
    p = described.partitions[0]
    return sorted(p.isr) == sorted(replicas) and p.leader in replicas


async def _describe(admin, topic):
    await admin.cluster.refresh_metadata([topic], force=True)
    return (await admin.describe_topics([topic]))[topic]


@pytest.mark.live
async def test_live_move_copies_every_record_and_deletes_the_old_log(live):
    async with AdminClient(live.bootstrap) as admin:
        topic = await _new_topic(admin, [0, 1])
        tp = TopicPartition(topic, 0)
        async with Producer(admin.cluster, {"acks": "all"}) as p:
            for i in range(RECORDS):
                await p.send(topic, b"r%d" % i, partition=0)
            await p.flush()
        old_dir = live.layout.data_dir / "broker-0" / f"{topic}-0"
        assert old_dir.exists()
        assert await admin.alter_partition_reassignments({tp: [1, 2]}) == {tp: None}

        async def done():
            if await admin.list_partition_reassignments([tp]):
                return None
            p = await _partition(admin, topic)
            return p if list(p.replicas) == [1, 2] and sorted(p.isr) == [1, 2] else None
        await _until(done, 60, "the move to [1, 2] to finish")
        await _until(lambda: _false(old_dir.exists()), 30, f"broker 0 to delete {old_dir}")

        assert await _read_back(live, tp) == [(i, b"r%d" % i) for i in range(RECORDS)]


async def _false(value):
    return not value


async def _read_back(live, tp, count: int = RECORDS) -> list[tuple[int, bytes]]:
    """(offset, value) of every record from offset 0, read until `count` arrived; then one more
    poll, so a duplicate past them would show."""
    async with Consumer(live.bootstrap, {"enable.auto.commit": "false"}) as c:
        c.assign([tp])
        c.seek(tp, 0)
        got: list[tuple[int, bytes]] = []

        async def read_all():
            got.extend((r.offset, r.value) for r in await c.poll(500))
            return len(got) >= count
        await _until(read_all, 60, "every record")
        got.extend((r.offset, r.value) for r in await c.poll(200))
    return got


@pytest.mark.live
async def test_live_bad_plans_change_nothing(live):
    async with AdminClient(live.bootstrap) as admin:
        topic = await _new_topic(admin, [0, 1])
        tp = TopicPartition(topic, 0)
        before = await _partition(admin, topic)
        for target, err in (([1, 1], InvalidReplicaAssignmentError),
                            ([1, 99], InvalidReplicaAssignmentError),
                            ([], InvalidReplicaAssignmentError),
                            (None, NoReassignmentInProgressError)):
            res = await admin.alter_partition_reassignments({tp: target})
            assert isinstance(res[tp], err), (target, res)
        missing = TopicPartition(topic, 5), TopicPartition("no-such-" + topic, 0)
        res = await admin.alter_partition_reassignments({m: [0] for m in missing})
        assert all(isinstance(res[m], UnknownTopicOrPartitionError) for m in missing)
        after = await _partition(admin, topic)
        assert (after.replicas, after.leader_epoch) == (before.replicas, before.leader_epoch)
        assert await admin.list_partition_reassignments() == {}


@pytest.mark.live
async def test_live_cancel_and_replace_a_move_that_cannot_finish(live):
    async with AdminClient(live.bootstrap) as admin:
        topic = await _new_topic(admin, [0, 1])
        tp = TopicPartition(topic, 0)
        live.kill("broker-2", signal.SIGSTOP)         # the new replica cannot catch up
        try:
            assert await admin.alter_partition_reassignments({tp: [0, 2]}) == {tp: None}
            moves = await admin.list_partition_reassignments([tp])
            assert (moves[tp].replicas, moves[tp].adding_replicas,
                    moves[tp].removing_replicas) == ((0, 2, 1), (2,), (1,))
            # a new target replaces the move in progress
            assert await admin.alter_partition_reassignments({tp: [1, 2]}) == {tp: None}
            moves = await admin.list_partition_reassignments()
            assert (moves[tp].replicas, moves[tp].adding_replicas,
                    moves[tp].removing_replicas) == ((1, 2, 0), (2,), (0,))
            # cancel: back to the original replicas (as a set: the order is the move's, as in
            # Kafka — the replica list minus the adding ones)
            assert await admin.alter_partition_reassignments({tp: None}) == {tp: None}
            assert await admin.list_partition_reassignments([tp]) == {}
            p = await _partition(admin, topic)
            assert list(p.replicas) == [1, 0] and sorted(p.isr) == [0, 1]
        finally:
            live.kill("broker-2", signal.SIGCONT)


@pytest.mark.live
async def test_live_kafka_python_admin_calls(live):
    from kafka import TopicPartition as KTP
    from kafka.admin import KafkaAdminClient
    from kafka.errors import InvalidReplicationAssignmentError as KInvalid
    async with AdminClient(live.bootstrap) as admin:
        topic = await _new_topic(admin, [1, 2])

        def calls():
            k = KafkaAdminClient(bootstrap_servers=live.bootstrap, request_timeout_ms=30000)
            try:
                bad = k.alter_partition_reassignments({KTP(topic, 0): [1, 77]})
                ok = k.alter_partition_reassignments({KTP(topic, 0): [2, 0]})
                return bad, ok, k.list_partition_reassignments()
            finally:
                k.close()
        bad, ok, listed = await trio.to_thread.run_sync(calls)
        assert bad[KTP(topic, 0)] is KInvalid and ok == {KTP(topic, 0): None}
        # listed while in progress, unless it finished already
        assert set(listed) <= {KTP(topic, 0)}
        await _until(lambda: _isr_is(admin, topic, [2, 0]), 60, "kafka-python's move")
        assert list((await _partition(admin, topic)).replicas) == [2, 0]


@pytest.mark.live
async def test_live_move_survives_a_controller_kill_and_a_source_down_until_done(live):
    """The move's state is in metadata records: the active controller is SIGKILLed (and
    restarted) mid-move, the source broker is SIGKILLed too; the move finishes on the new
    controller once the target catches up, and the source, back afterwards, deletes its stray
    log (the move completed while it was down)."""
    async with AdminClient(live.bootstrap) as admin:
        topic = await _new_topic(admin, [0, 1])
        tp = TopicPartition(topic, 0)
        async with Producer(admin.cluster, {"acks": "all"}) as p:
            for i in range(RECORDS):
                await p.send(topic, b"f%d" % i, partition=0)
            await p.flush()
        live.kill("broker-2", signal.SIGSTOP)
        try:
            assert await admin.alter_partition_reassignments({tp: [1, 2]}) == {tp: None}
            active = (await admin.describe_quorum())["leader_id"]
            await trio.to_thread.run_sync(live.restart_controller,
                                          [3000, 3001, 3002].index(active))
            live.kill("broker-0")
            moves = await admin.list_partition_reassignments([tp])
            assert moves[tp].adding_replicas == (2,) and moves[tp].removing_replicas == (0,)
        finally:
            live.kill("broker-2", signal.SIGCONT)

        async def done():
            if await admin.list_partition_reassignments([tp]):
                return None
            p = await _partition(admin, topic)
            return list(p.replicas) == [1, 2] and sorted(p.isr) == [1, 2]
        await _until(done, 90, "the move to finish without its source")
        old_dir = live.layout.data_dir / "broker-0" / f"{topic}-0"
        assert old_dir.exists()                      # it was down: nobody told it yet
        await trio.to_thread.run_sync(live.restart_broker, 0)
        await _until(lambda: _false(old_dir.exists()), 30, f"broker 0 to delete stray {old_dir}")

        assert await _read_back(live, tp) == [(i, b"f%d" % i) for i in range(RECORDS)]


@pytest.mark.live
async def test_live_move_under_continuous_acks_all_load_from_librdkafka(live):
    """confluent-kafka (idempotent, acks=all) writes throughout a move whose leader is removed:
    every acknowledged record is read back at its acknowledged offset, and no record twice."""
    async with AdminClient(live.bootstrap) as admin:
        topic = await _new_topic(admin, [0, 1])
        tp = TopicPartition(topic, 0)
        stop, acked, failed = trio.Event(), {}, []
        token = trio.lowlevel.current_trio_token()

        def produce():
            from confluent_kafka import Producer as CKProducer

            def delivered(err, msg):
                if err is None:
                    acked[msg.offset()] = msg.value()
                else:
                    failed.append(err)
            p = CKProducer({"bootstrap.servers": live.bootstrap, "acks": "all",
                            "enable.idempotence": True, "linger.ms": 5})
            i = 0
            while not trio.from_thread.run_sync(stop.is_set, trio_token=token):
                p.produce(topic, b"c%d" % i, partition=0, on_delivery=delivered)
                p.poll(0.002)
                i += 1
            p.flush(30)

        async with trio.open_nursery() as n:
            n.start_soon(trio.to_thread.run_sync, produce)
            await _until(lambda: _true(len(acked) >= 200), 30, "the load to start")
            assert await admin.alter_partition_reassignments({tp: [1, 2]}) == {tp: None}

            async def done():
                if await admin.list_partition_reassignments([tp]):
                    return None
                p = await _partition(admin, topic)
                return list(p.replicas) == [1, 2] and sorted(p.isr) == [1, 2]
            await _until(done, 90, "the move to finish under load")
            settled = len(acked)
            await _until(lambda: _true(len(acked) > settled + 200), 30, "writes after the move")
            stop.set()
        assert not failed, failed[:3]
        top = max(acked)
        got = await _read_back(live, tp, top + 1)
        values = [v for _, v in got]
        assert len(values) == len(set(values)), "a record was written twice"
        by_offset = dict(got)
        assert all(by_offset.get(o) == v for o, v in acked.items())


async def _true(value):
    return value
