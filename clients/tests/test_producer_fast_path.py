"""send_nowait's fast path (clients/producer/): a keyless record encoded straight into the open
batch of its topic's sticky partition. These check it writes exactly what the general encoder
writes, mixed with records that take the long way, keeps record order and batch.size, never
appends to a batch already sent or failed, and that completion settles the batch's futures from
the one outcome stored on the batch (callbacks in record order)."""

from __future__ import annotations

import random

import pytest
import trio
import trio.testing

from clients.cluster import ClusterMetadata, PartitionInfo, TopicInfo, TopicPartition
from clients.producer import Producer
from wire.errors import KafkaError, MessageTooLargeError
from wire.records.batch import build_batch, decode_batch


def _producer(partitions=3, **config) -> Producer:
    cfg = {"acks": 1, "linger.ms": 5, "batch.size": 1 << 16, "buffer.memory": 1 << 24}
    cfg.update(config)
    p = Producer("127.0.0.1:1", cfg)
    parts = {i: PartitionInfo("t", i, 1, 0, (1,), (1,), ()) for i in range(partitions)}
    p.cluster.metadata = ClusterMetadata(topics={"t": TopicInfo("t", None, False, parts)})
    return p


def _batches(p: Producer):
    return [b for dq in p._acc.batches.values() for b in dq]


async def test_fast_path_writes_what_the_general_encoder_writes():
    p = _producer(partitions=1)
    rng = random.Random(7)
    want = []
    ts0 = 1_700_000_000_000
    for i in range(400):
        # value lengths across the 1/2-byte varint boundary, timestamps forward and back
        # (a record older than the batch's first takes the long way), keyed and headers too
        v = b"v" * rng.choice([0, 1, 63, 64, 65, 100, 700])
        ts = ts0 + rng.choice([0, 1, 63, 64, 5000, 9000, -2])
        kind = i % 9
        if kind == 4:
            fut = p.send_nowait("t", v, key=b"k%d" % i, partition=0, timestamp_ms=ts)
            want.append((b"k%d" % i, v, [], ts))
        elif kind == 7:
            fut = p.send_nowait("t", v, headers=[("h", b"x")], timestamp_ms=ts)
            want.append((None, v, [("h", b"x")], ts))
        elif kind == 8:
            fut = p.send_nowait("t", None, timestamp_ms=ts)
            want.append((None, None, [], ts))
        else:
            fut = p.send_nowait("t", v, timestamp_ms=ts)
            want.append((None, v, [], ts))
        assert fut is not None and fut.partition == 0 and fut.timestamp == ts
    (batch,) = _batches(p)
    data = p._sender._seal(batch)
    assert data == build_batch(want)
    d = decode_batch(data)
    assert [(r.key, r.value, r.headers, r.timestamp) for r in d.records] == want


