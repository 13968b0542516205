"""Transactions on a live cluster with unmodified clients (issue #11).

confluent-kafka (librdkafka) and kafka-python transactional producers: committed transactions
are visible atomically to read_committed consumers across partitions; aborted ones never are,
yet read_uncommitted consumers see them; a second producer with the same transactional.id fences
the first (zombie fencing); DescribeTransactions/ListTransactions show the coordinator's view.
"""

import time
import uuid

import pytest
import trio
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from partition_server.testing import LiveCluster
from wire.messages.api_keys import ApiKey

pytestmark = pytest.mark.live

TXN_OVERRIDES = {"transaction.state.log.num.partitions": "3",
                 "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
                 # long enough for every test's idle pauses, short enough to watch one expire
                 "transactional.id.expiration.ms": "8000"}


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


def read_all(cluster, topic, isolation, partitions=3, idle_s=None, timeout_s=60):
    """Every (partition, value) readable now, with the given isolation level: read until every
    partition has reported its end (librdkafka's partition EOF: the high watermark, or the last
    stable offset under read_committed) after its last record. (`idle_s` is accepted for the
    callers and unused: an idle window was a fixed-time wait that a loaded machine could miss.)"""
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"r-{uuid.uuid4()}",
                  "isolation.level": isolation, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "enable.partition.eof": True})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out, at_end, end = [], set(), time.time() + timeout_s
    while len(at_end) < partitions:
        assert time.time() < end, f"{topic}: partitions {sorted(at_end)} of {partitions} read"
        m = c.poll(0.2)
        if m is None:
            continue
        if m.error():
            if m.error().code() != KafkaError._PARTITION_EOF:
                raise KafkaException(m.error())
            at_end.add(m.partition())
            continue
        at_end.discard(m.partition())
        out.append((m.partition(), m.value().decode()))
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
    fc = REQUESTS[ApiKey.FIND_COORDINATOR]
    found = await conn.request(fc(key_type=1, coordinator_keys=["tx-describe"]), 4)
    c = found.coordinators[0]
    assert c.error_code == 0
    coord = BrokerConnection(c.host, c.port)
    await coord.connect()
    desc = await coord.request(REQUESTS[ApiKey.DESCRIBE_TRANSACTIONS](transactional_ids=["tx-describe", "nope"]), 0)
    st = {s.transactional_id: s for s in desc.transaction_states}
    assert st["tx-describe"].transaction_state == "Ongoing"
    assert [(t.topic, list(t.partitions)) for t in st["tx-describe"].topics] == [("txn-describe", [1])]
    assert st["nope"].error_code in (105, 16)      # TRANSACTIONAL_ID_NOT_FOUND or NOT_COORDINATOR
    listed = await coord.request(REQUESTS[ApiKey.LIST_TRANSACTIONS](state_filters=["Ongoing"], producer_id_filters=[],
                                              duration_filter=-1), 1)
    assert "tx-describe" in {s.transactional_id for s in listed.transaction_states}
    assert all(s.transaction_state == "Ongoing" for s in listed.transaction_states)
    await conn.aclose()
    await coord.aclose()
    p.abort_transaction(30)


async def _leader_conn(cluster, topic, partition):
    from clients.connection import BrokerConnection
    from wire.messages.index_generated import REQUESTS
    host, port = cluster.bootstrap.split(",")[0].split(":")
    boot = BrokerConnection(host, int(port))
    await boot.connect()
    md = REQUESTS[ApiKey.METADATA]
    r = await boot.request(md(topics=[md.MetadataRequestTopic(name=topic)]), 9)
    await boot.aclose()
    leader = next(p.leader_id for t in r.topics for p in t.partitions if p.partition_index == partition)
    b = next(b for b in r.brokers if b.node_id == leader)
    conn = BrokerConnection(b.host, b.port)
    await conn.connect()
    return conn


