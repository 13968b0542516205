"""Consumer groups on a live cluster with unmodified clients (issue #7, first slice).

Three consumers of one group share a 6-partition topic; every record is processed at least once,
the final assignments are disjoint and cover all partitions, committed offsets are what was
processed, and a new consumer of the group resumes from them.
"""

import threading
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from partition_server.testing import LiveCluster

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LiveCluster(tmp_path_factory.mktemp("groups"))
    c.start()
    yield c
    c.stop()


def _topic(cluster, name, n=600):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for fut in admin.create_topics([NewTopic(name, 6, 3)]).values():
        fut.result(30)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "compression.type": "lz4"})
    for i in range(n):
        p.produce(name, str(i).encode(), key=str(i).encode())
    assert p.flush(30) == 0


def _confluent_member(cluster, topic, group, seconds, seen, assignments, name, first_at=None,
                      until=None):
    """Consume and commit after each record for `seconds`, or until `until()` is true (then a
    short grace so the group is stable when the assignment is read)."""
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "session.timeout.ms": 6000})
    c.subscribe([topic])
    end = time.time() + seconds
    while time.time() < end:
        if until is not None and until():
            break
        m = c.poll(0.2)
        if m is None or m.error():
            continue
        seen.append((m.partition(), m.offset()))
        if first_at is not None:
            first_at.setdefault("t", time.time())
        try:
            c.commit(m, asynchronous=False)       # commit after processing
        except KafkaException:
            pass        # refused during a rebalance: the record comes again (at least once)
    assignments[name] = {tp.partition for tp in c.assignment()}
    c.close()


def test_three_confluent_consumers_share_partitions_and_commit(cluster):
    topic, group = "grp-confluent", "g-confluent"
    _topic(cluster, topic)
    seen, assignments = [], {}
    done = threading.Event()

    def until():
        if len(set(seen)) >= 600:
            done.set()
        return done.is_set()
    threads = [threading.Thread(target=_confluent_member,
                                args=(cluster, topic, group, 90, seen, assignments, f"c{i}"),
                                kwargs={"until": until})
               for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(seen)) == 600                       # every record at least once
    owned = [p for parts in assignments.values() for p in parts]
    assert sorted(owned) == list(range(6)), assignments   # disjoint, complete
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
    committed = c.committed([TopicPartition(topic, p) for p in range(6)], timeout=10)
    c.close()
    highest = {}
    for p, o in seen:
        highest[p] = max(highest.get(p, -1), o)
    assert {tp.partition: tp.offset for tp in committed} == {p: o + 1 for p, o in highest.items()}


def test_group_resumes_from_committed_offsets(cluster):
    topic, group = "grp-resume", "g-resume"
    _topic(cluster, topic, n=300)
    seen, assignments = [], {}
    _confluent_member(cluster, topic, group, 60, seen, assignments, "first",
                      until=lambda: len(set(seen)) >= 300)
    assert len(set(seen)) == 300
    p = Producer({"bootstrap.servers": cluster.bootstrap})
    for i in range(300, 360):
        p.produce(topic, str(i).encode(), partition=i % 6)
    p.flush(30)
    later = []
    _confluent_member(cluster, topic, group, 30, later, assignments, "second",
                      until=lambda: len(later) >= 60)
    assert len(later) == 60 and not set(later) & set(seen)   # only what came after the commit


def test_kafka_python_and_aiokafka_groups(cluster):
    import asyncio

    from aiokafka import AIOKafkaConsumer
    from kafka import KafkaConsumer
    topic = "grp-python"
    _topic(cluster, topic, n=120)
    kp = KafkaConsumer(topic, bootstrap_servers=cluster.bootstrap, group_id="g-kp",
                       auto_offset_reset="earliest", enable_auto_commit=False,
                       consumer_timeout_ms=8000)
    got = [m.value for m in kp]
    kp.commit()
    kp.close()
    assert len(set(got)) == 120

    async def aio():
        c = AIOKafkaConsumer(topic, bootstrap_servers=cluster.bootstrap, group_id="g-aio",
                             auto_offset_reset="earliest", enable_auto_commit=False)
        await c.start()
        values = []
        try:
            end = time.time() + 15
            while len(values) < 120 and time.time() < end:
                batch = await c.getmany(timeout_ms=500)
                for msgs in batch.values():
                    values += [m.value for m in msgs]
            await c.commit()
        finally:
            await c.stop()
        return values
    assert len(set(asyncio.run(aio()))) == 120


