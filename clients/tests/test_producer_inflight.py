"""Several Produce requests in flight per node (max.in.flight.requests.per.connection), order
across retries with idempotence, and splitting a batch the broker refuses as too large.

Unit: resent batches go back in creation order; a split keeps the batch's place and sequence
range; restamping a batch under a new producer id keeps a valid CRC. Live: idempotent producer
with 5 in flight and a partition leader restarted mid-run — every acknowledged record exactly
once, in order, and more than one request really was in flight; a topic with a small
max.message.bytes — a multi-record batch is split and delivered, a lone oversized record fails
clearly without taking its neighbours down.
"""

from __future__ import annotations

import collections
import time
import uuid

import pytest
import trio
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import KafkaError as CKError
from confluent_kafka import KafkaException
from confluent_kafka import TopicPartition as CKTP
from confluent_kafka.admin import AdminClient, NewTopic

from clients.cluster import TopicPartition
from clients.config import ConfigError
from clients.producer import DeliveryFuture, Producer, ProducerBatch, RecordAccumulator
from partition_server.testing import LiveCluster
from wire.errors import ErrorCode, MessageTooLargeError
from wire.records.batch import decode_batch

TP = TopicPartition("t", 0)


def test_reenqueue_keeps_creation_order():
    acc = RecordAccumulator(batch_size=100, linger_s=0, buffer_memory=100_000, compression=0)
    for i in range(4):
        acc.append(TP, None, bytes([65 + i]) * 90, None, 1, now=0.0)      # one batch each
    drained = [acc.drain([TP], 1 << 20)[0] for _ in range(3)]
    assert [b.order for b in drained] == [(1,), (2,), (3,)]
    # answers come back in any order (a gap makes later ones fail too): resend in order
    for b in (drained[2], drained[0], drained[1]):
        acc.reenqueue(b)
    assert [b.order for b in acc.batches[TP]] == [(1,), (2,), (3,), (4,)]


def test_split_keeps_place_sequences_and_futures():
    p = Producer("127.0.0.1:1", {"batch.size": 1 << 16})
    b = ProducerBatch(TP, 0, 0.0, 4000, (7,))
    futs = []
    for i in range(5):
        b.append(f"k{i}".encode(), f"v{i}".encode() * 50, [("h", b"x")], 1000 + i)
        futs.append(DeliveryFuture(b, i))
    b.callbacks, b.timestamps = [None] * 5, [1000 + i for i in range(5)]
    seen = []
    futs[3].add_callback(lambda meta, exc: seen.append((meta.offset, meta.timestamp)))
    b.seal(42, 3, 100)
    later = ProducerBatch(TP, 0, 0.0, 100, (8,))
    p._acc.batches[TP] = collections.deque([later])
    p._sender._split(b)
    first, second, third = p._acc.batches[TP]
    assert (first.order, second.order, third) == ((7, 0), (7, 1), later)
    d1, d2 = decode_batch(first.data), decode_batch(second.data)
    assert [r.value for r in d1.records + d2.records] == [f"v{i}".encode() * 50 for i in range(5)]
    assert [r.timestamp for r in d1.records + d2.records] == [1000 + i for i in range(5)]
    h = d1.header
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (42, 3, 100)
    assert d2.header.base_sequence == 100 + len(d1.records) and len(d1.records) == 2
    assert first.alloc + second.alloc == 4000
    # the futures follow their records into the halves: offsets come from the half's answer
    assert (first.n_callbacks, second.n_callbacks) == (0, 1)
    assert first.timestamps + second.timestamps == [1000 + i for i in range(5)]
    assert not futs[4].done()
    first.complete(500, -1)
    second.complete(900, -1)
    assert [f.result().offset for f in futs] == [500, 501, 900, 901, 902]
    assert [f.result().timestamp for f in futs] == [1000 + i for i in range(5)]
    assert [f.topic for f in futs] == ["t"] * 5 and seen == [(901, 1003)]
    assert futs[4]._batch is second and futs[4]._index == 2