class RawTxnProducer:
    """A transactional producer spoken in raw requests, so a test can send exactly the requests
    a misbehaving or unlucky client would (a write retried after its transaction ended)."""

    def __init__(self, cluster, tid, topic):
        self.cluster, self.tid, self.topic = cluster, tid, topic

    async def start(self):
        from clients.connection import BrokerConnection
        from wire.messages.index_generated import REQUESTS
        self.R = REQUESTS
        host, port = self.cluster.bootstrap.split(",")[0].split(":")
        boot = BrokerConnection(host, int(port))
        await boot.connect()
        for _ in range(50):
            c = (await boot.request(REQUESTS[ApiKey.FIND_COORDINATOR](key_type=1, coordinator_keys=[self.tid]),
                                    4)).coordinators[0]
            if c.error_code == 0:
                break
            await trio.sleep(0.2)
        await boot.aclose()
        self.coord = BrokerConnection(c.host, c.port)
        await self.coord.connect()
        for _ in range(50):
            init = await self.coord.request(REQUESTS[ApiKey.INIT_PRODUCER_ID](
                transactional_id=self.tid, transaction_timeout_ms=30000, producer_id=-1,
                producer_epoch=-1), 4)
            if init.error_code == 0:
                break
            await trio.sleep(0.2)
        self.pid, self.epoch = init.producer_id, init.producer_epoch
        self.leader = await _leader_conn(self.cluster, self.topic, 0)
        return self

    async def produce(self, seq, epoch=None, value=b"v"):
        from wire.records.batch import build_batch
        pr = self.R[ApiKey.PRODUCE]
        batch = build_batch([(b"k", value, [], None)], producer_id=self.pid,
                            producer_epoch=self.epoch if epoch is None else epoch,
                            base_sequence=seq, is_transactional=True)
        r = await self.leader.request(pr(transactional_id=self.tid, acks=-1, timeout_ms=10000,
                                         topic_data=[pr.TopicProduceData(
                                             name=self.topic, partition_data=[
                                                 pr.PartitionProduceData(index=0, records=batch)])]),
                                      9)
        return r.responses[0].partition_responses[0].error_code

    async def add_partition(self):
        ap = self.R[ApiKey.ADD_PARTITIONS_TO_TXN]
        added = await self.coord.request(ap(
            v3_and_below_transactional_id=self.tid, v3_and_below_producer_id=self.pid,
            v3_and_below_producer_epoch=self.epoch, v3_and_below_topics=[
                ap.AddPartitionsToTxnTopic(name=self.topic, partitions=[0])]), 3)
        return added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code

    async def end(self, commit, version=3, epoch=None):
        return await self.coord.request(self.R[ApiKey.END_TXN](
            transactional_id=self.tid, producer_id=self.pid,
            producer_epoch=self.epoch if epoch is None else epoch, committed=commit), version)

    async def offsets(self, isolation):
        """(last stable or high watermark per isolation level, log end offset)."""
        lo = self.R[ApiKey.LIST_OFFSETS]
        r = await self.leader.request(lo(replica_id=-1, isolation_level=isolation, topics=[
            lo.ListOffsetsTopic(name=self.topic, partitions=[
                lo.ListOffsetsPartition(partition_index=0, timestamp=-1)])]), 5)
        return r.topics[0].partitions[0].offset

    async def lso_reaches(self, want):
        for _ in range(50):
            if await self.offsets(1) == want:
                return True
            await trio.sleep(0.1)
        return False

    async def aclose(self):
        await self.leader.aclose()
        await self.coord.aclose()


async def test_kip890_leader_refuses_writes_outside_the_transaction(cluster):
    """A transactional batch to a partition never added to the transaction is refused
    (INVALID_TXN_STATE) — it would otherwise open a hanging transaction; once added, it is
    accepted and holds the last stable offset until EndTxn's marker."""
    topic = "txn-verify"
    create_topic(cluster, topic, partitions=1)
    p = await RawTxnProducer(cluster, "tx-verify", topic).start()
    assert await p.produce(0) == 48                 # INVALID_TXN_STATE: not in the transaction
    assert await p.offsets(1) == 0
    assert await p.add_partition() == 0
    assert await p.produce(0) == 0
    assert await p.offsets(1) == 0                  # the open transaction holds the LSO
    assert (await p.end(True)).error_code == 0
    assert await p.lso_reaches(2)                   # the record and the COMMIT marker
    await p.aclose()


