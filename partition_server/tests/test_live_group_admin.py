"""DeleteGroups, OffsetDelete and offsets retention on a live cluster (issue #7).

The cluster runs with `raftka.offsets.retention.ms=3000` (checked every 500 ms) so expiry is
observable in seconds; tombstones are written to `__consumer_offsets`, so deletions and expiries
survive a restart of the coordinator's broker."""

import time

import pytest
import trio
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from clients.connection import BrokerConnection
from partition_server.group.coordinator import OFFSETS_TOPIC, partition_for
from partition_server.testing import LiveCluster
from wire.errors import ErrorCode
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LiveCluster(tmp_path_factory.mktemp("group-admin"),
                    {"raftka.offsets.retention.ms": "3000",
                     "offsets.retention.check.interval.ms": "500"})
    c.start()
    yield c
    c.stop()


@pytest.fixture(scope="module")
def topics(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for fut in admin.create_topics([NewTopic(t, 2, 3) for t in ("ga-a", "ga-b")]).values():
        fut.result(30)
    p = Producer({"bootstrap.servers": cluster.bootstrap})
    for t in ("ga-a", "ga-b"):
        for i in range(20):
            p.produce(t, b"v%d" % i, partition=i % 2)
    assert p.flush(30) == 0
    return admin


def _commit(cluster, group, offsets):
    """A standalone (non-member) commit, as tools and manual-assignment consumers do."""
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
    c.commit(offsets=[TopicPartition(t, p, o) for t, p, o in offsets], asynchronous=False)
    c.close()


def _committed(cluster, group, parts):
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
    got = c.committed([TopicPartition(t, p) for t, p in parts], timeout=15)
    c.close()
    return {(tp.topic, tp.partition): tp.offset for tp in got}


def _member(cluster, group, topic):
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                  "auto.offset.reset": "earliest", "session.timeout.ms": 6000})
    c.subscribe([topic])
    end = time.time() + 30
    while not c.assignment() and time.time() < end:
        c.poll(0.2)
    assert c.assignment()
    return c


def _coordinator(admin, group):
    md = admin.list_topics(OFFSETS_TOPIC, timeout=10).topics[OFFSETS_TOPIC]
    return md.partitions[partition_for(group, len(md.partitions))].leader


def _offset_delete(cluster, admin, group, parts):
    """OffsetDelete straight on the wire (confluent's admin has no call for it)."""
    node = _coordinator(admin, group)
    port = int(cluster.bootstrap.split(",")[node].rsplit(":", 1)[1])

    async def go():
        conn = BrokerConnection("127.0.0.1", port)
        await conn.connect()
        try:
            od = REQUESTS[ApiKey.OFFSET_DELETE]
            by_topic = {}
            for t, p in parts:
                by_topic.setdefault(t, []).append(od.OffsetDeleteRequestPartition(partition_index=p))
            return await conn.request(od(group_id=group, topics=[
                od.OffsetDeleteRequestTopic(name=t, partitions=ps) for t, ps in by_topic.items()]), 0)
        finally:
            await conn.aclose()
    resp = trio.run(go)
    return resp.error_code, {(t.name, p.partition_index): p.error_code
                             for t in resp.topics for p in t.partitions}


def test_delete_groups(cluster, topics):
    admin = topics
    member = _member(cluster, "g-del-active", "ga-a")
    try:
        with pytest.raises(KafkaException) as exc:
            admin.delete_consumer_groups(["g-del-active"])["g-del-active"].result(15)
        assert exc.value.args[0].code() == ErrorCode.NON_EMPTY_GROUP
    finally:
        member.close()
    admin.delete_consumer_groups(["g-del-active"])["g-del-active"].result(15)
    with pytest.raises(KafkaException) as exc:
        admin.delete_consumer_groups(["g-never-was"])["g-never-was"].result(15)
    assert exc.value.args[0].code() == ErrorCode.GROUP_ID_NOT_FOUND
    _commit(cluster, "g-del-offsets", [("ga-a", 0, 5), ("ga-b", 1, 7)])
    assert _committed(cluster, "g-del-offsets", [("ga-a", 0)]) == {("ga-a", 0): 5}
    # a group with offsets only is listed and described as Empty (as Kafka does)
    listed = {g.group_id: g for g in admin.list_consumer_groups().result(15).valid}
    assert "g-del-offsets" in listed and listed["g-del-offsets"].state.name == "EMPTY"
    described = admin.describe_consumer_groups(["g-del-offsets"])["g-del-offsets"].result(15)
    assert described.state.name == "EMPTY" and not described.members
    admin.delete_consumer_groups(["g-del-offsets"])["g-del-offsets"].result(15)
    assert _committed(cluster, "g-del-offsets", [("ga-a", 0), ("ga-b", 1)]) == \
        {("ga-a", 0): -1001, ("ga-b", 1): -1001}


def test_offset_delete_refuses_subscribed_topics(cluster, topics):
    admin = topics
    group = "g-offdel"
    _commit(cluster, group, [("ga-a", 0, 3), ("ga-b", 0, 4), ("ga-b", 1, 6)])
    member = _member(cluster, group, "ga-a")       # the group is now subscribed to ga-a only
    try:
        err, parts = _offset_delete(cluster, admin, group, [("ga-a", 0), ("ga-b", 0)])
        assert err == 0
        assert parts == {("ga-a", 0): ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC, ("ga-b", 0): 0}
    finally:
        member.close()
    got = _committed(cluster, group, [("ga-a", 0), ("ga-b", 0), ("ga-b", 1)])
    assert got[("ga-b", 0)] == -1001 and got[("ga-b", 1)] == 6
    err, _ = _offset_delete(cluster, admin, "g-offdel-unknown", [("ga-a", 0)])
    assert err == ErrorCode.GROUP_ID_NOT_FOUND


def test_offsets_expire_only_once_the_group_is_empty_and_stay_expired(cluster, topics):
    admin = topics
    _commit(cluster, "g-expire", [("ga-a", 1, 9)])
    member = _member(cluster, "g-keep", "ga-b")
    try:
        member.commit(offsets=[TopicPartition("ga-b", p, 2) for p in range(2)], asynchronous=False)
        assert _committed(cluster, "g-expire", [("ga-a", 1)]) == {("ga-a", 1): 9}
        time.sleep(5)                                # > retention (3 s) + check interval
        assert _committed(cluster, "g-expire", [("ga-a", 1)]) == {("ga-a", 1): -1001}
        # a group with a live member keeps its offsets however old they are
        assert _committed(cluster, "g-keep", [("ga-b", 0)]) == {("ga-b", 0): 2}
    finally:
        member.close()
    # the expiry is durable: a new coordinator replays the tombstone
    node = _coordinator(admin, "g-expire")
    cluster.restart_broker(node)
    assert _committed(cluster, "g-expire", [("ga-a", 1)]) == {("ga-a", 1): -1001}
