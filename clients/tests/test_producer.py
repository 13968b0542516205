"""Producer: accumulator unit checks, then delivery against one live cluster."""

from __future__ import annotations

import collections
import uuid

import pytest
import trio

from clients.cluster import TopicPartition
from clients.config import ConfigError
from clients.producer.partitioner import partition_for_key
from clients.producer import Producer, RecordAccumulator
from clients.producer.accumulator import BATCH_HEADER_SIZE, record_size
from clients.errors import KafkaTimeoutError, UnknownTopicError
from partition_server.testing import LiveCluster
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS
from wire.records.batch import decode_batch, iter_batches

TP = TopicPartition("t", 0)


def test_accumulator_batches_and_readiness():
    acc = RecordAccumulator(batch_size=1000, linger_s=0.01, buffer_memory=10_000, compression=0)
    fut, new = acc.append(TP, None, b"x" * 100, None, 1, now=0.0)
    assert new and fut is not None
    fut2, new2 = acc.append(TP, None, b"x" * 100, None, 1, now=0.0)
    assert not new2
    leader = {TP: 7}.get
    ready, next_check, unknown = acc.ready(0.001, leader, flushing=False)
    assert ready == {} and next_check == pytest.approx(0.01) and not unknown
    assert acc.ready(0.02, leader, flushing=False)[0] == {7: [TP]}        # linger passed
    assert acc.ready(0.001, leader, flushing=True)[0] == {7: [TP]}        # flush: no waiting
    assert acc.ready(0.02, {}.get, flushing=False)[2]                     # no leader known
    for _ in range(10):                                                   # fill: a second batch
        acc.append(TP, None, b"x" * 100, None, 1, now=0.0)
    assert len(acc.batches[TP]) == 2
    assert acc.ready(0.0, leader, flushing=False)[0] == {7: [TP]}         # full: ready at once
    drained = acc.drain([TP], max_bytes=1 << 20)
    # a record is ~106 bytes encoded; a new one (estimated 121) must still fit in 1000
    assert len(drained) == 1 and drained[0].record_count == 8
    # memory: charged with what the batches hold (each record, plus a header per batch), not
    # batch.size per batch; refused beyond buffer.memory, freed on release
    assert acc.used == sum(b.alloc for dq in acc.batches.values() for b in dq) + drained[0].alloc
    assert drained[0].alloc == 8 * record_size(None, b"x" * 100, None) + BATCH_HEADER_SIZE
    small = RecordAccumulator(batch_size=1000, linger_s=0, buffer_memory=300, compression=0)
    for q in range(3):                # 1,000 B batches, but three first records fit in 300 B
        assert small.append(TopicPartition("t", q), None, b"x" * 10, None, 1, now=0.0)[0]
    used = small.used
    assert used == 3 * (record_size(None, b"x" * 10, None) + BATCH_HEADER_SIZE)
    assert small.append(TP, None, b"x" * 100, None, 1, now=0.0) == (None, False)   # full
    assert small.used == used                                                      # unchanged
    small.release(small.drain([TP], 1 << 20)[0])            # TP is partition 0: one freed
    assert small.used == 2 * (record_size(None, b"x" * 10, None) + BATCH_HEADER_SIZE)
    assert small.append(TP, None, b"x" * 10, None, 1, now=0.0)[0] is not None
    empty = RecordAccumulator(batch_size=1000, linger_s=0, buffer_memory=10, compression=0)
    assert empty.append(TP, None, b"x" * 100, None, 1, now=0.0)[0] is not None     # progress


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_batch_encoding_round_trips(codec):
    """The producer's own batch encoder against the wire decoder: keys, values, headers,
    nulls, timestamps before the first record, varint boundaries, every codec."""
    import random

    from clients.producer import ProducerBatch
    from wire.records.batch import decode_batch
    rng = random.Random(codec)
    b = ProducerBatch(TP, codec, 0.0, 100)
    want = []
    for i in range(300):
        k = None if i % 3 == 0 else rng.randbytes(rng.choice([0, 5, 63, 64, 70, 200]))
        v = None if i % 7 == 0 else b"x" * rng.choice([0, 10, 63, 64, 65, 1000])
        h = [("a", b"1"), ("bb", None)] if i % 5 == 0 else None
        ts = 1_700_000_000_000 + rng.choice([0, 5, 63, 64, 1000, -3, 100_000])
        b.append(k, v, h, ts)
        want.append((k, v, list(h or []), ts))
    d = decode_batch(b.seal(5, 1, 10))
    assert [(r.key, r.value, r.headers, r.timestamp) for r in d.records] == want
    assert (d.header.producer_id, d.header.producer_epoch, d.header.base_sequence) == (5, 1, 10)
    assert d.header.records_count == 300 and b.seal(0, 0, 0) is b.data     # sealed once