async def test_kip890_part2_epoch_bump_fences_a_late_write_of_the_previous_transaction(cluster):
    """A batch of a finished transaction, retried late (its first attempt was lost), must not
    land in the next transaction. Part 1's verification alone cannot tell: the partition is
    part of the next transaction too. With EndTxn v5 the coordinator bumps the epoch with every
    transaction, the markers carry it, and the late batch's old epoch is refused. Shown both
    ways: EndTxn v3 (the hole) and v5 (closed)."""
    for version, topic in ((3, "txn-tv1"), (5, "txn-tv2")):
        create_topic(cluster, topic, partitions=1)
        p = await RawTxnProducer(cluster, f"tx-{topic}", topic).start()
        first_epoch = p.epoch
        assert await p.add_partition() == 0
        assert await p.produce(0, value=b"t1-a") == 0
        end = await p.end(True, version)
        assert end.error_code == 0
        assert await p.lso_reaches(2)
        if version >= 5:
            assert (end.producer_id, end.producer_epoch) == (p.pid, first_epoch + 1)
            # a retried EndTxn of the same transaction is answered as done, same new epoch —
            # once the coordinator finished it: the markers are in the partition (the LSO
            # moved) a moment before it logs CompleteCommit, and a retry in between is told
            # CONCURRENT_TRANSACTIONS (51) to ask again, as Kafka's coordinator does
            with trio.fail_after(30):
                while (again := await p.end(True, version, epoch=first_epoch)).error_code == 51:
                    await trio.sleep(0.05)
            assert (again.error_code, again.producer_epoch) == (0, first_epoch + 1)
            p.epoch = end.producer_epoch
        # the next transaction, on the same partition
        assert await p.add_partition() == 0
        assert await p.produce(0 if version >= 5 else 1, value=b"t2-a") == 0
        # t1's second batch (sequence 1 under t1's epoch) arrives now
        late = await p.produce(1 if version >= 5 else 2, epoch=first_epoch, value=b"t1-late")
        end2 = await p.end(False, version)                       # t2 is aborted
        assert end2.error_code == 0
        assert await p.lso_reaches(5 if version < 5 else 4)
        committed = [v for _, v in read_all(cluster, topic, "read_committed", partitions=1,
                                            idle_s=1.5)]
        if version < 5:
            # the hole: the late t1 write joined t2 and shares its fate (aborted here; a
            # committed t2 would have published a write whose transaction had ended)
            assert late == 0 and committed == ["t1-a"]
            assert "t1-late" in [v for _, v in read_all(cluster, topic, "read_uncommitted",
                                                        partitions=1, idle_s=1.5)]
        else:
            assert late == 47                                    # INVALID_PRODUCER_EPOCH
            assert end2.producer_epoch == first_epoch + 2
            assert committed == ["t1-a"]
            assert "t1-late" not in [v for _, v in read_all(cluster, topic, "read_uncommitted",
                                                            partitions=1, idle_s=1.5)]
        await p.aclose()


async def test_hanging_transaction_found_and_aborted_by_an_operator(cluster):
    """KIP-664's path for `raftka transactions abort`: DescribeProducers on the leader shows the
    open transaction's start offset; WriteTxnMarkers(abort) for that producer closes it, the
    last stable offset moves past it, and read_committed readers never see its data."""
    from wire.messages.index_generated import REQUESTS
    topic = "txn-hanging"
    create_topic(cluster, topic, partitions=1)
    p = txn_producer(cluster, "tx-hanging", **{"transaction.timeout.ms": 600000})
    p.begin_transaction()
    p.produce(topic, b"stuck", partition=0)
    p.flush(30)
    leader = await _leader_conn(cluster, topic, 0)
    dp = REQUESTS[ApiKey.DESCRIBE_PRODUCERS]
    desc = await leader.request(dp(topics=[dp.TopicRequest(name=topic, partition_indexes=[0])]), 0)
    part = desc.topics[0].partitions[0]
    assert part.error_code == 0
    open_txns = [s for s in part.active_producers if s.current_txn_start_offset >= 0]
    assert [s.current_txn_start_offset for s in open_txns] == [0]
    victim = open_txns[0]
    wm = REQUESTS[ApiKey.WRITE_TXN_MARKERS]
    r = await leader.request(wm(markers=[wm.WritableTxnMarker(
        producer_id=victim.producer_id, producer_epoch=victim.producer_epoch,
        transaction_result=False, coordinator_epoch=victim.coordinator_epoch,
        topics=[wm.WritableTxnMarkerTopic(name=topic, partition_indexes=[0])])]), 1)
    assert r.markers[0].topics[0].partitions[0].error_code == 0
    lo = REQUESTS[ApiKey.LIST_OFFSETS]
    got = await leader.request(lo(replica_id=-1, isolation_level=1, topics=[lo.ListOffsetsTopic(
        name=topic, partitions=[lo.ListOffsetsPartition(partition_index=0, timestamp=-1)])]), 5)
    assert got.topics[0].partitions[0].offset == 2
    desc = await leader.request(dp(topics=[dp.TopicRequest(name=topic, partition_indexes=[0])]), 0)
    assert all(s.current_txn_start_offset == -1 for s in desc.topics[0].partitions[0].active_producers)
    await leader.aclose()
    assert read_all(cluster, topic, "read_committed", partitions=1, idle_s=1) == []
    p.abort_transaction(30)


