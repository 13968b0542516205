"""Our consumer against a live cluster (one module-scoped cluster; records produced with
confluent-kafka so these tests do not depend on our producer).

- ordered, complete delivery per partition with every codec (manual assign and group);
- a restarted group member resumes from committed offsets;
- seek / seek_to_* / offsets_for_times / pause / resume / position / committed,
  auto.offset.reset, read_committed over real transactions, the blocking facade, async and
  auto commits, commit and leave on cancellation.

Group membership and rebalances (mixed groups with confluent-kafka and kafka-python, pattern
subscription, listeners, cooperative and static members, a coordinator killed) are in
test_consumer_live_groups.py, which shares the helpers below.
"""

from __future__ import annotations

import time
import uuid

import pytest
import trio
from confluent_kafka import Producer as CKProducer
from confluent_kafka.admin import AdminClient, NewTopic

from clients.consumer import Consumer, NoOffsetForPartitionError, TopicPartition
from partition_server.testing import LiveCluster

pytestmark = pytest.mark.live

FAST_GROUP = {"session.timeout.ms": 10000, "heartbeat.interval.ms": 500,
              "max.poll.interval.ms": 30000}


def live_cluster(tmp_path_factory):
    """The module's cluster: the body of the `cluster` fixture here and in
    test_consumer_live_groups.py."""
    c = LiveCluster(tmp_path_factory.mktemp("consumer"),
                    {"transaction.state.log.num.partitions": "3",
                     "group.initial.rebalance.delay.ms": "500"})
    c.start()
    yield c
    c.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from live_cluster(tmp_path_factory)


def create_topic(cluster, name: str, partitions: int, rf: int = 3) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for f in admin.create_topics([NewTopic(name, partitions, rf)]).values():
        f.result(30)


def produce(cluster, topic: str, n: int, partitions: int, codec: str = "none",
            prefix: str = "v") -> dict[int, list[bytes]]:
    """n records spread round the partitions; returns the values sent per partition, in order."""
    p = CKProducer({"bootstrap.servers": cluster.bootstrap, "compression.type": codec,
                    "linger.ms": 5, "enable.idempotence": True})
    sent: dict[int, list[bytes]] = {i: [] for i in range(partitions)}
    for i in range(n):
        value = f"{prefix}-{i}".encode()
        p.produce(topic, value=value, key=str(i).encode(), partition=i % partitions,
                  headers=[("n", str(i).encode())])
        sent[i % partitions].append(value)
    assert p.flush(30) == 0
    return sent


async def consume_until(consumer: Consumer, n: int, timeout_s: float = 30) -> list:
    got: list = []
    with trio.move_on_after(timeout_s):
        while len(got) < n:
            got += await consumer.poll(500)
    return got


def by_partition(records) -> dict[int, list]:
    out: dict[int, list] = {}
    for r in records:
        out.setdefault(r.partition, []).append(r)
    return out


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
async def test_ordered_complete_delivery_every_codec(cluster, codec):
    topic = f"codec-{codec}"
    create_topic(cluster, topic, 3)
    sent = produce(cluster, topic, 900, 3, codec)
    async with Consumer(cluster.bootstrap, {"auto.offset.reset": "earliest",
                                            "max.poll.records": 100}) as c:
        c.assign([(topic, p) for p in range(3)])
        got = await consume_until(c, 900)
    assert len(got) == 900
    for p, records in by_partition(got).items():
        assert [r.offset for r in records] == list(range(len(sent[p])))      # no gap, no dup
        assert [r.value for r in records] == sent[p]
        assert all(r.topic == topic and r.headers[0][0] == "n" for r in records)


