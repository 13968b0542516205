"""An idempotent producer's requests across a short ISR, on a live cluster, request by request.

librdkafka reads OUT_OF_ORDER_SEQUENCE_NUMBER on a batch behind its first unacknowledged one as
"everything not acknowledged is lost": it bumps its epoch and sends it all again, renumbered,
which writes twice a batch the leader holds but answered as not written. A leader short of
min.insync.replicas did both (test_live_jbod saw the duplicate; txn/producer_state.py `admit`):
it refused the retry of a batch it held NOT_ENOUGH_REPLICAS ("not written"), and once the ISR
was whole again answered the batch behind one it had just refused OUT_OF_ORDER_SEQUENCE_NUMBER.
Here the requests go one by one over one connection, with the ISR shrunk (follower paused) and
grown back (resumed) between them; each answer is Kafka's protocol meaning, and the log ends
with every batch once."""

from __future__ import annotations

import signal
import time

import pytest
import trio
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from clients.connection import BrokerConnection
from partition_server.testing import LiveCluster
from wire.errors import ErrorCode
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS
from wire.records.batch import build_batch

TOPIC, LEADER, FOLLOWER = "short-isr", 0, 1


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    # a paused follower leaves the ISR after replica.lag.time.max.ms
    with LiveCluster(tmp_path_factory.mktemp("shortisr"),
                     {"replica.lag.time.max.ms": "2000"}) as c:
        yield c


def _isr(admin) -> list[int]:
    return sorted(admin.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions[0].isrs)


def _until(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_retries_across_a_short_isr_keep_their_meaning(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, replica_assignment=[[LEADER, FOLLOWER]],
                                  config={"min.insync.replicas": "2"})])[TOPIC].result(30)
    _until(lambda: _isr(admin) == [LEADER, FOLLOWER], 30, "the ISR")
    conn = BrokerConnection("127.0.0.1", cluster.layout.broker_port(LEADER))
    pr = REQUESTS[ApiKey.PRODUCE]

    async def send(pid, epoch, seq, n):
        batch = build_batch([(None, b"v%d" % (seq + i), [], None) for i in range(n)],
                            producer_id=pid, producer_epoch=epoch, base_sequence=seq)
        resp = await conn.request(pr(acks=-1, timeout_ms=3000, topic_data=[pr.TopicProduceData(
            name=TOPIC, partition_data=[pr.PartitionProduceData(index=0, records=batch)])]), 9)
        p = resp.responses[0].partition_responses[0]
        return ErrorCode(p.error_code), p.base_offset

    async def scenario():
        await conn.connect()
        init = await conn.request(REQUESTS[ApiKey.INIT_PRODUCER_ID](
            transactional_id=None, transaction_timeout_ms=60000), 4)
        pid, epoch = init.producer_id, init.producer_epoch
        assert await send(pid, epoch, 0, 3) == (ErrorCode.NONE, 0)             # X
        cluster.kill(f"broker-{FOLLOWER}", signal.SIGSTOP)
        await trio.to_thread.run_sync(
            _until, lambda: _isr(admin) == [LEADER], 60, "the paused follower out of the ISR")
        # X again (its answer was lost): held, committed, the ISR short: "maybe written",
        # never NOT_ENOUGH_REPLICAS ("not written")
        assert (await send(pid, epoch, 0, 3))[0] == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        assert (await send(pid, epoch, 3, 2))[0] == ErrorCode.NOT_ENOUGH_REPLICAS       # R0
        cluster.kill(f"broker-{FOLLOWER}", signal.SIGCONT)
        await trio.to_thread.run_sync(
            _until, lambda: _isr(admin) == [LEADER, FOLLOWER], 60, "the follower back in")
        # R1, sent behind R0 before R0's refusal came back: the gap is R0, about to be sent
        # again; OUT_OF_ORDER_SEQUENCE_NUMBER here made librdkafka renumber X and write it twice
        assert (await send(pid, epoch, 5, 1))[0] == ErrorCode.NOT_ENOUGH_REPLICAS
        assert [await send(pid, epoch, s, n) for s, n in ((0, 3), (3, 2), (5, 1))] == \
            [(ErrorCode.NONE, 0), (ErrorCode.NONE, 3), (ErrorCode.NONE, 5)]
        # a gap this leader did not open is out of order, as before
        assert (await send(pid, epoch, 9, 1))[0] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        await conn.aclose()
    try:
        trio.run(scenario)
    finally:
        if cluster.proc(f"broker-{FOLLOWER}").proc.poll() is None:
            cluster.kill(f"broker-{FOLLOWER}", signal.SIGCONT)
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "short-isr",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(TOPIC, 0, 0)])
    values = []
    deadline = time.monotonic() + 30
    while len(values) < 6 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            values.append(m.value())
    assert c.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=10) == (0, 6)
    c.close()
    assert values == [b"v%d" % i for i in range(6)]                # each batch once, in order