def test_kafka_python_consume_transform_produce(cluster):
    """kafka-python's transactional loop: read_committed consumer, send_offsets_to_transaction,
    one aborted round that is redone; each output once, offsets committed with the outputs."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition as KTP
    from kafka.structs import OffsetAndMetadata
    src, dst, group = "kp-eos-in", "kp-eos-out", "g-kp-eos"
    create_topic(cluster, src)
    create_topic(cluster, dst)
    feed = Producer({"bootstrap.servers": cluster.bootstrap})
    for i in range(60):
        feed.produce(src, str(i).encode(), partition=i % 3)
    assert feed.flush(30) == 0
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, group_id=group,
                             isolation_level="read_committed", enable_auto_commit=False,
                             auto_offset_reset="earliest")
    parts = [KTP(src, i) for i in range(3)]
    consumer.assign(parts)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, transactional_id="tx-kp-eos")
    producer.init_transactions()
    done, rounds, aborted_once = 0, 0, False
    deadline = time.time() + 60
    while done < 60 and time.time() < deadline:
        batch = consumer.poll(timeout_ms=1000, max_records=15)
        records = [r for rs in batch.values() for r in rs]
        if not records:
            continue
        producer.begin_transaction()
        for r in records:
            producer.send(dst, b"out-" + r.value, partition=r.partition)
        offsets = {tp: OffsetAndMetadata(consumer.position(tp), "", -1) for tp in parts}
        producer.send_offsets_to_transaction(offsets, consumer.group_metadata())
        rounds += 1
        if rounds == 2 and not aborted_once:
            aborted_once = True
            producer.abort_transaction()
            for tp in parts:                       # redo from the committed offsets
                committed = consumer.committed(tp)
                consumer.seek(tp, committed if committed is not None else 0)
            continue
        producer.commit_transaction()
        done += len(records)
    producer.close()
    consumer.close()
    assert done == 60
    out = [v for _, v in read_all(cluster, dst, "read_committed")]
    assert sorted(out) == sorted(f"out-{i}" for i in range(60))
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
    got = c.committed([TopicPartition(src, i) for i in range(3)], timeout=30)
    c.close()
    assert [tp.offset for tp in got] == [20, 20, 20]


async def _coordinator_conn(cluster, key, key_type):
    from clients.connection import BrokerConnection
    from wire.messages.index_generated import REQUESTS
    host, port = cluster.bootstrap.split(",")[0].split(":")
    boot = BrokerConnection(host, int(port))
    await boot.connect()
    for _ in range(100):
        c = (await boot.request(REQUESTS[ApiKey.FIND_COORDINATOR](key_type=key_type, coordinator_keys=[key]), 4)).coordinators[0]
        if c.error_code == 0:
            break
        await trio.sleep(0.2)
    await boot.aclose()
    conn = BrokerConnection(c.host, c.port)
    await conn.connect()
    return conn


async def test_txn_offset_commit_is_unstable_until_the_commit_lands(cluster):
    """TxnOffsetCommit: invisible (UNSTABLE_OFFSET_COMMIT to require_stable fetchers, the old
    offset to others) until the transaction commits; then the committed offset."""
    from wire.messages.index_generated import REQUESTS
    tid, group, topic = "tx-offsets", "g-offsets", "txn-offsets"
    create_topic(cluster, topic, partitions=1)
    coord = await _coordinator_conn(cluster, tid, 1)
    gc = await _coordinator_conn(cluster, group, 0)
    for _ in range(100):
        init = await coord.request(REQUESTS[ApiKey.INIT_PRODUCER_ID](transactional_id=tid, transaction_timeout_ms=30000,
                                                producer_id=-1, producer_epoch=-1), 4)
        if init.error_code == 0:
            break
        await trio.sleep(0.2)
    pid, epoch = init.producer_id, init.producer_epoch
    for _ in range(100):
        add = await coord.request(REQUESTS[ApiKey.ADD_OFFSETS_TO_TXN](transactional_id=tid, producer_id=pid,
                                               producer_epoch=epoch, group_id=group), 3)
        if add.error_code == 0:
            break
        await trio.sleep(0.2)
    assert add.error_code == 0
    tc = REQUESTS[ApiKey.TXN_OFFSET_COMMIT]
    r = await gc.request(tc(transactional_id=tid, group_id=group, producer_id=pid,
                            producer_epoch=epoch, generation_id=-1, member_id="",
                            group_instance_id=None, topics=[tc.TxnOffsetCommitRequestTopic(
                                name=topic, partitions=[tc.TxnOffsetCommitRequestPartition(
                                    partition_index=0, committed_offset=42,
                                    committed_leader_epoch=-1, committed_metadata="m")])]), 3)
    assert r.topics[0].partitions[0].error_code == 0
    zombie = await gc.request(tc(transactional_id=tid, group_id=group, producer_id=pid,
                                 producer_epoch=epoch - 1 if epoch > 0 else epoch + 1,
                                 generation_id=-1, member_id="", group_instance_id=None,
                                 topics=[tc.TxnOffsetCommitRequestTopic(
                                     name=topic, partitions=[tc.TxnOffsetCommitRequestPartition(
                                         partition_index=0, committed_offset=999,
                                         committed_leader_epoch=-1, committed_metadata="z")])]), 3)
    assert zombie.topics[0].partitions[0].error_code == 47     # INVALID_PRODUCER_EPOCH
    of = REQUESTS[ApiKey.OFFSET_FETCH]

    async def fetch(stable):
        got = await gc.request(of(groups=[of.OffsetFetchRequestGroup(
            group_id=group, topics=[of.OffsetFetchRequestTopics(name=topic, partition_indexes=[0])])],
            require_stable=stable), 8)
        p = got.groups[0].topics[0].partitions[0]
        return p.error_code, p.committed_offset

    assert await fetch(True) == (88, -1)           # UNSTABLE_OFFSET_COMMIT
    assert await fetch(False) == (0, -1)           # not committed yet
    end = await coord.request(REQUESTS[ApiKey.END_TXN](transactional_id=tid, producer_id=pid,
                                           producer_epoch=epoch, committed=True), 3)
    assert end.error_code == 0
    for _ in range(100):
        if await fetch(True) == (0, 42):
            break
        await trio.sleep(0.1)
    assert await fetch(True) == (0, 42)
    await coord.aclose()
    await gc.aclose()


async def test_idle_transactional_id_expires(cluster):
    """transactional.id.expiration.ms: an idle transactional id is forgotten (tombstone); its
    next InitProducerId starts again with a fresh producer id."""
    from wire.messages.index_generated import REQUESTS
    tid = "tx-expire"
    coord = await _coordinator_conn(cluster, tid, 1)

    async def init():
        for _ in range(100):
            r = await coord.request(REQUESTS[ApiKey.INIT_PRODUCER_ID](transactional_id=tid, transaction_timeout_ms=30000,
                                                 producer_id=-1, producer_epoch=-1), 4)
            if r.error_code == 0:
                return r.producer_id, r.producer_epoch
            await trio.sleep(0.2)
        raise AssertionError("InitProducerId kept failing")

    first = await init()
    desc = await coord.request(REQUESTS[ApiKey.DESCRIBE_TRANSACTIONS](transactional_ids=[tid]), 0)
    assert desc.transaction_states[0].error_code == 0
    for _ in range(60):
        await trio.sleep(0.5)
        desc = await coord.request(REQUESTS[ApiKey.DESCRIBE_TRANSACTIONS](transactional_ids=[tid]), 0)
        if desc.transaction_states[0].error_code == 105:       # TRANSACTIONAL_ID_NOT_FOUND
            break
    assert desc.transaction_states[0].error_code == 105
    second = await init()
    assert second[0] != first[0] and second[1] == 0
    await coord.aclose()
