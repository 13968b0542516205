"""SyncProducer (clients/producer/sync.py): the blocking facade's handles, order, callbacks, errors,
flush, close and back-pressure, against one live cluster (3 controllers + 3 brokers)."""

from __future__ import annotations

import concurrent.futures
import signal
import threading
import time
import uuid

import pytest

from clients.admin import NewTopic
from clients.consumer.sync import SyncConsumer
from clients.errors import KafkaTimeoutError, UnknownTopicError
from clients.sync import SendFuture, SyncAdmin, SyncProducer
from partition_server.testing import LiveCluster
from wire.errors import ErrorCode, KafkaError

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    c = LiveCluster(tmp_path_factory.mktemp("cluster"))
    c.start()
    yield c
    c.stop()


def _topic(live, prefix: str, partitions: int, rf: int = 3) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    with SyncAdmin(live.bootstrap) as admin:
        assert admin.create_topics([NewTopic(name, partitions, rf)]) == {name: None}
    return name


def _read(live, topic: str, partitions: int, n: int) -> dict[int, list]:
    out: dict[int, list] = {p: [] for p in range(partitions)}
    with SyncConsumer(live.bootstrap, {"auto.offset.reset": "earliest",
                                        "enable.auto.commit": False}) as c:
        c.assign([(topic, p) for p in range(partitions)])
        deadline = time.monotonic() + 30
        got = 0
        while got < n and time.monotonic() < deadline:
            for r in c.poll(500):
                out[r.partition].append((r.offset, r.key, r.value))
                got += 1
    return out


def test_order_results_and_callbacks(live):
    """Keyed records from one thread: each partition gets them in send order, result() gives
    each record's offset, on_delivery runs once per record that has one, in offset order per
    partition, and records without a callback are delivered as well."""
    topic = _topic(live, "sync-order", 3)
    calls: list = []
    with SyncProducer(live.bootstrap, {"linger.ms": 2}) as p:
        futs = []
        for i in range(3000):
            cb = (lambda m, e, i=i: calls.append((i, m, e))) if i % 3 else None
            futs.append(p.send(topic, b"v%d" % i, key=b"k%d" % (i % 7), on_delivery=cb))
        assert all(isinstance(f, SendFuture) for f in futs)
        p.flush()
        assert all(f.done() for f in futs)
        metas = [f.result() for f in futs]
    assert all(f.exception() is None for f in futs)
    # a record sent without on_delivery leaves nothing to call in its batch
    d = futs[0]._out
    assert d._batch.callbacks[d._index] is None
    by_part: dict[int, list] = {}
    for i, m in enumerate(metas):
        assert m.topic == topic and m.timestamp > 0
        by_part.setdefault(m.partition, []).append((m.offset, i))
    for part, pairs in by_part.items():
        # offsets 0.. in send order
        assert [o for o, _ in pairs] == list(range(len(pairs)))
        assert [i for _, i in pairs] == sorted(i for _, i in pairs)
    assert len(calls) == 2000 and all(e is None for _, _, e in calls)
    assert all(m == metas[i] for i, m, _ in calls)
    for part in by_part:
        offs = [m.offset for _, m, _ in calls if m.partition == part]
        assert offs == sorted(offs)
    log = _read(live, topic, 3, 3000)
    for part, pairs in by_part.items():
        assert [v for _, _, v in log[part]] == [b"v%d" % i for _, i in pairs]


def test_threads_sharing_one_producer_keep_their_own_order(live):
    """Four threads, one key each, a small queue (so they block and wake in turn): each
    thread's records land in its key's partition in the thread's send order."""
    topic = _topic(live, "sync-threads", 4)
    with SyncProducer(live.bootstrap, {"linger.ms": 1}, max_queued=300) as p:
        futs: dict[int, list] = {}

        def work(t):
            futs[t] = [p.send(topic, b"%d-%d" % (t, i), key=b"key-%d" % t)
                       for i in range(1500)]
        threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        p.flush()
        for t, fs in futs.items():
            metas = [f.result() for f in fs]
            assert len({m.partition for m in metas}) == 1
            offsets = [m.offset for m in metas]
            assert offsets == sorted(offsets) and len(set(offsets)) == 1500


