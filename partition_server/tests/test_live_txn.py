"""Transactions on a live cluster with unmodified clients (issue #11).

confluent-kafka (librdkafka) and kafka-python transactional producers: committed transactions
are visible atomically to read_committed consumers across partitions; aborted ones never are,
yet read_uncommitted consumers see them; a second producer with the same transactional.id fences
the first (zombie fencing); DescribeTransactions/ListTransactions show the coordinator's view.
"""

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from partition_server.testing import LiveCluster

pytestmark = pytest.mark.live

TXN_OVERRIDES = {"transaction.state.log.num.partitions": "3",
                 "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LiveCluster(tmp_path_factory.mktemp("txn"), TXN_OVERRIDES)
    c.start()
    yield c
    c.stop()


def create_topic(cluster, name, partitions=3):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for fut in admin.create_topics([NewTopic(name, partitions, 3)]).values():
        fut.result(30)


def txn_producer(cluster, tid, **extra):
    conf = {"bootstrap.servers": cluster.bootstrap, "transactional.id": tid,
            "transaction.timeout.ms": 20000, "linger.ms": 5}
    conf.update(extra)
    p = Producer(conf)
    p.init_transactions(60)
    return p


def read_all(cluster, topic, isolation, partitions=3, idle_s=3.0, timeout_s=30):
    """Every (partition, value) readable now, with the given isolation level."""
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"r-{uuid.uuid4()}",
                  "isolation.level": isolation, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out, last, end = [], time.time(), time.time() + timeout_s
    while time.time() - last < idle_s and time.time() < end:
        m = c.poll(0.2)
        if m is None:
            continue
        if m.error():
            if m.error().code() != KafkaError._PARTITION_EOF:
                raise KafkaException(m.error())
            continue
        out.append((m.partition(), m.value().decode()))
        last = time.time()
    c.close()
    return out


def test_commit_visible_atomically_abort_only_to_read_uncommitted(cluster):
    topic = "txn-basic"
    create_topic(cluster, topic)
    p = txn_producer(cluster, "tx-basic")
    p.begin_transaction()
    for i in range(30):
        p.produce(topic, f"c1-{i}".encode(), partition=i % 3)
    p.commit_transaction(30)
    p.begin_transaction()
    for i in range(30):
        p.produce(topic, f"a1-{i}".encode(), partition=i % 3)
    p.flush(30)
    p.abort_transaction(30)
    p.begin_transaction()
    for i in range(30):
        p.produce(topic, f"c2-{i}".encode(), partition=i % 3)
    p.commit_transaction(30)

    committed = read_all(cluster, topic, "read_committed")
    values = sorted(v for _, v in committed)
    assert values == sorted([f"c1-{i}" for i in range(30)] + [f"c2-{i}" for i in range(30)])
    assert len(set(values)) == len(values)
    uncommitted = {v for _, v in read_all(cluster, topic, "read_uncommitted")}
    assert {f"a1-{i}" for i in range(30)} <= uncommitted


def test_open_transaction_blocks_read_committed_until_commit(cluster):
    topic = "txn-open"
    create_topic(cluster, topic)
    p = txn_producer(cluster, "tx-open")
    p.begin_transaction()
    for i in range(10):
        p.produce(topic, f"o-{i}".encode(), partition=i % 3)
    p.flush(30)
    # data is in the log but the transaction is open: invisible to read_committed
    assert read_all(cluster, topic, "read_committed", idle_s=2) == []
    assert len(read_all(cluster, topic, "read_uncommitted", idle_s=2)) == 10
    p.commit_transaction(30)
    assert sorted(v for _, v in read_all(cluster, topic, "read_committed")) == \
        sorted(f"o-{i}" for i in range(10))


def test_zombie_producer_is_fenced(cluster):
    topic = "txn-zombie"
    create_topic(cluster, topic)
    old = txn_producer(cluster, "tx-zombie")
    old.begin_transaction()
    old.produce(topic, b"zombie-1", partition=0)
    old.flush(30)
    new = txn_producer(cluster, "tx-zombie")          # fences `old`, aborting its transaction
    new.begin_transaction()
    new.produce(topic, b"new-1", partition=0)
    new.commit_transaction(30)
    with pytest.raises(KafkaException) as info:
        old.produce(topic, b"zombie-2", partition=0)
        old.commit_transaction(30)
    assert info.value.args[0].code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                                         KafkaError.INVALID_PRODUCER_EPOCH)
    values = [v for _, v in read_all(cluster, topic, "read_committed", partitions=1)]
    assert values == ["new-1"]