def test_restamp_under_new_producer_id():
    b = ProducerBatch(TP, 1, 0.0, 100)
    b.append(None, b"x" * 300, None, 5)
    b.seal(1, 0, 10)
    b.restamp(99, 2, 0)
    d = decode_batch(b.data)                           # verifies the CRC
    assert (d.header.producer_id, d.header.producer_epoch, d.header.base_sequence) == (99, 2, 0)
    assert d.records[0].value == b"x" * 300


def test_inflight_config():
    with pytest.raises(ConfigError, match="<= 5"):
        Producer("127.0.0.1:1", {"enable.idempotence": True,
                                 "max.in.flight.requests.per.connection": 6})
    with pytest.raises(ConfigError, match="at least 1"):
        Producer("127.0.0.1:1", {"max.in.flight.requests.per.connection": 0})
    # idempotence left at its default gives way to a larger in-flight, as in Kafka
    assert not Producer("127.0.0.1:1", {"max.in.flight.requests.per.connection": 10}).idempotent


# -- live ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def live(tmp_path_factory):
    c = LiveCluster(tmp_path_factory.mktemp("inflight"))
    c.start()
    yield c
    c.stop()


def create_topic(cluster, name, partitions, config=None):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for fut in admin.create_topics([NewTopic(name, partitions, 3, config=config or {})]).values():
        fut.result(30)


def read_back(cluster, topic, partitions, expect, timeout_s=60):
    """{partition: [values]} via confluent-kafka, until `expect` records or idle."""
    c = CKConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"r-{uuid.uuid4()}",
                    "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.assign([CKTP(topic, p, 0) for p in range(partitions)])
    out: dict[int, list[str]] = collections.defaultdict(list)
    n, last, end = 0, time.time(), time.time() + timeout_s
    while n < expect and time.time() - last < 5 and time.time() < end:
        m = c.poll(0.2)
        if m is None:
            continue
        if m.error():
            if m.error().code() != CKError._PARTITION_EOF:
                raise KafkaException(m.error())
            continue
        out[m.partition()].append(m.value().decode())
        n += 1
        last = time.time()
    c.close()
    return out


@pytest.mark.live
async def test_inflight_idempotent_order_across_leader_restart(live):
    topic, parts, min_total = "inflight-order", 3, 4000
    create_topic(live, topic, parts)
    cfg = {"max.in.flight.requests.per.connection": 5, "batch.size": 2048, "linger.ms": 2,
           "retry.backoff.ms": 50, "request.timeout.ms": 10000}
    concurrent, peak = collections.Counter(), [0]
    async with Producer(live.bootstrap, cfg) as p:
        assert p.idempotent
        real_call = p._sender._produce_call

        async def counting_call(node, req, expect_response=True, ticket=None, failures=None):
            concurrent[node] += 1
            peak[0] = max(peak[0], concurrent[node])
            try:
                return await real_call(node, req, expect_response, ticket, failures)
            finally:
                concurrent[node] -= 1
        p._sender._produce_call = counting_call
        await p.cluster.wait_for_topic(topic)
        victim = p.cluster.leader_for(topic, 0)
        real_retry = p._sender._retry_or_fail
        retried = collections.Counter()

        def counting_retry(b, exc, force=False):
            retried[type(exc).__name__] += 1
            return real_retry(b, exc, force)
        p._sender._retry_or_fail = counting_retry
        futs = []
        restarted = trio.Event()

        async def restart():
            await trio.to_thread.run_sync(live.restart_broker, victim)
            restarted.set()
        async with trio.open_nursery() as nursery:
            # keep producing from before the leader dies until after it is back
            i = 0
            while i < min_total or not restarted.is_set():
                futs.append(await p.send(topic, f"{i:06d}", partition=i % parts))
                i += 1
                if i == min_total // 4:
                    nursery.start_soon(restart)
                if i % 50 == 0:
                    await trio.sleep(0.02)
        total = i
        with trio.fail_after(120):
            await p.flush()
    errors = [f.exception() for f in futs if f.exception() is not None]
    assert not errors, errors[:3]
    assert peak[0] > 1, "never more than one Produce request in flight to a node"
    assert sum(retried.values()) > 0, "the leader restart never hit a request"
    got = read_back(live, topic, parts, total)
    for part in range(parts):
        want = [f"{i:06d}" for i in range(part, total, parts)]
        first_diff = next((j for j, (a, b) in enumerate(zip(got[part], want)) if a != b), None)
        assert got[part] == want, \
            f"partition {part}: {len(got[part])} records, first difference at {first_diff}"
    # offsets agree with the log order
    for part in range(parts):
        offs = [f.result().offset for f in futs[part::parts]]
        assert offs == sorted(offs) and len(set(offs)) == len(offs)


