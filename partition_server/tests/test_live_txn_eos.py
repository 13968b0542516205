"""Exactly-once under broker faults (issue #11; fault F12).

- A consume-transform-produce loop (librdkafka: read_committed consumer + transactional producer
  with send_offsets_to_transaction) survives a SIGKILL of its transaction coordinator's broker
  mid-stream: every input is transformed into exactly one committed output, and the committed
  offsets cover the whole input.
- F12: the coordinator is SIGKILLed right after EndTxn(commit) was sent, many times over; with
  a history of what each transaction wrote and how its commit ended, read_committed readers see
  every transaction all-or-nothing, nothing aborted, nothing acknowledged-committed lost, no
  duplicate.
"""

import threading
import time
import uuid

import pytest
import trio
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from chaos_tests.checkers.txn import assert_final_values
from partition_server.testing import LiveCluster
from wire.messages.api_keys import ApiKey

pytestmark = pytest.mark.live

OVERRIDES = {"transaction.state.log.num.partitions": "3",
             "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LiveCluster(tmp_path_factory.mktemp("txn-eos"), OVERRIDES)
    c.start()
    yield c
    c.stop()


def create_topic(cluster, name, partitions=3):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for fut in admin.create_topics([NewTopic(name, partitions, 3)]).values():
        fut.result(30)


def coordinator_of(cluster, tid: str) -> int:
    """Node id of the transaction coordinator of `tid` (FindCoordinator key_type=1)."""
    from clients.connection import BrokerConnection
    from wire.messages.index_generated import REQUESTS

    async def ask():
        for _ in range(100):
            for addr in cluster.bootstrap.split(","):
                host, port = addr.split(":")
                conn = BrokerConnection(host, int(port))
                try:
                    await conn.connect()
                    r = await conn.request(REQUESTS[ApiKey.FIND_COORDINATOR](key_type=1, coordinator_keys=[tid]), 4)
                    c = r.coordinators[0]
                    if c.error_code == 0:
                        return c.node_id
                except OSError:
                    pass
                finally:
                    await conn.aclose()
            await trio.sleep(0.2)
        raise AssertionError(f"no coordinator for {tid}")
    return trio.run(ask)


def read_committed(cluster, topic, partitions=3, idle_s=3.0, timeout_s=60):
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"r-{uuid.uuid4()}",
                  "isolation.level": "read_committed", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out, last, end = [], time.time(), time.time() + timeout_s
    while time.time() - last < idle_s and time.time() < end:
        m = c.poll(0.2)
        if m is None or m.error():
            continue
        out.append(m.value().decode())
        last = time.time()
    c.close()
    return out


def _rewind(consumer):
    """After an abort: go back to the last committed offsets (what the next txn must redo)."""
    parts = consumer.assignment()
    committed = consumer.committed(parts, timeout=30)
    for tp in committed:
        consumer.seek(TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else 0))


def run_transform_loop(cluster, src, dst, tid, group, total, stop_at=None, after_txn=None,
                       deadline_s=120):
    """Copy src → dst transactionally, 'v' → 'out-v', until `total` inputs are committed."""
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(src, p) for p in range(3)])
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": tid,
                         "transaction.timeout.ms": 30000, "linger.ms": 5})
    producer.init_transactions(60)
    done, txns, aborts = 0, 0, 0
    end = time.time() + deadline_s
    while done < total and time.time() < end:
        msgs = [m for m in consumer.consume(20, 1.0) if not m.error()]
        if not msgs:
            continue
        try:
            producer.begin_transaction()
            for m in msgs:
                producer.produce(dst, b"out-" + m.value(), partition=m.partition())
            producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                 consumer.consumer_group_metadata(), 60)
            while True:
                try:
                    producer.commit_transaction(60)
                    break
                except KafkaException as exc:
                    if exc.args[0].retriable():
                        continue
                    raise
            done += len(msgs)
            txns += 1
            if after_txn is not None:
                after_txn(txns)
        except KafkaException as exc:
            err = exc.args[0]
            if err.fatal() or not err.txn_requires_abort():
                if not err.retriable():
                    raise
            producer.abort_transaction(60)
            aborts += 1
            _rewind(consumer)
    consumer.close()
    return done, txns, aborts