def test_transaction_timeout_aborts(cluster):
    topic = "txn-timeout"
    create_topic(cluster, topic)
    p = txn_producer(cluster, "tx-timeout", **{"transaction.timeout.ms": 2000})
    p.begin_transaction()
    p.produce(topic, b"hanging", partition=0)
    p.flush(30)
    deadline = time.time() + 20
    # the coordinator aborts it: read_committed readers are no longer blocked and never see it
    while time.time() < deadline:
        c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"r-{uuid.uuid4()}",
                      "isolation.level": "read_committed"})
        lo, hi = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        c.close()
        if hi == 2:                  # LSO past the data and the abort marker
            break
        time.sleep(0.5)
    else:
        pytest.fail("timed-out transaction was not aborted")
    assert read_all(cluster, topic, "read_committed", partitions=1, idle_s=1) == []
    with pytest.raises(KafkaException):
        p.commit_transaction(10)


def test_kafka_python_transactions(cluster):
    from kafka import KafkaConsumer, KafkaProducer
    topic = "txn-kp"
    create_topic(cluster, topic)
    p = KafkaProducer(bootstrap_servers=cluster.bootstrap, transactional_id="tx-kp")
    p.init_transactions()
    p.begin_transaction()
    for i in range(20):
        p.send(topic, f"kc-{i}".encode(), partition=i % 3)
    p.commit_transaction()
    p.begin_transaction()
    for i in range(20):
        p.send(topic, f"ka-{i}".encode(), partition=i % 3)
    p.flush()
    p.abort_transaction()
    p.close()

    def consume(isolation):
        c = KafkaConsumer(bootstrap_servers=cluster.bootstrap, isolation_level=isolation,
                          auto_offset_reset="earliest", enable_auto_commit=False,
                          consumer_timeout_ms=3000)
        c.assign([__import__("kafka").TopicPartition(topic, i) for i in range(3)])
        c.seek_to_beginning()
        got = [m.value.decode() for m in c]
        c.close()
        return got

    assert sorted(consume("read_committed")) == sorted(f"kc-{i}" for i in range(20))
    assert {f"ka-{i}" for i in range(20)} <= set(consume("read_uncommitted"))
    # librdkafka reads what kafka-python wrote transactionally, too
    assert sorted(v for _, v in read_all(cluster, topic, "read_committed")) == \
        sorted(f"kc-{i}" for i in range(20))


async def test_describe_and_list_transactions(cluster):
    from clients.connection import BrokerConnection
    from wire.messages.index_generated import REQUESTS
    p = txn_producer(cluster, "tx-describe")
    create_topic(cluster, "txn-describe")
    p.begin_transaction()
    p.produce("txn-describe", b"x", partition=1)
    p.flush(30)
    host, port = cluster.bootstrap.split(",")[0].split(":")
    conn = BrokerConnection(host, int(port))
    await conn.connect()
    fc = REQUESTS[10]
    found = await conn.request(fc(key_type=1, coordinator_keys=["tx-describe"]), 4)
    c = found.coordinators[0]
    assert c.error_code == 0
    coord = BrokerConnection(c.host, c.port)
    await coord.connect()
    desc = await coord.request(REQUESTS[65](transactional_ids=["tx-describe", "nope"]), 0)
    st = {s.transactional_id: s for s in desc.transaction_states}
    assert st["tx-describe"].transaction_state == "Ongoing"
    assert [(t.topic, list(t.partitions)) for t in st["tx-describe"].topics] == [("txn-describe", [1])]
    assert st["nope"].error_code in (105, 16)      # TRANSACTIONAL_ID_NOT_FOUND or NOT_COORDINATOR
    listed = await coord.request(REQUESTS[66](state_filters=["Ongoing"], producer_id_filters=[],
                                              duration_filter=-1), 1)
    assert "tx-describe" in {s.transactional_id for s in listed.transaction_states}
    assert all(s.transaction_state == "Ongoing" for s in listed.transaction_states)
    await conn.aclose()
    await coord.aclose()
    p.abort_transaction(30)
