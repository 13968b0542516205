"""Consumer groups on a live cluster with unmodified clients (issue #7, first slice).

Three consumers of one group share a 6-partition topic; every record is processed at least once,
the final assignments are disjoint and cover all partitions, committed offsets are what was
processed, and a new consumer of the group resumes from them.
"""

import threading
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
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


def _confluent_member(cluster, topic, group, seconds, seen, assignments, name):
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "session.timeout.ms": 6000})
    c.subscribe([topic])
    end = time.time() + seconds
    while time.time() < end:
        m = c.poll(0.2)
        if m is None or m.error():
            continue
        seen.append((m.partition(), m.offset()))
        c.commit(m, asynchronous=False)           # commit after processing
    assignments[name] = {tp.partition for tp in c.assignment()}
    c.close()


def test_three_confluent_consumers_share_partitions_and_commit(cluster):
    topic, group = "grp-confluent", "g-confluent"
    _topic(cluster, topic)
    seen, assignments = [], {}
    threads = [threading.Thread(target=_confluent_member,
                                args=(cluster, topic, group, 12, seen, assignments, f"c{i}"))
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
    _confluent_member(cluster, topic, group, 6, seen, assignments, "first")
    assert len(set(seen)) == 300
    p = Producer({"bootstrap.servers": cluster.bootstrap})
    for i in range(300, 360):
        p.produce(topic, str(i).encode(), partition=i % 6)
    p.flush(30)
    later = []
    _confluent_member(cluster, topic, group, 6, later, assignments, "second")
    values_later = len(later)
    assert values_later == 60                            # only what came after the commit


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
