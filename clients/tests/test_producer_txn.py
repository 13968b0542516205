"""Our producer's transactional API (issue #11): the pure TransactionManager, then a live
cluster: atomic commit across partitions (read by confluent-kafka and by our consumer with
read_committed), aborts visible only to read_uncommitted, zombie fencing, consume-transform-
produce with send_offsets_to_transaction, a failed record making the transaction abortable,
misuse errors, and interop with a confluent-kafka transactional producer on the same topic."""

from __future__ import annotations

import time
import uuid

import pytest
import trio
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import KafkaError as CKError
from confluent_kafka import KafkaException
from confluent_kafka import Producer as CKProducer
from confluent_kafka import TopicPartition as CKTP
from confluent_kafka.admin import AdminClient, NewTopic

from clients.cluster import TopicPartition
from clients.config import ConfigError
from clients.producer import Producer
from clients.sync import SyncProducer
from clients.producer.transaction_manager import (State, TransactionAbortedError,
                                                  TransactionManager, TransactionStateError)
from partition_server.testing import LiveCluster
from wire.errors import (ErrorCode, InvalidProducerEpochError, KafkaError,
                         ProducerFencedError)

TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)


# -- pure state machine -------------------------------------------------------------------------

def test_manager_happy_path_and_partitions():
    m = TransactionManager("tx", 60000)
    with pytest.raises(TransactionStateError, match="before init_transactions"):
        m.begin()
    with pytest.raises(TransactionStateError, match="outside a transaction"):
        m.check_can_send()
    m.start_init()
    m.init_done()
    assert m.state is State.READY
    with pytest.raises(TransactionStateError, match="no transaction begun"):
        m.begin_commit()
    with pytest.raises(TransactionStateError, match="no transaction begun"):
        m.begin_abort()
    m.begin()
    with pytest.raises(TransactionStateError, match="must be committed or aborted"):
        m.begin()
    m.check_can_send()
    assert not m.started
    m.maybe_add_partition(TP0)
    m.maybe_add_partition(TP1)
    assert m.take_pending() == [TP0, TP1]
    m.maybe_add_partition(TP0)                     # being added: not pending again
    assert m.take_pending() == [] and m.started
    m.partitions_retry([TP1])                      # a retriable failure puts it back
    m.partitions_added([TP0])
    assert m.is_added(TP0) and not m.is_added(TP1)
    assert m.take_pending() == [TP1]
    m.partitions_added([TP1])
    m.begin_commit()
    m.end_done()
    assert m.state is State.READY and not m.added and not m.started


def test_manager_abortable_and_fatal():
    m = TransactionManager("tx", 60000)
    m.start_init()
    m.init_done()
    m.begin()
    first = KafkaError("boom", ErrorCode.MESSAGE_TOO_LARGE)
    m.set_abortable(first)
    m.set_abortable(KafkaError("later", ErrorCode.REQUEST_TIMED_OUT))
    assert m.state is State.ABORTABLE_ERROR and m.last_error is first
    with pytest.raises(TransactionAbortedError, match="boom"):
        m.begin_commit()
    with pytest.raises(TransactionAbortedError):
        m.check_can_send()
    m.begin_abort()
    m.end_done()
    m.begin()
    m.set_abortable(KafkaError.from_code(ErrorCode.PRODUCER_FENCED))     # fencing is fatal
    assert m.state is State.FATAL_ERROR
    for call in (m.begin, m.begin_commit, m.begin_abort, m.check_can_send, m.start_init):
        with pytest.raises(KafkaError) as info:
            call()
        assert info.value.code == ErrorCode.PRODUCER_FENCED


def test_transactional_config_rules():
    with pytest.raises(ConfigError, match="acks=all"):
        Producer("127.0.0.1:1", {"transactional.id": "x", "acks": 1})
    with pytest.raises(ConfigError, match="idempotence"):
        Producer("127.0.0.1:1", {"transactional.id": "x", "enable.idempotence": False})
    with pytest.raises(ConfigError, match="transaction.timeout.ms"):
        Producer("127.0.0.1:1", {"transactional.id": "x", "transaction.timeout.ms": "soon"})
    p = Producer("127.0.0.1:1", {"transactional.id": "x"})
    assert p.idempotent and p.transaction_state is State.UNINITIALIZED