async def test_fast_path_keeps_batch_size_sticks_and_orders_callbacks():
    p = _producer(partitions=3, **{"batch.size": 2000})
    seen = []
    futs = [p.send_nowait("t", b"%05d" % i + b"x" * 95,
                          on_delivery=lambda m, e, i=i: seen.append((i, m.partition, m.offset)))
            for i in range(100)]
    batches = _batches(p)
    assert len(batches) > 5
    for b in batches:
        assert b.size <= 2000 and b.record_count > 1
    # sticky: consecutive records share a batch until it is full, then the next one starts
    assert sum(1 for a, b in zip(futs, futs[1:]) if a._batch is not b._batch) == len(batches) - 1
    assert not futs[0].done()
    for n, b in enumerate(sorted(batches, key=lambda b: b.order)):
        p._acc.drain([b.tp], 1 << 20)
        p._sender._seal(b)
        p._sender._complete_batch(b, 1000 * n, -1)
    assert [i for i, _, _ in seen] == list(range(100))
    assert p._sender.incomplete == 0
    for i, f in enumerate(futs):
        m = f.result()
        assert (m.partition, m.offset) == seen[i][1:]
        assert m.offset == 1000 * (m.offset // 1000) + f._index
        assert f.exception() is None


async def test_no_append_to_a_sent_or_failed_batch():
    p = _producer(partitions=1)
    first = p.send_nowait("t", b"a")
    (b1,) = _batches(p)
    p._acc.drain([b1.tp], 1 << 20)
    p._sender._seal(b1)                               # sent: the next record starts a new batch
    second = p.send_nowait("t", b"b")
    assert second._batch is not b1 and first._batch is b1 and b1.record_count == 1
    failed = []
    second.add_callback(lambda m, e: failed.append(e))
    for b in p._acc.all_batches():
        p._sender._fail_batch(b, KafkaError("gone"))
    assert isinstance(failed[0], KafkaError) and second.done()
    with pytest.raises(KafkaError):
        second.result()
    third = p.send_nowait("t", b"c")
    assert third._batch is not second._batch and not third.done()
    assert decode_batch(p._sender._seal(third._batch)).records[0].value == b"c"


async def test_late_callbacks_and_several_per_record():
    p = _producer(partitions=1)
    futs = [p.send_nowait("t", b"x") for _ in range(4)]
    order = []
    futs[2].add_callback(lambda m, e: order.append(("a", m.offset)))
    futs[0].add_callback(lambda m, e: order.append(("b", m.offset)))
    futs[2].add_callback(lambda m, e: order.append(("c", m.offset)))
    b = futs[0]._batch
    p._acc.drain([b.tp], 1 << 20)
    p._sender._seal(b)
    p._sender._complete_batch(b, 10, 555)
    # record order first, then each record's own callbacks in the order they were added
    assert order == [("b", 10), ("a", 12), ("c", 12)]
    assert futs[3].result() == (("t", 0, 13, 555))          # log-append time from the broker
    futs[1].add_callback(lambda m, e: order.append(("late", m.offset)))
    assert order[-1] == ("late", 11)
    assert await futs[1] == futs[1].result()


@pytest.mark.parametrize("size", [0, 1, 8000, 8001, 20_000])
async def test_value_sizes_around_the_fast_path_limit(size):
    p = _producer(partitions=1, **{"batch.size": 1 << 15})
    p.send_nowait("t", b"a")
    fut = p.send_nowait("t", b"z" * size)
    recs = [r for b in _batches(p) for r in decode_batch(p._sender._seal(b)).records]
    assert [r.value for r in recs] == [b"a", b"z" * size] and fut.partition == 0
    assert len(_batches(p)) == 1      # the long way appends to the same open batch


async def test_fast_path_refuses_what_send_nowait_refuses():
    p = _producer(partitions=1)
    p.send_nowait("t", b"a")
    assert p.send_nowait("other", b"a") is None               # no metadata for it
    p._closing = True
    assert p.send_nowait("t", b"a") is None
    p._closing = False
    small = _producer(partitions=1, **{"max.request.size": 600})
    small.send_nowait("t", b"a")
    assert small.send_nowait("t", b"x" * 700) is None         # larger than max.request.size
    assert TopicPartition("t", 0) in small._acc.batches


async def test_batch_holds_no_future_and_waiters_follow_a_split():
    import sys

    p = _producer(partitions=1)
    futs = [p.send_nowait("t", b"v%d" % i) for i in range(4)]
    # nothing but our list refers to a future: one the caller drops is freed at once, so a
    # producer with many records in flight leaves no per-record object to the garbage collector
    for f in futs:
        assert sys.getrefcount(f) == 3          # the list, the loop variable, the argument
    b = futs[0]._batch
    got = []

    async def wait(f):
        got.append((await f).offset)
    async with trio.open_nursery() as nursery:
        for f in (futs[0], futs[3]):
            nursery.start_soon(wait, f)
        await trio.testing.wait_all_tasks_blocked()
        p._acc.drain([b.tp], 1 << 20)
        p._sender._seal(b)
        p._sender._split(b)                              # as after MESSAGE_TOO_LARGE
        await trio.testing.wait_all_tasks_blocked()
        assert got == [] and not futs[3].done()
        first, second = p._acc.batches[b.tp]
        p._sender._complete_batch(second, 70, -1)
        await trio.testing.wait_all_tasks_blocked()
        assert got == [71] and not futs[0].done()
        p._sender._complete_batch(first, 50, -1)
    assert sorted(got) == [50, 71] and p._sender.incomplete == 0


async def test_async_send_takes_the_fast_path_and_still_waits_or_raises():
    p = _producer(partitions=1, **{"max.request.size": 600})
    seen = []
    first = await p.send("t", b"a")
    second = await p.send("t", b"b", on_delivery=lambda m, e: seen.append(m.offset))
    assert second._batch is first._batch and second._index == 1
    with pytest.raises(MessageTooLargeError):
        await p.send("t", b"x" * 700)
    b = first._batch
    p._acc.drain([b.tp], 1 << 20)
    p._sender._seal(b)
    p._sender._complete_batch(b, 40, -1)
    assert seen == [41] and [r.value for r in decode_batch(b.data).records] == [b"a", b"b"]