@pytest.mark.live
async def test_too_large_batch_is_split_single_record_fails(live):
    topic = "inflight-small"
    create_topic(live, topic, 1, {"max.message.bytes": "3000"})
    cfg = {"batch.size": 1 << 16, "linger.ms": 200}
    async with Producer(live.bootstrap, cfg) as p:
        futs = [await p.send(topic, f"{i:02d}-" + "x" * 600, partition=0) for i in range(20)]
        await p.flush()
        assert all(f.exception() is None for f in futs), \
            [f.exception() for f in futs if f.exception()][:2]
        offsets = [f.result().offset for f in futs]
        assert offsets == list(range(offsets[0], offsets[0] + 20))
        # one record over the limit fails alone, clearly; its batch neighbours are delivered
        before = await p.send(topic, "small-before", partition=0)
        big = await p.send(topic, "y" * 5000, partition=0)
        after = await p.send(topic, "small-after", partition=0)
        await p.flush()
        assert isinstance(big.exception(), MessageTooLargeError)
        assert big.exception().code == ErrorCode.MESSAGE_TOO_LARGE
        assert "max.message.bytes" in str(big.exception())
        assert before.exception() is None and after.exception() is None
        # the producer carries on (a failed idempotent batch means a new producer id)
        last = await p.send(topic, "last", partition=0)
        await p.flush()
        assert last.exception() is None
    got = read_back(live, topic, 1, 23)[0]
    assert got == [f"{i:02d}-" + "x" * 600 for i in range(20)] + \
        ["small-before", "small-after", "last"]


def _fake_answers(codes):
    """A stand-in for the broker: answers Produce requests with the next code of `codes`."""
    from types import SimpleNamespace as NS
    offsets = iter(range(0, 1000, 10))

    async def call(node, req, expect_response=True, ticket=None, failures=None):
        code = codes.pop(0)
        t = req.topic_data[0]
        part = t.partition_data[0]
        return NS(responses=[NS(name=t.name, partition_responses=[NS(
            index=part.index, error_code=code, error_message=None,
            base_offset=next(offsets) if code == 0 else -1, log_append_time_ms=-1)])])
    return call


def _three_batches(p):
    futs = []
    for i in range(3):
        fut, _ = p._acc.append(TP, None, bytes([65 + i]) * 90, None, 1, now=trio.current_time())
        futs.append(fut)
    p._sender.incomplete = 3
    batches = [p._acc.drain([TP], 1 << 20)[0] for _ in range(3)]
    p._sender._inflight[0] = 3
    p._sender._tp_inflight[TP] = 3
    return futs, batches


async def test_out_of_order_behind_a_retried_batch_is_retried_in_order():
    p = Producer("127.0.0.1:1", {"batch.size": 100, "retry.backoff.ms": 1})
    p._ids.producer_id, p._ids.producer_epoch = 5, 0
    futs, batches = _three_batches(p)
    # the first batch hits a leader change; the two behind it find a sequence gap
    p._sender._produce_call = _fake_answers([ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                     ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                     ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER])
    for b in batches:
        await p._sender._send_to(0, [b])
    assert not any(f.done() for f in futs)
    assert list(p._acc.batches[TP]) == batches                 # back in sequence order
    assert [b.base_sequence for b in batches] == [0, 1, 2]     # same bytes, same sequences
    assert not p._sender._inflight and not p._sender._tp_inflight
    # resent in order, all acknowledged
    p._sender._produce_call = _fake_answers([0, 0, 0])
    for _ in range(3):
        await p._sender._send_to(0, p._acc.drain([TP], 1 << 20))
    assert [f.result().offset for f in futs] == [0, 10, 20]
    assert not p._ids.need_new_producer_id