def test_retried_batch_stays_first():
    acc = RecordAccumulator(batch_size=100, linger_s=0, buffer_memory=10_000, compression=0)
    acc.append(TP, None, b"a" * 60, None, 1, now=0.0)
    acc.append(TP, None, b"b" * 60, None, 1, now=0.0)
    first = acc.drain([TP], 1 << 20)[0]
    first.seal(-1, -1, -1)
    first.retry_at = 5.0
    acc.reenqueue(first)
    ready, next_check, _ = acc.ready(1.0, {TP: 1}.get, flushing=True)
    assert ready == {} and next_check == 5.0       # the second batch may not overtake it
    assert acc.drain([TP], 1 << 20)[0] is first


def test_config_rules():
    with pytest.raises(ConfigError, match="acks=all"):
        Producer("127.0.0.1:1", {"enable.idempotence": "true", "acks": "1"})
    assert not Producer("127.0.0.1:1", {"acks": "1"}).idempotent       # default yields to acks
    assert Producer("127.0.0.1:1").idempotent
    with pytest.raises(ConfigError, match="linger.ms"):
        Producer("127.0.0.1:1", {"linger.ms": "soon"})


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    c = LiveCluster(tmp_path_factory.mktemp("cluster"))
    c.start()
    yield c
    c.stop()


async def _create(p: Producer, name: str, partitions: int, rf: int = 3, configs=()) -> None:
    ct = REQUESTS[ApiKey.CREATE_TOPICS]
    resp = await p.cluster.call_controller(ct(topics=[ct.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=rf,
        configs=[ct.CreatableTopicConfig(name=k, value=v) for k, v in configs])],
        timeout_ms=10000))
    assert resp.topics[0].error_code == 0, resp.topics[0]
    await p.cluster.wait_for_topic(name)


async def _read_all(p: Producer, topic: str, partitions: int) -> dict[int, list]:
    """Every record of each partition, read from its leader with plain Fetch requests."""
    fr = REQUESTS[ApiKey.FETCH]
    out = {}
    await p.cluster.refresh_metadata([topic], force=True)
    for part in range(partitions):
        leader = p.cluster.leader_for(topic, part)
        records, offset = [], 0
        while True:
            resp = await p.cluster.call(leader, fr(
                replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=8 << 20,
                topics=[fr.FetchTopic(topic=topic, partitions=[fr.FetchPartition(
                    partition=part, fetch_offset=offset, partition_max_bytes=8 << 20)])]),
                max_version=12)
            data = resp.responses[0].partitions[0]
            assert data.error_code == 0
            got = [r for h in iter_batches(bytes(data.records or b""))
                   for r in decode_batch(h.bytes()).records]
            if not got:
                break
            records += got
            offset = got[-1].offset + 1
        out[part] = records
    return out


@pytest.mark.live
@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
async def test_live_ordered_complete_delivery_per_codec(live, codec):
    topic = f"p-{codec}-{uuid.uuid4().hex[:6]}"
    n = 2000
    async with Producer(live.bootstrap, {"compression.type": codec, "linger.ms": 5,
                                         "batch.size": 8192}) as p:
        assert p.idempotent
        await _create(p, topic, 3)
        futs = [await p.send(topic, f"value-{i}".encode(), key=f"k{i % 50}".encode(),
                             headers=[("h", b"v")]) for i in range(n)]
        await p.flush()
        metas = [f.result() for f in futs]
        # keys land where Kafka's Java client would put them
        for i, m in enumerate(metas):
            assert m.partition == partition_for_key(f"k{i % 50}".encode(), 3)
        # offsets: per partition 0..count-1, in send order
        per = collections.defaultdict(list)
        for i, m in enumerate(metas):
            per[m.partition].append((m.offset, i))
        for part, pairs in per.items():
            assert [o for o, _ in pairs] == list(range(len(pairs)))
        logs = await _read_all(p, topic, 3)
        for part, pairs in per.items():
            assert [r.value for r in logs[part]] == [f"value-{i}".encode() for _, i in pairs]
            assert all(r.headers == [("h", b"v")] for r in logs[part])


@pytest.mark.live
async def test_live_keyless_sticky_acks_and_errors(live):
    topic = f"p-misc-{uuid.uuid4().hex[:6]}"
    async with Producer(live.bootstrap, {"acks": "1", "batch.size": 2000, "linger.ms": 50}) as p:
        await _create(p, topic, 4)
        futs = [await p.send(topic, b"x" * 90) for _ in range(200)]
        await p.flush()
        parts = [f.result().partition for f in futs]
        # sticky: consecutive records share a partition until a batch fills (~20 a batch)
        switches = sum(1 for a, b in zip(parts, parts[1:]) if a != b)
        assert 0 < switches <= 200 // 15
        # explicit partition, callbacks, acks=1
        seen = []
        fut = await p.send(topic, b"cb", partition=3, on_delivery=lambda m, e: seen.append((m, e)))
        meta = await fut
        assert meta.partition == 3 and seen == [(meta, None)]
        with pytest.raises(UnknownTopicError):
            p._max_block_s = 1.0
            await p.send("no-such-topic-here", b"x")
    async with Producer(live.bootstrap, {"acks": "0"}) as p0:
        futs = [await p0.send(topic, b"fire-and-forget", partition=0) for _ in range(10)]
        await p0.flush()
        assert all(f.result().offset == -1 for f in futs)
    async with Producer(live.bootstrap) as p:
        logs = await _read_all(p, topic, 4)
        assert sum(len(v) for v in logs.values()) == 211