async def test_coordinator_errors_retried_or_raised():
    """_coordinator_call against a scripted coordinator: LOAD_IN_PROGRESS and
    CONCURRENT_TRANSACTIONS are waited out, NOT_COORDINATOR finds the coordinator again, a
    dropped connection too; PRODUCER_FENCED raises its typed error at once."""
    from types import SimpleNamespace as NS

    from clients.errors import KafkaConnectionError
    p = Producer("127.0.0.1:1", {"transactional.id": "tx-unit", "retry.backoff.ms": 1})
    found, forgotten = [], []

    async def find_coordinator(key, key_type, timeout_s=30):
        found.append((key, key_type))
        return 1

    def script(*steps):
        steps = list(steps)

        async def call(node, msg, **kw):
            step = steps.pop(0)
            if isinstance(step, Exception):
                raise step
            return NS(error_code=step)
        return call
    p.cluster.find_coordinator = find_coordinator
    p.cluster.forget_coordinator = lambda key, key_type=0: forgotten.append((key, key_type))
    p.cluster.call = script(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_COORDINATOR,
                            KafkaConnectionError("gone"), ErrorCode.CONCURRENT_TRANSACTIONS, 0)
    resp = await p._transactions._coordinator_call(lambda: None, lambda r: r.error_code, "EndTxn")
    assert resp.error_code == 0
    assert len(found) == 5 and forgotten == [("tx-unit", 1), ("tx-unit", 1)]
    p.cluster.call = script(ErrorCode.PRODUCER_FENCED)
    with pytest.raises(ProducerFencedError, match="EndTxn"):
        await p._transactions._coordinator_call(lambda: None, lambda r: r.error_code, "EndTxn")
    p.cluster.call = script(*[ErrorCode.CONCURRENT_TRANSACTIONS] * 1000)
    from clients.errors import KafkaTimeoutError
    with pytest.raises(KafkaTimeoutError, match="CONCURRENT_TRANSACTIONS"):
        await p._transactions._coordinator_call(lambda: None, lambda r: r.error_code, "EndTxn", timeout_s=0.2)

# -- live ---------------------------------------------------------------------------------------

TXN_OVERRIDES = {"transaction.state.log.num.partitions": "3",
                 "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
                 "group.initial.rebalance.delay.ms": "0"}


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    c = LiveCluster(tmp_path_factory.mktemp("ptxn"), TXN_OVERRIDES)
    c.start()
    yield c
    c.stop()


def create_topic(cluster, name, partitions=3, config=None):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for fut in admin.create_topics([NewTopic(name, partitions, 3, config=config or {})]).values():
        fut.result(30)


def ck_read(cluster, topic, isolation, partitions=3, idle_s=2.0, timeout_s=30):
    """Every (partition, value) readable now with confluent-kafka at `isolation`."""
    c = CKConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"r-{uuid.uuid4()}",
                    "isolation.level": isolation, "enable.auto.commit": False,
                    "auto.offset.reset": "earliest"})
    c.assign([CKTP(topic, p, 0) for p in range(partitions)])
    out, last, end = [], time.time(), time.time() + timeout_s
    while time.time() - last < idle_s and time.time() < end:
        m = c.poll(0.2)
        if m is None:
            continue
        if m.error():
            if m.error().code() != CKError._PARTITION_EOF:
                raise KafkaException(m.error())
            continue
        out.append((m.partition(), m.value().decode()))
        last = time.time()
    c.close()
    return out


async def our_read(cluster, topic, isolation, partitions=3, idle_s=1.5):
    from clients.consumer import Consumer
    from clients.consumer import TopicPartition as CTP
    out = []
    async with Consumer(cluster.bootstrap, {"isolation.level": isolation,
                                            "auto.offset.reset": "earliest",
                                            "enable.auto.commit": False}) as c:
        c.assign([CTP(topic, p) for p in range(partitions)])
        last = trio.current_time()
        while trio.current_time() - last < idle_s:
            recs = await c.poll(200)
            for r in recs:
                out.append((r.partition, r.value.decode()))
            if recs:
                last = trio.current_time()
    return out


def txn_config(tid, **extra):
    return {"transactional.id": tid, "transaction.timeout.ms": 20000, "linger.ms": 5, **extra}