def test_coordinator_sigkill_keeps_committed_offsets(cluster):
    """F13: kill -9 the group coordinator's broker during a steady group: a new coordinator
    takes over, committed offsets are all there, no committed record is delivered again and none
    is lost; the group is consuming again within session timeout + 5 s."""
    from partition_server.group.coordinator import OFFSETS_TOPIC, partition_for
    topic, group = "grp-f13", "g-f13"
    _topic(cluster, topic, n=300)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    seen, assignments = [], {}
    _confluent_member(cluster, topic, group, 60, seen, assignments, "before",
                      until=lambda: len(set(seen)) >= 300)
    assert len(set(seen)) == 300
    md = admin.list_topics(OFFSETS_TOPIC, timeout=10).topics[OFFSETS_TOPIC]
    coordinator = md.partitions[partition_for(group, len(md.partitions))].leader
    cluster.kill(f"broker-{coordinator}")
    try:
        p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
        for i in range(300, 360):
            p.produce(topic, str(i).encode(), partition=i % 6)
        assert p.flush(30) == 0
        t0 = time.time()
        after, first = [], {}
        _confluent_member(cluster, topic, group, 6 + 5 + 6, after, assignments, "after", first)
    finally:
        cluster.restart_broker(coordinator)
    offsets = {(p, o) for p, o in after}
    assert len(offsets) == 60, f"expected exactly the 60 new records, got {len(offsets)}"
    assert not (offsets & set(seen))             # nothing committed came back
    assert first["t"] - t0 < 6 + 5             # session timeout + 5 s


def test_kip848_consumer_protocol_with_librdkafka(cluster):
    """group.protocol=consumer (KIP-848): the coordinator assigns (uniform assignor) through
    ConsumerGroupHeartbeat; three librdkafka members share the partitions with commit after
    processing, every record is processed, the final assignments are disjoint and complete, a
    classic JoinGroup for the same group is refused, and a restarted member resumes from the
    committed offsets."""
    import trio

    from clients.connection import BrokerConnection
    from wire.errors import ErrorCode
    from wire.messages.index_generated import REQUESTS
    topic, group = "grp-kip848", "g-kip848"
    _topic(cluster, topic)
    seen, assignments, lock = [], {}, threading.Lock()
    done = threading.Event()

    def member(name):
        c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                      "group.protocol": "consumer", "auto.offset.reset": "earliest",
                      "enable.auto.commit": False})
        c.subscribe([topic])
        end = time.time() + 90
        while time.time() < end and not done.is_set():
            m = c.poll(0.2)
            if m is None or m.error():
                continue
            with lock:
                seen.append((m.partition(), m.offset()))
                if len(set(seen)) >= 600:
                    done.set()
            c.commit(m, asynchronous=False)
        # settle: keep polling until every member holds partitions (the group reconciles)
        settle = time.time() + 30
        while time.time() < settle and not (len(assignments) == 3 and all(assignments.values())
                                             and sum(map(len, assignments.values())) == 6):
            c.poll(0.2)
            assignments[name] = {tp.partition for tp in c.assignment()}
        assignments[name] = {tp.partition for tp in c.assignment()}
        stop.wait(30)
        c.close()
    stop = threading.Event()
    threads = [threading.Thread(target=member, args=(f"m{i}",)) for i in range(3)]
    for t in threads:
        t.start()
    done.wait(90)
    deadline = time.time() + 40
    while time.time() < deadline and not (len(assignments) == 3
                                          and sum(map(len, assignments.values())) == 6):
        time.sleep(0.2)
    snapshot = {k: set(v) for k, v in assignments.items()}

    async def classic_join():
        host, port = cluster.bootstrap.split(",")[0].rsplit(":", 1)
        from partition_server.group.coordinator import partition_for
        md = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(
            "__consumer_offsets", timeout=10).topics["__consumer_offsets"]
        node = md.partitions[partition_for(group, len(md.partitions))].leader
        port = int(cluster.bootstrap.split(",")[node].rsplit(":", 1)[1])
        conn = BrokerConnection(host, port)
        await conn.connect()
        try:
            jg = REQUESTS[11]
            return await conn.request(jg(group_id=group, session_timeout_ms=10000,
                                         rebalance_timeout_ms=10000, member_id="",
                                         protocol_type="consumer", protocols=[
                                             jg.JoinGroupRequestProtocol(name="range", metadata=b"")]), 5)
        finally:
            await conn.aclose()
    joined = trio.run(classic_join)
    stop.set()
    for t in threads:
        t.join()
    assert len(set(seen)) == 600
    owned = sorted(p for parts in snapshot.values() for p in parts)
    assert owned == list(range(6)) and all(snapshot.values()), snapshot
    assert joined.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    p = Producer({"bootstrap.servers": cluster.bootstrap})
    for i in range(600, 630):
        p.produce(topic, str(i).encode(), partition=i % 6)
    p.flush(30)
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                  "group.protocol": "consumer", "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    later, end = [], time.time() + 40
    while len(later) < 30 and time.time() < end:
        m = c.poll(0.2)
        if m is not None and not m.error():
            later.append((m.partition(), m.offset()))
    c.close()
    assert len(later) == 30 and not set(later) & set(seen)     # resumed from the commits