def test_consume_transform_produce_survives_coordinator_sigkill(cluster):
    src, dst, tid, group = "eos-in", "eos-out", "tx-eos", "g-eos"
    create_topic(cluster, src)
    create_topic(cluster, dst)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True})
    n = 300
    for i in range(n):
        p.produce(src, str(i).encode(), partition=i % 3)
    assert p.flush(30) == 0
    victim = coordinator_of(cluster, tid)
    killed = {}

    def after_txn(txns):
        if txns == 4 and not killed:
            killed["t"] = time.time()
            cluster.kill(f"broker-{victim}")

    restarter = threading.Thread(target=lambda: (
        [time.sleep(0.2) for _ in iter(lambda: "t" in killed, True)],
        time.sleep(5), cluster.restart_broker(victim)))
    restarter.start()
    try:
        done, txns, aborts = run_transform_loop(cluster, src, dst, tid, group, n,
                                                after_txn=after_txn)
    finally:
        killed.setdefault("t", time.time())
        restarter.join(90)
    assert done >= n and txns > 4, (done, txns)      # the kill happened mid-stream
    out = read_committed(cluster, dst)
    assert sorted(out) == sorted(f"out-{i}" for i in range(n)), \
        f"{len(out)} outputs, {len(set(out))} distinct, {txns} txns, {aborts} aborts"
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
    offsets = c.committed([TopicPartition(src, i) for i in range(3)], timeout=30)
    c.close()
    assert [tp.offset for tp in offsets] == [n // 3] * 3


def _f12_rounds(cluster, topic, tid, rounds, seed):
    """Run `rounds` transactions, SIGKILLing the coordinator around each commit; returns the
    history {round: 'ok' | 'aborted' | 'unknown'} and the values each round wrote."""
    import random
    rng = random.Random(seed)
    history, written = {}, {}

    def new_producer():
        p = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": tid,
                      "transaction.timeout.ms": 30000, "linger.ms": 2})
        p.init_transactions(90)
        return p

    producer = new_producer()
    for r in range(rounds):
        values = [f"r{r}-{i}" for i in range(9)]
        written[r] = values
        victim = coordinator_of(cluster, tid)
        producer.begin_transaction()
        for i, v in enumerate(values):
            producer.produce(topic, v.encode(), partition=i % 3)
        producer.flush(30)
        outcome = {}

        def commit():
            try:
                producer.commit_transaction(90)
                outcome["r"] = "ok"
            except KafkaException as exc:
                outcome["r"] = exc.args[0]
        t = threading.Thread(target=commit)
        t.start()
        time.sleep(rng.uniform(0, 0.05))
        cluster.kill(f"broker-{victim}")
        t.join(120)
        cluster.restart_broker(victim)
        got = outcome.get("r", "unknown")
        if got == "ok":
            history[r] = "ok"
            continue
        history[r] = "unknown"
        if isinstance(got, KafkaError) and got.txn_requires_abort() and not got.fatal():
            try:
                producer.abort_transaction(90)
                history[r] = "aborted"
                continue
            except KafkaException:
                pass
        producer = new_producer()            # fatal: a new instance completes or aborts it
    return history, written


def check_history(history, written, seen):
    """No aborted read, no lost committed transaction, each transaction all-or-nothing, no
    duplicate (the shared transaction checkers of chaos_tests/checkers/txn.py)."""
    assert_final_values(history, written, seen)


@pytest.mark.parametrize("rounds", [2])
def test_f12_coordinator_sigkill_mid_commit(cluster, rounds):
    topic, tid = "f12", "tx-f12"
    create_topic(cluster, topic)
    history, written = _f12_rounds(cluster, topic, tid, rounds, seed=12)
    print("F12 history:", history)
    check_history(history, written, read_committed(cluster, topic))
    assert "ok" in history.values() or "unknown" in history.values()


@pytest.mark.slow
def test_f12_coordinator_sigkill_mid_commit_soak(cluster):
    topic, tid = "f12-soak", "tx-f12-soak"
    create_topic(cluster, topic)
    history, written = _f12_rounds(cluster, topic, tid, 10, seed=1212)
    check_history(history, written, read_committed(cluster, topic))


def test_f12_checker_catches_bad_histories():
    written = {0: ["a", "b"], 1: ["c", "d"]}
    check_history({0: "ok", 1: "aborted"}, written, ["a", "b"])
    check_history({0: "unknown", 1: "unknown"}, written, ["c", "d"])
    for history, seen in [({0: "ok", 1: "aborted"}, ["a"]),              # partial
                          ({0: "ok", 1: "aborted"}, ["c", "d"]),         # lost + aborted read
                          ({0: "ok", 1: "unknown"}, ["a", "b", "b"])]:   # duplicate
        with pytest.raises(AssertionError):
            check_history(history, written, seen)


def test_new_leader_knows_open_and_aborted_transactions(cluster):
    """Followers track transactions from the batches they replicate: after the partition
    leader is SIGKILLed, the new leader still hides aborted data from read_committed readers
    and holds the last stable offset at a still-open transaction until it commits."""
    topic = "txn-failover"
    create_topic(cluster, topic, partitions=1)
    a = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "tx-fo-a"})
    a.init_transactions(60)
    a.begin_transaction()
    a.produce(topic, b"c1", partition=0)
    a.commit_transaction(30)
    a.begin_transaction()
    a.produce(topic, b"a1", partition=0)
    a.flush(30)
    a.abort_transaction(30)
    b = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "tx-fo-b",
                  "transaction.timeout.ms": 60000})
    b.init_transactions(60)
    b.begin_transaction()
    b.produce(topic, b"open", partition=0)
    b.flush(30)
    a.begin_transaction()
    a.produce(topic, b"c2", partition=0)       # committed, but behind the open transaction
    a.commit_transaction(30)
    md = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(topic, timeout=30)
    leader = md.topics[topic].partitions[0].leader
    cluster.kill(f"broker-{leader}")
    try:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        deadline = time.time() + 30
        while admin.list_topics(topic, timeout=30).topics[topic].partitions[0].leader in \
                (leader, -1) and time.time() < deadline:
            time.sleep(0.5)
        assert read_committed(cluster, topic, partitions=1, idle_s=5) == ["c1"]
        b.commit_transaction(60)
        assert read_committed(cluster, topic, partitions=1) == ["c1", "open", "c2"]
    finally:
        cluster.restart_broker(leader)
