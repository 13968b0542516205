"""The brokers' own fetch limits on a live cluster: `fetch.max.bytes` (every Fetch answered with
at most that much, a first batch larger than it alone, KIP-74) and the followers'
`replica.fetch.response.max.bytes` / `replica.fetch.min.bytes`. Set far below the batches here,
so every answer holds one batch: replication, acks=all produces and a consumer still get
everything, and a partition left out of an answer for want of room (a follower's 1,000 bytes
less a first batch of ~770) is read again on the follower's next fetch, not a minute later at
the session's full scan."""

import signal
import time

import pytest
import trio
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from clients.connection import BrokerConnection
from partition_server.config import BrokerConfig
from partition_server.testing import LiveCluster
from common.properties import ConfigError
from wire.errors import ErrorCode
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS

pytestmark = pytest.mark.live
CAP = 1024
RECORDS = 150


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LiveCluster(tmp_path_factory.mktemp("fetch-limits"),
                    {"fetch.max.bytes": str(CAP), "replica.fetch.response.max.bytes": "1000",
                     "replica.fetch.min.bytes": "1"})
    c.start()
    yield c
    c.stop()


def _produce(cluster, topic, partitions, one_at_a_time):
    """RECORDS records of 700 B, acks=all: each in a batch of its own, acknowledged before the
    next (`one_at_a_time`), or all at once over the partitions."""
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 0,
                  "enable.idempotence": True})
    acked = []
    deadline = time.monotonic() + 120
    for i in range(RECORDS):
        p.produce(topic, b"r" * 700, partition=i % partitions,
                  on_delivery=lambda err, msg: acked.append(err))
        while one_at_a_time and len(acked) <= i and time.monotonic() < deadline:
            p.poll(0.05)
    assert p.flush(120) == 0
    assert len(acked) == RECORDS and all(e is None for e in acked), acked[:3]


def test_replication_and_consumers_progress_one_batch_per_answer(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("capped", 3, 3)])["capped"].result(30)
    started = time.monotonic()
    _produce(cluster, "capped", 3, False)      # acks=all: every follower had every batch
    produced_s = time.monotonic() - started
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "capped",
                  "enable.auto.commit": False})
    try:
        c.assign([TopicPartition("capped", p, 0) for p in range(3)])
        got = []
        deadline = time.monotonic() + 60
        while len(got) < RECORDS and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
        assert len(got) == RECORDS and set(got) == {b"r" * 700}
    finally:
        c.close()
    # one batch per follower fetch: a partition left out of an answer (no room) with no later
    # append waited for the session's full scan, a minute, before it was read again
    assert produced_s < 45, produced_s


async def _fetch(port, topic, partitions):
    fr = REQUESTS[ApiKey.FETCH]
    req = fr(replica_id=-1, max_wait_ms=100, min_bytes=1, max_bytes=16 << 20,
             isolation_level=0, session_id=0, session_epoch=-1, forgotten_topics_data=[],
             rack_id="", topics=[fr.FetchTopic(topic=topic, partitions=[
                 fr.FetchPartition(partition=p, fetch_offset=0, partition_max_bytes=1 << 20,
                                   current_leader_epoch=-1, last_fetched_epoch=-1,
                                   log_start_offset=-1) for p in partitions])])
    conn = BrokerConnection("127.0.0.1", port)
    await conn.connect()
    try:
        return await conn.request(req, 12)
    finally:
        await conn.aclose()


def test_a_fetch_asking_for_more_gets_the_broker_cap(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("capped-raw", 2, replica_assignment=[[0], [0]],
                                 config={"min.insync.replicas": "1"})]
                        )["capped-raw"].result(30)
    _produce(cluster, "capped-raw", 2, True)
    resp = trio.run(_fetch, cluster.layout.broker_port(0), "capped-raw", [0, 1])
    parts = [p for t in resp.responses for p in t.partitions]
    assert all(p.error_code == ErrorCode.NONE for p in parts)
    sizes = [len(p.records or b"") for p in parts]
    # 16 MiB asked, each partition holds ~40 KiB: one batch (larger than the cap) comes back
    assert len([s for s in sizes if s]) == 1 and 700 < sum(sizes) < 2 * 700


@pytest.mark.parametrize("key, value, needle", [
    ("fetch.max.bytes", "100", "fetch.max.bytes"),
    ("replica.fetch.min.bytes", "0", "replica.fetch.min.bytes"),
    ("replica.fetch.response.max.bytes", "0", "replica.fetch.response.max.bytes"),
])
def test_bad_fetch_limits_are_refused_with_their_name(key, value, needle):
    props = {"process.roles": "broker", "node.id": "0",
             "controller.quorum.voters": "3000@127.0.0.1:19093",
             "listeners": "PLAINTEXT://127.0.0.1:19092", "log.dirs": "/nonexistent", key: value}
    with pytest.raises(ConfigError, match=needle):
        BrokerConfig.from_properties(props)


def test_a_partition_without_room_in_an_answer_is_read_on_the_next_fetch(cluster):
    """Four partitions led by broker 0 get a ~670 B batch each while both followers are
    paused; on resuming, every follower answer has room for one (1,000 B asked, less the
    first batch, leaves ~330: the next partition's batch does not fit). Each partition left
    out must be read again on the following fetch: all four are committed within seconds, the
    followers still in the ISR (the pause is far shorter than replica.lag.time.max.ms and the
    broker session), so the high watermarks moved because the followers have the records."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("no-room", 4, replica_assignment=[[0, 1, 2]] * 4)]
                        )["no-room"].result(30)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "1", "linger.ms": 0})
    p.list_topics("no-room", timeout=10)
    followers = ("broker-1", "broker-2")
    for name in followers:
        cluster.kill(name, signal.SIGSTOP)
    try:
        for part in range(4):
            p.produce("no-room", b"n" * 600, partition=part)
        assert p.flush(10) == 0
    finally:
        for name in followers:
            cluster.proc(name).proc.send_signal(signal.SIGCONT)
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "no-room"})
    try:
        def high_watermarks():
            return [c.get_watermark_offsets(TopicPartition("no-room", q), timeout=10)[1]
                    for q in range(4)]
        deadline = time.monotonic() + 20          # the session's full scan is 60 s away
        while high_watermarks() != [1] * 4 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert high_watermarks() == [1] * 4
    finally:
        c.close()
    md = admin.list_topics("no-room", timeout=10).topics["no-room"]
    assert all(sorted(md.partitions[q].isrs) == [0, 1, 2] for q in range(4))
