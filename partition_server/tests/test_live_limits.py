"""Limits on a live cluster, each answered with Kafka's error and nothing else disturbed:
`message.max.bytes` (and a topic's larger `max.message.bytes`), `socket.request.max.bytes`,
an acks=all produce whose `timeout_ms` passes while a follower is paused (REQUEST_TIMED_OUT),
acks outside 0/1/-1, and Fetch `max_bytes` smaller than one batch (still one batch, KIP-74)."""

import signal
import socket
import struct
import time

import pytest
import trio
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from clients.connection import BrokerConnection
from partition_server.testing import LiveCluster
from wire.errors import ErrorCode
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS
from wire.records.batch import build_batch

pytestmark = pytest.mark.live
MAX_MESSAGE = 20_000
MAX_REQUEST = 300_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LiveCluster(tmp_path_factory.mktemp("limits"),
                    {"message.max.bytes": str(MAX_MESSAGE),
                     "socket.request.max.bytes": str(MAX_REQUEST)})
    c.start()
    yield c
    c.stop()


def _create(cluster, topic, config=None, rf=3):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for fut in admin.create_topics([NewTopic(topic, 1, rf, config=config or {})]).values():
        fut.result(30)
    return admin.list_topics(topic, timeout=10).topics[topic].partitions[0]


def _produce_request(topic, records, acks=-1, timeout_ms=10000):
    pr = REQUESTS[ApiKey.PRODUCE]
    return pr(acks=acks, timeout_ms=timeout_ms, topic_data=[pr.TopicProduceData(
        name=topic, partition_data=[pr.PartitionProduceData(index=0, records=records)])])


async def _request(port, req, version):
    conn = BrokerConnection("127.0.0.1", port)
    await conn.connect()
    try:
        return await conn.request(req, version)
    finally:
        await conn.aclose()


def _watermarks(cluster, topic):
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "limits"})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    finally:
        c.close()


def test_message_max_bytes_refuses_large_batches_unless_the_topic_allows_them(cluster):
    _create(cluster, "small")
    _create(cluster, "roomy", {"max.message.bytes": str(4 * MAX_MESSAGE)})
    results = {}
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                  "message.max.bytes": 10 * MAX_MESSAGE, "compression.type": "none"})
    for topic in ("small", "roomy"):
        p.produce(topic, b"x" * (2 * MAX_MESSAGE), partition=0,
                  on_delivery=lambda err, msg: results.__setitem__(msg.topic(), err))
        assert p.flush(30) == 0
        p.produce(topic, b"fits", partition=0)           # its own batch
        assert p.flush(30) == 0
    assert results["small"] is not None and results["small"].code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert results["roomy"] is None
    assert _watermarks(cluster, "small") == (0, 1)        # only the small record was appended
    assert _watermarks(cluster, "roomy") == (0, 2)


def test_oversized_request_frame_closes_only_that_connection(cluster):
    part = _create(cluster, "frames")
    port = cluster.layout.broker_port(part.leader)
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(10)
    s.sendall(struct.pack(">i", MAX_REQUEST + 1) + b"\x00" * 64)
    assert s.recv(100) == b""                              # closed without reading 300 kB
    s.close()
    resp = trio.run(_request, port, _produce_request("frames", build_batch([(None, b"ok", [], None)])), 9)
    assert resp.responses[0].partition_responses[0].error_code == ErrorCode.NONE


def test_invalid_acks_is_refused(cluster):
    part = _create(cluster, "acks")
    req = _produce_request("acks", build_batch([(None, b"v", [], None)]), acks=2)
    resp = trio.run(_request, cluster.layout.broker_port(part.leader), req, 9)
    assert resp.responses[0].partition_responses[0].error_code == ErrorCode.INVALID_REQUIRED_ACKS
    assert _watermarks(cluster, "acks") == (0, 0)


def test_acks_all_times_out_while_a_follower_is_paused(cluster):
    """replica.lag.time.max.ms is 30 s here, so the paused follower stays in the ISR and the high
    watermark cannot pass the batch: after timeout_ms the answer is REQUEST_TIMED_OUT. The record
    is in the leader's log (Kafka's "in doubt") and commits once the follower is back."""
    part = _create(cluster, "slow-isr")
    follower = next(r for r in part.replicas if r != part.leader)
    cluster.kill(f"broker-{follower}", signal.SIGSTOP)
    try:
        req = _produce_request("slow-isr", build_batch([(None, b"in-doubt", [], None)]), timeout_ms=700)
        t0 = time.time()
        resp = trio.run(_request, cluster.layout.broker_port(part.leader), req, 9)
        waited = time.time() - t0
    finally:
        cluster.proc(f"broker-{follower}").proc.send_signal(signal.SIGCONT)
    assert resp.responses[0].partition_responses[0].error_code == ErrorCode.REQUEST_TIMED_OUT
    assert 0.6 <= waited < 10
    deadline = time.time() + 30
    while _watermarks(cluster, "slow-isr") != (0, 1) and time.time() < deadline:
        time.sleep(0.3)
    assert _watermarks(cluster, "slow-isr") == (0, 1)


def test_fetch_max_bytes_below_one_batch_still_returns_that_batch(cluster):
    part = _create(cluster, "kip74")
    port = cluster.layout.broker_port(part.leader)
    big = build_batch([(None, b"y" * 5000, [], None)])
    resp = trio.run(_request, port, _produce_request("kip74", big), 9)
    assert resp.responses[0].partition_responses[0].error_code == ErrorCode.NONE
    fr = REQUESTS[ApiKey.FETCH]
    req = fr(replica_id=-1, max_wait_ms=100, min_bytes=1, max_bytes=100, isolation_level=0,
             session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="",
             topics=[fr.FetchTopic(topic="kip74", partitions=[fr.FetchPartition(
                 partition=0, fetch_offset=0, partition_max_bytes=100, current_leader_epoch=-1,
                 last_fetched_epoch=-1, log_start_offset=-1)])])
    out = trio.run(_request, port, req, 12).responses[0].partitions[0]
    assert out.error_code == ErrorCode.NONE and len(out.records) == len(big)