@pytest.mark.live
async def test_commit_atomic_abort_hidden(live):
    topic = "ptxn-basic"
    create_topic(live, topic)
    async with Producer(live.bootstrap, txn_config("ptx-basic")) as p:
        await p.init_transactions()
        pid, epoch = p.producer_id_and_epoch
        await p.begin_transaction()
        futs = [await p.send(topic, f"c1-{i}", partition=i % 3) for i in range(30)]
        await p.commit_transaction()
        assert all(f.done() and f.exception() is None for f in futs)
        # EndTxn v5 (KIP-890 part 2): every transaction ends with the epoch one higher
        assert p.producer_id_and_epoch == (pid, epoch + 1)
        await p.begin_transaction()
        for i in range(30):
            await p.send(topic, f"a1-{i}", partition=i % 3)
        await p.flush()
        # in the log, transaction open: read_committed sees nothing of it yet
        assert sorted(v for _, v in await our_read(live, topic, "read_committed")) == \
            sorted(f"c1-{i}" for i in range(30))
        await p.abort_transaction()
        assert p.producer_id_and_epoch == (pid, epoch + 2)
        await p.begin_transaction()
        for i in range(30):
            await p.send(topic, f"c2-{i}", partition=i % 3)
        await p.commit_transaction()
        assert p.transaction_state is State.READY
        assert p.producer_id_and_epoch == (pid, epoch + 3)
    want = sorted([f"c1-{i}" for i in range(30)] + [f"c2-{i}" for i in range(30)])
    committed = ck_read(live, topic, "read_committed")
    assert sorted(v for _, v in committed) == want
    assert {part for part, _ in committed} == {0, 1, 2}
    # per partition, our transactions' records in send order
    for part in range(3):
        vals = [v for pp, v in committed if pp == part]
        assert vals == [f"c1-{i}" for i in range(part, 30, 3)] + \
            [f"c2-{i}" for i in range(part, 30, 3)]
    ours = await our_read(live, topic, "read_committed")
    assert sorted(v for _, v in ours) == want
    uncommitted = {v for _, v in ck_read(live, topic, "read_uncommitted")}
    assert {f"a1-{i}" for i in range(30)} <= uncommitted


@pytest.mark.live
async def test_open_transaction_invisible_until_commit(live):
    topic = "ptxn-open"
    create_topic(live, topic)
    async with Producer(live.bootstrap, txn_config("ptx-open")) as p:
        await p.init_transactions()
        await p.begin_transaction()
        for i in range(12):
            await p.send(topic, f"o-{i}", partition=i % 3)
        await p.flush()
        assert await our_read(live, topic, "read_committed", idle_s=1.0) == []
        assert len(await our_read(live, topic, "read_uncommitted", idle_s=1.0)) == 12
        await p.commit_transaction()
    assert sorted(v for _, v in await our_read(live, topic, "read_committed")) == \
        sorted(f"o-{i}" for i in range(12))


@pytest.mark.live
async def test_zombie_fenced(live):
    topic = "ptxn-zombie"
    create_topic(live, topic, partitions=1)
    async with Producer(live.bootstrap, txn_config("ptx-zombie")) as old, \
            Producer(live.bootstrap, txn_config("ptx-zombie")) as new:
        await old.init_transactions()
        await old.begin_transaction()
        await (await old.send(topic, "zombie-1", partition=0))
        await new.init_transactions()          # fences `old`; its open transaction is aborted
        await new.begin_transaction()
        await new.send(topic, "new-1", partition=0)
        await new.commit_transaction()
        with pytest.raises(KafkaError) as info:
            fut = await old.send(topic, "zombie-2", partition=0)
            await old.commit_transaction()
        # the typed error of the fencing code, not a generic failure
        assert isinstance(info.value, (ProducerFencedError, InvalidProducerEpochError))
        assert info.value.code in (ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH)
        assert fut.done() and fut.exception() is not None
        assert old.transaction_state is State.FATAL_ERROR
        with pytest.raises(KafkaError) as again:          # stays fenced, never hangs
            await old.begin_transaction()
        assert again.value.code == info.value.code
    assert [v for _, v in ck_read(live, topic, "read_committed", partitions=1)] == ["new-1"]