async def test_group_delivery_and_restart_resumes_from_commits(cluster):
    topic, group = "resume", f"g-{uuid.uuid4().hex[:6]}"
    create_topic(cluster, topic, 4)
    sent = produce(cluster, topic, 400, 4)
    conf = {"group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False,
            "max.poll.records": 50, **FAST_GROUP}
    first: list = []
    async with Consumer(cluster.bootstrap, conf) as c:
        c.subscribe([topic])
        while len(first) < 150:
            batch = await c.poll(1000)
            first += batch
            await c.commit()                       # commit after processing
        committed = await c.committed([(topic, p) for p in range(4)])
        positions = {p: await c.position((topic, p)) for p in range(4)}
    assert {TopicPartition(topic, p): positions[p] for p in range(4)} == committed
    async with Consumer(cluster.bootstrap, conf) as c:
        c.subscribe([topic])
        rest = await consume_until(c, 400 - len(first))
        await c.commit()
    assert len(first) + len(rest) == 400             # nothing skipped, nothing twice
    for p, records in by_partition(rest).items():
        assert records[0].offset == committed[TopicPartition(topic, p)]
    everything = by_partition(first + rest)
    for p in range(4):
        assert [r.value for r in everything[p]] == sent[p]


async def test_seek_positions_pause_and_times(cluster):
    topic = "seeking"
    create_topic(cluster, topic, 2)
    before = int(time.time() * 1000) - 1
    produce(cluster, topic, 100, 2)
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    async with Consumer(cluster.bootstrap, {"auto.offset.reset": "latest"}) as c:
        c.assign([tp0, tp1])
        assert await c.position(tp0) == 50                 # latest
        c.seek_to_beginning([tp0])
        assert await c.position(tp0) == 0
        c.seek(tp1, 45)
        c.pause([tp0])
        got = await consume_until(c, 5, 10)
        assert [(r.partition, r.offset) for r in got] == [(1, o) for o in range(45, 50)]
        assert c.paused() == [tp0]
        assert await c.poll(300) == []                     # tp0 paused, tp1 at the end
        c.resume([tp0])
        got = await consume_until(c, 50, 10)
        assert [r.offset for r in got] == list(range(50))
        c.seek_to_end()
        assert await c.position(tp0) == 50 and await c.position(tp1) == 50
        times = await c.offsets_for_times({tp0: before, tp1: int(time.time() * 1000) + 60_000})
        assert times[tp0][0] == 0 and times[tp1] is None
        assert await c.beginning_offsets([tp0]) == {tp0: 0}
        assert await c.end_offsets([tp1]) == {tp1: 50}
        with pytest.raises(ValueError):
            c.seek(("other", 0), 1)


async def test_offset_reset_none_and_latest(cluster):
    topic = "resets"
    create_topic(cluster, topic, 1)
    produce(cluster, topic, 10, 1)
    group = f"none-{uuid.uuid4().hex[:6]}"
    async with Consumer(cluster.bootstrap, {"group.id": group, "auto.offset.reset": "none",
                                            **FAST_GROUP}) as c:
        c.assign([(topic, 0)])
        with pytest.raises(NoOffsetForPartitionError):
            await c.poll(500)
        await c.commit({(topic, 0): 4})                    # manual-assign commit
        c.assign([(topic, 0)])
        got = await consume_until(c, 6, 10)
        assert [r.offset for r in got] == list(range(4, 10))
        assert await c.committed([(topic, 0)]) == {TopicPartition(topic, 0): 4}
        c.seek((topic, 0), 1000)                           # out of range -> reset: none raises
        with pytest.raises(NoOffsetForPartitionError):
            await c.poll(2000)