def test_handle_future_api_before_flush(live):
    """Waiting on a record not yet acknowledged: result(timeout), exception(),
    add_done_callback (called on the loop thread once done, at once when already done),
    future() for concurrent.futures.wait; cancel() is refused. Inside a delivery callback the
    record's own handle reads its result without blocking."""
    topic = _topic(live, "sync-handle", 2)
    seen_in_cb: list = []
    done_cbs: list = []
    with SyncProducer(live.bootstrap, {"linger.ms": 50}) as p:
        holder: list = []

        def cb(meta, exc):
            seen_in_cb.append((holder[0].done(), holder[0].result(), threading.get_ident()))
        holder.append(p.send(topic, b"first", partition=1, on_delivery=cb))
        h = holder[0]
        assert not h.cancel() and not h.cancelled()
        h.add_done_callback(lambda f: done_cbs.append((f, threading.get_ident())))
        meta = h.result(timeout=30)
        assert (meta.partition, meta.offset) == (1, 0)
        assert h.exception(timeout=1) is None and h.done() and not h.running()
        more = [p.send(topic, b"m%d" % i, partition=0) for i in range(20)]
        done, not_done = concurrent.futures.wait([f.future() for f in more], timeout=30)
        assert not not_done and [f.result().offset for f in done] != []
        assert [f.result().offset for f in more] == list(range(20))
        late: list = []
        h.add_done_callback(late.append)       # already done: runs here and now
        assert late == [h]
        deadline = time.monotonic() + 10
        while not done_cbs and time.monotonic() < deadline:
            time.sleep(0.01)
    assert done_cbs and done_cbs[0][0] is h and done_cbs[0][1] == p._loop_ident
    assert len(seen_in_cb) == 1 and seen_in_cb[0][0] and seen_in_cb[0][1] == meta
    assert seen_in_cb[0][2] == p._loop_ident


def test_errors_surface_on_the_handle_and_order_holds(live):
    """An unknown topic fails its record with UnknownTopicError after max.block.ms (the
    records queued behind it wait, then go, in order); a partition that does not exist fails
    at once with UNKNOWN_TOPIC_OR_PARTITION; neither reaches on_delivery (as before)."""
    topic = _topic(live, "sync-err", 1)
    calls: list = []
    cb = (lambda m, e: calls.append(e))
    with SyncProducer(live.bootstrap, {"linger.ms": 1, "max.block.ms": 1500}) as p:
        first = [p.send(topic, b"a%d" % i, on_delivery=cb) for i in range(10)]
        unknown = p.send(f"no-such-{uuid.uuid4().hex[:6]}", b"x", on_delivery=cb)
        after = [p.send(topic, b"b%d" % i, on_delivery=cb) for i in range(10)]
        bad_part = p.send(topic, b"y", partition=5, on_delivery=cb)
        with pytest.raises(UnknownTopicError):
            unknown.result(timeout=30)
        with pytest.raises(KafkaError) as info:
            bad_part.result(timeout=30)
        assert info.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert isinstance(bad_part.exception(), KafkaError)
        p.flush()
        offsets = [f.result().offset for f in first + after]
    assert offsets == list(range(20))
    assert len(calls) == 20 and not any(calls)


def test_close_with_records_pending_delivers_them(live):
    topic = _topic(live, "sync-close", 2)
    p = SyncProducer(live.bootstrap, {"linger.ms": 20})
    futs = [p.send(topic, b"c%d" % i) for i in range(5000)]
    p.close()
    assert all(f.done() and f.exception() is None for f in futs)
    assert sorted((f.result().partition, f.result().offset) for f in futs) == sorted(
        (part, o) for part in (0, 1)
        for o in range(sum(1 for f in futs if f.result().partition == part)))
    with pytest.raises(RuntimeError):
        p.send(topic, b"after close")
    p.close()                                  # twice is fine