async def test_out_of_order_right_after_an_acked_batch_is_an_error():
    p = Producer("127.0.0.1:1", {"batch.size": 100, "retry.backoff.ms": 1})
    p._ids.producer_id, p._ids.producer_epoch = 5, 0
    futs, batches = _three_batches(p)
    p._sender._produce_call = _fake_answers([0, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                     ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER])
    for b in batches:
        await p._sender._send_to(0, [b])
    assert futs[0].result().offset == 0
    assert futs[1].exception().code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER   # a real gap
    assert p._ids.need_new_producer_id
    # the third's predecessor failed: retried, and restamped under the next producer id
    assert not futs[2].done() and list(p._acc.batches[TP]) == [batches[2]]
    p._ids.producer_id, p._ids.next_sequence = 6, {}
    assert decode_batch(p._sender._seal(batches[2])).header.producer_id == 6
    assert batches[2].base_sequence == 0


async def test_a_batch_in_doubt_is_never_restamped_under_a_new_producer_id():
    """A batch whose answer was lost (the broker may have written it) and a batch of another
    partition that then fails for good: the producer takes a new producer id, and the batch in
    doubt fails (in doubt) instead of going out again under the new id and sequence, which the
    broker would take for a new batch — a duplicate (found live: one record at offsets 310
    and 323). A batch that was answered without being written is still restamped and sent."""
    from clients.errors import KafkaConnectionError, KafkaTimeoutError
    other = TopicPartition(TP.topic, TP.partition + 1)
    p = Producer("127.0.0.1:1", {"batch.size": 100, "retry.backoff.ms": 1})
    p._ids.producer_id, p._ids.producer_epoch = 5, 0
    now = trio.current_time()
    lost, _ = p._acc.append(TP, None, b"A" * 90, None, 1, now=now)
    refused, _ = p._acc.append(other, None, b"B" * 90, None, 1, now=now)
    clean, _ = p._acc.append(other, None, b"C" * 90, None, 1, now=now)
    p._sender.incomplete = 3
    a = p._acc.drain([TP], 1 << 20)[0]
    b = p._acc.drain([other], 1 << 20)[0]

    async def connection_lost(*args, **kwargs):
        raise KafkaConnectionError("connection lost with the request written")
    p._sender._produce_call = connection_lost
    for batch in (a, b):
        p._sender._inflight[0] = 1
        p._sender._tp_inflight[batch.tp] = 1
        p._sender._build_produce([batch])              # sealed under producer id 5
        await p._sender._send_to(0, [batch])
    assert a.in_doubt and b.in_doubt and not lost.done()
    # b's resend is refused for good: a sequence gap would follow, so a new producer id
    c = p._acc.drain([other], 1 << 20)[0]               # b, back in its place
    assert c is b
    p._sender._produce_call = _fake_answers([ErrorCode.INVALID_RECORD])
    p._sender._inflight[0] = 1
    p._sender._tp_inflight[other] = 1
    await p._sender._send_to(0, [b])
    assert refused.exception() is not None and p._ids.need_new_producer_id
    p._ids.reset(6, 0)                                  # what InitProducerId answers
    p._sender._fail_in_doubt_batches()                  # the sender loop's next step
    assert isinstance(lost.exception(), KafkaTimeoutError)
    assert "in doubt" in str(lost.exception())
    # never sent: sealed under the new id as usual
    rest = p._acc.drain([other], 1 << 20)
    assert rest and decode_batch(p._sender._seal(rest[0])).header.producer_id == 6
    assert not clean.done() and not p._acc.batches[TP]