@pytest.mark.live
async def test_live_buffer_backpressure(live):
    topic = f"p-bp-{uuid.uuid4().hex[:6]}"
    # a buffer of two batches: sends must wait for the sender, and all still arrive in order
    async with Producer(live.bootstrap, {"batch.size": 4096, "buffer.memory": 8192,
                                         "linger.ms": 0}) as p:
        await _create(p, topic, 1)
        futs = [await p.send(topic, str(i).encode() * 10, partition=0) for i in range(3000)]
        await p.flush()
        assert [f.result().offset for f in futs] == list(range(3000))
        assert p._acc.used == 0
    async with Producer(live.bootstrap, {"batch.size": 4096, "buffer.memory": 4096,
                                         "max.block.ms": 300, "linger.ms": 60_000}) as p:
        # one partition without a leader to drain to: the buffer cannot free -> timeout
        p._acc.ready = lambda now, leader_for, flushing: ({}, now + 1, False)
        with pytest.raises(KafkaTimeoutError, match="buffer.memory"):
            for i in range(1000):
                await p.send(topic, b"y" * 100, partition=0)
        await p.aclose(timeout_s=0)


@pytest.mark.live
async def test_live_leader_killed_idempotent_no_loss_no_dup(live):
    topic = f"p-fail-{uuid.uuid4().hex[:6]}"
    async with Producer(live.bootstrap, {"linger.ms": 2, "retry.backoff.ms": 50}) as p:
        await _create(p, topic, 1, configs=[("min.insync.replicas", "2")])
        leader = p.cluster.leader_for(topic, 0)
        futs = []
        for i in range(3000):
            futs.append(await p.send(topic, str(i).encode(), partition=0))
            if i == 1000:
                live.kill(f"broker-{leader}")
            if i % 100 == 0:
                await trio.sleep(0.01)
        try:
            with trio.fail_after(90):
                await p.flush()
            assert all(f.exception() is None for f in futs), \
                next(f.exception() for f in futs if f.exception())
            assert p.cluster.leader_for(topic, 0) != leader
            logs = await _read_all(p, topic, 1)
            assert [r.value for r in logs[0]] == [str(i).encode() for i in range(3000)]
            assert [f.result().offset for f in futs] == list(range(3000))
        finally:
            live.restart_broker(leader)


@pytest.mark.live
def test_live_sync_facade_from_threads(live):
    """The blocking facade: several threads share one SyncProducer; SyncAdmin reads back."""
    import threading

    from clients.sync import SyncAdmin, SyncProducer
    from clients.admin import NewTopic, LATEST
    topic = f"p-sync-{uuid.uuid4().hex[:6]}"
    with SyncAdmin(live.bootstrap) as admin:
        assert admin.create_topics([NewTopic(topic, 2, 3)]) == {topic: None}
        with SyncProducer(live.bootstrap, {"linger.ms": 2, "max.block.ms": 3000},
                          max_queued=1000) as p:
            futs: list = []
            calls = []

            def work(t):
                for i in range(2000):
                    futs.append(p.send(topic, f"{t}-{i}".encode(), key=str(t).encode(),
                                       on_delivery=lambda m, e: calls.append(e)))
            threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            p.flush()
            assert all(f.done() and f.exception() is None for f in futs)
            assert len(calls) == 8000 and not any(calls)
            unknown = p.send("no-such-topic-sync", b"x")
            with pytest.raises(UnknownTopicError):
                unknown.result(timeout=30)
        ends = admin.list_offsets({TopicPartition(topic, 0): LATEST,
                                   TopicPartition(topic, 1): LATEST})
        assert sum(o for o, _ in ends.values()) == 8000
        assert topic in admin.list_topics()


@pytest.mark.live
async def test_live_failed_batch_then_new_producer_id(live):
    """A batch the broker refuses for good (too large for the topic) fails its futures; the
    idempotent producer then takes a new producer id so later batches are not refused for a
    sequence gap."""
    from wire.errors import KafkaError as KE
    topic = f"p-big-{uuid.uuid4().hex[:6]}"
    async with Producer(live.bootstrap, {"linger.ms": 0}) as p:
        await _create(p, topic, 1, configs=[("max.message.bytes", "2000")])
        first = await (await p.send(topic, b"small-1", partition=0))
        pid = p._ids.producer_id
        big = await p.send(topic, b"x" * 5000, partition=0)
        with pytest.raises(KE) as info:
            await big
        assert "MESSAGE_TOO_LARGE" in str(info.value) or "RECORD_LIST_TOO_LARGE" in str(info.value)
        later = [await p.send(topic, b"small-%d" % i, partition=0) for i in range(2, 6)]
        await p.flush()
        assert [f.exception() for f in later] == [None] * 4
        assert [f.result().offset for f in later] == list(range(first.offset + 1,
                                                                 first.offset + 5))
        assert p._ids.producer_id != pid