def test_back_pressure_bounds_the_queue_then_delivers(live):
    """The partition's leader is paused (SIGSTOP): nothing is acknowledged, so a caller that
    keeps sending blocks once buffer.memory and the queue are full and gets KafkaTimeoutError
    after max.block.ms; what it queued stays bounded. A record `send` accepted waits for
    buffer.memory up to delivery.timeout.ms, as in Kafka's accumulator (it used to fail after
    max.block.ms: one more record for every 1.5 s the pause lasted, 3 or 4 by the machine's
    load). Resumed, every accepted record is delivered, in order."""
    topic = _topic(live, "sync-bp", 1, rf=1)
    cfg = {"acks": "1", "linger.ms": 1, "batch.size": 16384, "buffer.memory": 64 * 1024,
           "max.block.ms": 1500, "request.timeout.ms": 20000}
    with SyncProducer(live.bootstrap, cfg, max_queued=500) as p:
        p.send(topic, b"warm-up").result(timeout=30)
        leader = p._producer.cluster.leader_for(topic, 0)
        live.kill(f"broker-{leader}", signal.SIGSTOP)
        accepted, peak, t_block = [], 0, None
        try:
            start = time.monotonic()
            with pytest.raises(KafkaTimeoutError):
                for i in range(1_000_000):
                    t0 = time.monotonic()
                    accepted.append(p.send(topic, b"%06d" % i + b"x" * 994))
                    peak = max(peak, p._pending)
                    if time.monotonic() - start > 20:
                        break
            t_block = time.monotonic() - t0
            used = p._producer._acc.used
        finally:
            live.kill(f"broker-{leader}", signal.SIGCONT)
        # bounded: the queue holds buffer.memory worth of keys + values (65 records of 1,000
        # B; max_queued=500 would allow more), the accumulator buffer.memory (64 at most),
        # and one record waits between the two
        assert peak <= 66 and used <= 64 * 1024
        assert 64 <= len(accepted) and len(accepted) * 1000 <= 2 * 64 * 1024 + 2000
        assert 1.3 <= t_block < 10
        p.flush(60)
        failed = [f.exception() for f in accepted if f.exception() is not None]
        offsets = [f.result().offset for f in accepted if f.exception() is None]
    assert failed == []
    assert offsets == list(range(1, len(accepted) + 1))


def test_close_while_broker_paused_fails_records_instead_of_hanging(live):
    topic = _topic(live, "sync-close-stuck", 1, rf=1)
    p = SyncProducer(live.bootstrap, {"acks": "1", "linger.ms": 1,
                                      "request.timeout.ms": 20000})
    p.send(topic, b"warm-up").result(timeout=30)
    leader = p._producer.cluster.leader_for(topic, 0)
    live.kill(f"broker-{leader}", signal.SIGSTOP)
    try:
        futs = [p.send(topic, b"s%d" % i) for i in range(200)]
        with pytest.raises(KafkaTimeoutError):
            p.close(timeout_s=0.5)
    finally:
        live.kill(f"broker-{leader}", signal.SIGCONT)
    for f in futs:
        assert isinstance(f.exception(timeout=5), KafkaTimeoutError)
        with pytest.raises(KafkaTimeoutError):
            f.result(timeout=5)


def test_transaction_commit_and_abort_settle_the_handles(live):
    """Records queued by send() join the transaction before commit/abort; once commit returns
    every handle holds its offset, read without waiting; after an abort every handle is
    settled too (written then aborted, or failed) and none hangs. read_committed sees only
    the committed ones."""
    topic = _topic(live, "sync-txn", 2)
    tid = f"sync-txn-{uuid.uuid4().hex[:6]}"
    with SyncProducer(live.bootstrap, {"transactional.id": tid, "linger.ms": 5,
                                       "transaction.timeout.ms": 20000}) as p:
        p.init_transactions()
        p.begin_transaction()
        committed = [p.send(topic, b"c%d" % i, partition=i % 2) for i in range(200)]
        p.commit_transaction()
        assert all(h._seq <= p._settled for h in committed)     # read directly, no Future
        metas = [h.result() for h in committed]
        assert all(h._cf is None for h in committed)
        assert sorted(m.offset for m in metas if m.partition == 0) == list(range(100))
        p.begin_transaction()
        aborted = [p.send(topic, b"a%d" % i, partition=i % 2) for i in range(50)]
        p.abort_transaction()
        assert all(h.done() for h in aborted)
        assert all(h.exception() is None or isinstance(h.exception(), KafkaError)
                   for h in aborted)
    with SyncConsumer(live.bootstrap, {"auto.offset.reset": "earliest",
                                        "enable.auto.commit": False,
                                        "isolation.level": "read_committed"}) as c:
        c.assign([(topic, 0), (topic, 1)])
        values, deadline = [], time.monotonic() + 20
        while len(values) < 200 and time.monotonic() < deadline:
            values += [r.value for r in c.poll(500)]
        time.sleep(0.5)
        values += [r.value for r in c.poll(200)]
    assert sorted(values) == sorted(b"c%d" % i for i in range(200))