async def test_an_error_that_may_follow_an_append_leaves_the_batch_in_doubt():
    """NOT_LEADER_OR_FOLLOWER also answers an acks=all append still waiting when its broker lost
    the leadership (and REQUEST_TIMED_OUT / NOT_ENOUGH_REPLICAS_AFTER_APPEND one not replicated
    in time): the batch may be in the log, replicated to the next leader. After a new producer
    id it fails in doubt instead of going out again restamped (found live, old code: a record at
    offsets 216 and 258). NOT_ENOUGH_REPLICAS, checked before the append, leaves it clean."""
    from clients.errors import KafkaTimeoutError
    p = Producer("127.0.0.1:1", {"batch.size": 100, "retry.backoff.ms": 1})
    p._ids.reset(5, 0)
    others = [TopicPartition(TP.topic, i) for i in (1, 2, 3)]
    futs = [p._acc.append(tp, None, b"A" * 90, None, 1, now=trio.current_time())[0]
            for tp in [TP] + others]
    p._sender.incomplete = 4
    codes = [ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.REQUEST_TIMED_OUT,
             ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.NOT_ENOUGH_REPLICAS]
    p._sender._produce_call = _fake_answers(list(codes))
    batches = []
    for tp in [TP] + others:
        b = p._acc.drain([tp], 1 << 20)[0]
        batches.append(b)
        p._sender._inflight[0] = 1
        p._sender._tp_inflight[tp] = 1
        await p._sender._send_to(0, [b])
    assert [b.in_doubt for b in batches] == [True, True, True, False]
    assert not any(f.done() for f in futs)                  # all four back for a retry
    p._ids.reset(6, 0)                                      # a new producer id, then:
    p._sender._fail_in_doubt_batches()
    for f in futs[:3]:
        assert isinstance(f.exception(), KafkaTimeoutError) and "in doubt" in str(f.exception())
    assert not futs[3].done()
    rest = p._acc.drain([others[2]], 1 << 20)
    assert decode_batch(p._sender._seal(rest[0])).header.producer_id == 6


@pytest.mark.live
async def test_inflight_many_batches_in_order_no_errors(live):
    """Thousands of small batches pipelined to 6 partitions with idempotence: no errors, and
    each partition's offsets follow send order with no gap or duplicate (a later batch taking
    an earlier sequence number showed up here as UNKNOWN_PRODUCER_ID / OUT_OF_ORDER)."""
    topic, parts, total = "inflight-bulk", 6, 30000
    create_topic(live, topic, parts)
    async with Producer(live.bootstrap, {"batch.size": 2048, "linger.ms": 1}) as p:
        futs = []
        for i in range(total):
            f = p.send_nowait(topic, f"{i:06d}", partition=i % parts)
            futs.append(f if f is not None else await p.send(topic, f"{i:06d}",
                                                             partition=i % parts))
            if i % 1000 == 0:
                await trio.sleep(0)
        await p.flush()
    errors = [f.exception() for f in futs if f.exception() is not None]
    assert not errors, (len(errors), errors[:2])
    for part in range(parts):
        offs = [f.result().offset for f in futs[part::parts]]
        assert offs == list(range(offs[0], offs[0] + len(offs)))


@pytest.mark.live
@pytest.mark.slow
async def test_inflight_soak_repeated_leader_kills(live):
    """Soak: 5 in flight, idempotent, a partition leader SIGKILLed and restarted 6 times while
    producing without pause: every record acknowledged, once, in send order."""
    topic, parts = "inflight-soak", 3
    create_topic(live, topic, parts)
    cfg = {"batch.size": 4096, "linger.ms": 2, "retry.backoff.ms": 50,
           "request.timeout.ms": 8000}
    futs = []
    async with Producer(live.bootstrap, cfg) as p:
        await p.cluster.wait_for_topic(topic)
        done = trio.Event()

        async def chaos():
            for round_ in range(6):
                await trio.sleep(1.5)
                await p.cluster.refresh_metadata([topic], force=True)
                victim = p.cluster.leader_for(topic, round_ % parts)
                if victim is None:
                    continue
                await trio.to_thread.run_sync(live.restart_broker, victim)
            done.set()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(chaos)
            i = 0
            while not done.is_set():
                futs.append(await p.send(topic, f"{i:07d}", partition=i % parts))
                i += 1
                if i % 50 == 0:
                    await trio.sleep(0.01)
        with trio.fail_after(180):
            await p.flush()
    errors = [f.exception() for f in futs if f.exception() is not None]
    assert not errors, (len(errors), errors[:3])
    got = read_back(live, topic, parts, len(futs), timeout_s=120)
    for part in range(parts):
        assert got[part] == [f"{i:07d}" for i in range(part, len(futs), parts)]