@pytest.mark.live
async def test_consume_transform_produce_offsets_commit_with_transaction(live):
    src, dst, group = "ptxn-src", "ptxn-dst", "ptxn-ctp"
    create_topic(live, src, partitions=2)
    create_topic(live, dst, partitions=2)
    ck = CKProducer({"bootstrap.servers": live.bootstrap})
    for i in range(20):
        ck.produce(src, f"in-{i}".encode(), partition=i % 2)
    assert ck.flush(30) == 0

    def committed():
        # read_uncommitted: OffsetFetch without require_stable, so pending transactional
        # offsets read as "none yet" instead of UNSTABLE_OFFSET_COMMIT retries
        c = CKConsumer({"bootstrap.servers": live.bootstrap, "group.id": group,
                        "isolation.level": "read_uncommitted"})
        got = c.committed([CKTP(src, 0), CKTP(src, 1)], timeout=10)
        c.close()
        return {t.partition: t.offset for t in got}

    async with Producer(live.bootstrap, txn_config("ptx-ctp")) as p:
        await p.init_transactions()
        # an aborted round: neither outputs nor offsets survive
        await p.begin_transaction()
        await p.send(dst, "out-aborted", partition=0)
        await p.send_offsets_to_transaction({TopicPartition(src, 0): 10}, group)
        await p.abort_transaction()
        assert all(o < 0 for o in committed().values())
        # the real round: read src, write transformed records, commit offsets with them
        inputs = ck_read(live, src, "read_committed", partitions=2, idle_s=1.0)
        await p.begin_transaction()
        for part, v in inputs:
            await p.send(dst, v.replace("in-", "out-"), partition=part)
        await p.send_offsets_to_transaction({(src, 0): 10, (src, 1): (10, "meta")}, group)
        await p.flush()
        assert all(o < 0 for o in committed().values())       # not before the commit
        await p.commit_transaction()
    deadline = time.time() + 15
    while committed() != {0: 10, 1: 10} and time.time() < deadline:
        time.sleep(0.3)
    assert committed() == {0: 10, 1: 10}
    out = sorted(v for _, v in ck_read(live, dst, "read_committed", partitions=2))
    assert out == sorted(f"out-{i}" for i in range(20))


@pytest.mark.live
async def test_consume_transform_produce_with_our_group_consumer(live):
    """Our group consumer feeds the transaction; its membership (generation, member id) goes
    with the offsets, and it reads the committed offsets back after the commit."""
    from clients.consumer import Consumer
    from clients.consumer import TopicPartition as CTP
    src, dst, group = "ptxn-gsrc", "ptxn-gdst", "ptxn-gctp"
    create_topic(live, src, partitions=2)
    create_topic(live, dst, partitions=2)
    ck = CKProducer({"bootstrap.servers": live.bootstrap})
    for i in range(10):
        ck.produce(src, f"g-{i}".encode(), partition=i % 2)
    assert ck.flush(30) == 0
    async with Consumer(live.bootstrap, {"group.id": group, "auto.offset.reset": "earliest",
                                         "enable.auto.commit": False,
                                         "isolation.level": "read_committed"}) as c, \
            Producer(live.bootstrap, txn_config("ptx-gctp")) as p:
        c.subscribe([src])
        await p.init_transactions()
        records = []
        with trio.fail_after(30):
            while len(records) < 10:
                records += await c.poll(500)
        await p.begin_transaction()
        nxt = {}
        for r in records:
            await p.send(dst, r.value.replace(b"g-", b"out-"), partition=r.partition)
            nxt[CTP(r.topic, r.partition)] = r.offset + 1
        await p.send_offsets_to_transaction(nxt, c)
        # (no look at committed offsets before the commit here: a read_committed consumer
        # asks for stable offsets and would wait for this very transaction to end)
        await p.commit_transaction()
        with trio.fail_after(15):
            while (await c.committed(list(nxt))) != {CTP(src, 0): 5, CTP(src, 1): 5}:
                await trio.sleep(0.2)
    assert sorted(v for _, v in ck_read(live, dst, "read_committed", partitions=2)) == \
        sorted(f"out-{i}" for i in range(10))

@pytest.mark.live
async def test_failed_record_makes_transaction_abortable(live):
    topic = "ptxn-small"
    create_topic(live, topic, partitions=1, config={"max.message.bytes": "2000"})
    async with Producer(live.bootstrap, txn_config("ptx-fail")) as p:
        await p.init_transactions()
        await p.begin_transaction()
        ok = await p.send(topic, "fits", partition=0)
        big = await p.send(topic, b"x" * 5000, partition=0)     # same batch: split, then fails
        with pytest.raises(TransactionAbortedError):
            await p.commit_transaction()
        assert big.exception() is not None
        assert big.exception().code == ErrorCode.MESSAGE_TOO_LARGE
        assert p.transaction_state is State.ABORTABLE_ERROR
        with pytest.raises(TransactionAbortedError):
            await p.send(topic, "more", partition=0)
        epoch = p._ids.producer_epoch
        await p.abort_transaction()
        assert ok.done() and ok.exception() is None      # its half of the split batch went out
        # the failed batch used a sequence: the epoch must move on (EndTxn v5 does it; with an
        # older coordinator an InitProducerId bump would), once
        assert p._ids.producer_epoch == epoch + 1
        # the producer goes on: a new transaction commits (epoch bumped if a sequence was used)
        await p.begin_transaction()
        await p.send(topic, "after", partition=0)
        await p.commit_transaction()
    assert [v for _, v in ck_read(live, topic, "read_committed", partitions=1)] == ["after"]