async def test_read_committed_over_real_transactions(cluster):
    topic = "txn-read"
    create_topic(cluster, topic, 1)
    p = CKProducer({"bootstrap.servers": cluster.bootstrap,
                    "transactional.id": f"tx-{uuid.uuid4().hex[:6]}"})
    p.init_transactions(60)
    p.begin_transaction()
    for i in range(5):
        p.produce(topic, value=f"aborted-{i}".encode(), partition=0)
    assert p.flush(30) == 0            # on the broker before the abort, or librdkafka drops them
    p.abort_transaction(30)
    p.begin_transaction()
    for i in range(5):
        p.produce(topic, value=f"committed-{i}".encode(), partition=0)
    p.commit_transaction(30)
    values = {}
    for level in ("read_committed", "read_uncommitted"):
        async with Consumer(cluster.bootstrap, {"isolation.level": level,
                                                "auto.offset.reset": "earliest"}) as c:
            c.assign([(topic, 0)])
            got = await consume_until(c, 10 if level == "read_uncommitted" else 5, 15)
            values[level] = [r.value.decode() for r in got]
    assert values["read_committed"] == [f"committed-{i}" for i in range(5)]
    assert values["read_uncommitted"] == [f"aborted-{i}" for i in range(5)] + \
        [f"committed-{i}" for i in range(5)]


def test_blocking_facade(cluster):
    from clients.consumer.sync import SyncConsumer
    topic = "sync-facade"
    create_topic(cluster, topic, 2)
    sent = produce(cluster, topic, 60, 2)
    group = f"sync-{uuid.uuid4().hex[:6]}"
    assigned = []
    with SyncConsumer(cluster.bootstrap, {"group.id": group, "auto.offset.reset": "earliest",
                                          "enable.auto.commit": False, **FAST_GROUP}) as c:
        c.subscribe([topic], on_assigned=assigned.extend)
        got = []
        deadline = time.time() + 30
        while len(got) < 60 and time.time() < deadline:
            got += c.poll(500)
        c.commit()
        assert c.committed([(topic, 0), (topic, 1)]) == {TopicPartition(topic, 0): 30,
                                                         TopicPartition(topic, 1): 30}
        assert c.position((topic, 1)) == 30
    assert sorted(assigned) == [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    for p, records in by_partition(got).items():
        assert [r.value for r in records] == sent[p]


async def test_async_commit_callback_auto_commit_and_commit_on_close(cluster):
    topic = "commits"
    create_topic(cluster, topic, 1)
    produce(cluster, topic, 30, 1)
    tp = TopicPartition(topic, 0)
    group = f"ac-{uuid.uuid4().hex[:6]}"
    conf = {"group.id": group, "auto.offset.reset": "earliest", "max.poll.records": 10,
            "auto.commit.interval.ms": 200, **FAST_GROUP}
    done = trio.Event()
    results = []

    def callback(offsets, err):
        results.append((offsets, err))
        done.set()

    async with Consumer(cluster.bootstrap, conf) as c:
        c.subscribe([topic])
        got = await consume_until(c, 10)
        assert len(got) == 10
        await c.commit(asynchronous=True, callback=callback)
        with trio.fail_after(10):
            await done.wait()
        assert results == [({tp: 10}, None)]
        got = await consume_until(c, 10)            # auto commit follows the position
        with trio.fail_after(10):
            while (await c.committed([tp]))[tp] < 20:
                got += await c.poll(100)
        await consume_until(c, 20 - len(got))
        assert await c.position(tp) == 30
    # close committed the last position (auto commit on)
    async with Consumer(cluster.bootstrap, conf) as c:
        assert (await c.committed([tp]))[tp] == 30


async def test_cancelled_consumer_still_commits_and_leaves(cluster):
    from clients.admin import AdminClient as OurAdmin
    topic, group = "cancelled", f"cx-{uuid.uuid4().hex[:6]}"
    create_topic(cluster, topic, 1)
    produce(cluster, topic, 5, 1)
    with trio.move_on_after(8):               # the caller's deadline cancels everything
        async with Consumer(cluster.bootstrap, {"group.id": group,
                                                "auto.offset.reset": "earliest",
                                                **FAST_GROUP}) as c:
            c.subscribe([topic])
            while True:
                await c.poll(200)
    async with OurAdmin(cluster.bootstrap) as admin:
        desc = (await admin.describe_groups([group]))[group]
        offsets = await admin.list_group_offsets(group)
    assert desc.state == "Empty" and desc.members == []     # left, not waiting for expiry
    assert [o.offset for o in offsets.values()] == [5]       # auto commit on close