@pytest.mark.live
async def test_misuse_is_refused_at_once(live):
    topic = "ptxn-misuse"
    create_topic(live, topic, partitions=1)
    async with Producer(live.bootstrap, txn_config("ptx-misuse")) as p:
        with pytest.raises(TransactionStateError, match="before init_transactions"):
            await p.begin_transaction()
        with pytest.raises(TransactionStateError, match="outside a transaction"):
            await p.send(topic, "x", partition=0)
        await p.init_transactions()
        with pytest.raises(TransactionStateError, match="outside a transaction"):
            await p.send(topic, "x", partition=0)
        with pytest.raises(TransactionStateError, match="no transaction begun"):
            await p.commit_transaction()
        with pytest.raises(TransactionStateError, match="no transaction begun"):
            await p.abort_transaction()
        with pytest.raises(TransactionStateError):
            await p.send_offsets_to_transaction({(topic, 0): 1}, "g")
        await p.begin_transaction()
        await p.commit_transaction()          # empty: ends locally
        assert p.transaction_state is State.READY
    async with Producer(live.bootstrap) as plain:
        with pytest.raises(TransactionStateError, match="transactional.id"):
            await plain.init_transactions()


@pytest.mark.live
def test_sync_facade_and_interop_with_confluent(live):
    topic = "ptxn-interop"
    create_topic(live, topic)
    ck = CKProducer({"bootstrap.servers": live.bootstrap, "transactional.id": "ck-interop",
                     "linger.ms": 5})
    ck.init_transactions(30)
    with SyncProducer(live.bootstrap, txn_config("ptx-interop")) as p:
        with pytest.raises(TransactionStateError):
            p.send(topic, "outside")
        p.init_transactions()
        p.begin_transaction()
        ck.begin_transaction()
        futs = [p.send(topic, f"ours-{i}", partition=i % 3) for i in range(15)]
        for i in range(15):
            ck.produce(topic, f"theirs-{i}".encode(), partition=i % 3)
        p.commit_transaction()
        assert all(f.result(5).offset >= 0 for f in futs)
        ck.commit_transaction(30)
        p.begin_transaction()
        ck.begin_transaction()
        for i in range(6):
            p.send(topic, f"ours-aborted-{i}", partition=i % 3)
            ck.produce(topic, f"theirs-aborted-{i}".encode(), partition=i % 3)
        p.flush()                 # in the log (abort would fail records not yet sent)
        ck.flush(30)
        p.abort_transaction()
        ck.abort_transaction(30)
    want = sorted([f"ours-{i}" for i in range(15)] + [f"theirs-{i}" for i in range(15)])
    assert sorted(v for _, v in ck_read(live, topic, "read_committed")) == want
    ours = trio.run(our_read, live, topic, "read_committed")
    assert sorted(v for _, v in ours) == want
    every = {v for _, v in ck_read(live, topic, "read_uncommitted")}
    assert {f"ours-aborted-{i}" for i in range(6)} <= every


@pytest.mark.live
async def test_commit_survives_coordinator_restart(live):
    """The transaction coordinator's broker is killed and restarted mid-transaction: the
    producer finds the new coordinator (NOT_COORDINATOR / connection errors are retried), its
    batches to partitions that lost their leader are retried, and the commit lands whole.
    Runs last in this module: it restarts a broker of the shared cluster."""
    topic, tid = "ptxn-failover", "ptx-failover"
    create_topic(live, topic)
    async with Producer(live.bootstrap, txn_config(tid, **{"request.timeout.ms": 10000})) as p:
        await p.init_transactions()
        coordinator = await p.cluster.find_coordinator(tid, 1)
        await p.begin_transaction()
        for i in range(30):
            await p.send(topic, f"f-{i}", partition=i % 3)
        await p.flush()
        await trio.to_thread.run_sync(live.restart_broker, coordinator)
        for i in range(30, 60):
            await p.send(topic, f"f-{i}", partition=i % 3)
        await p.commit_transaction(timeout_s=60)
    assert sorted(v for _, v in ck_read(live, topic, "read_committed")) == \
        sorted(f"f-{i}" for i in range(60))
