"""Issue #21 item 5, the small gaps, against real client libraries:

- a partition number past an existing topic's count: ListOffsets, Fetch and Produce answer
  UNKNOWN_TOPIC_OR_PARTITION on every broker (NOT_LEADER_OR_FOLLOWER stays the answer for a
  partition that exists but is led elsewhere), sent with aiokafka's own request classes
  (librdkafka refuses such a partition locally, before asking);
- an OffsetCommit naming a topic that does not exist is refused for it with
  UNKNOWN_TOPIC_OR_PARTITION while the rest of the commit is stored (KafkaApis'
  handleOffsetCommitRequest), with confluent-kafka; TxnOffsetCommit likewise, with aiokafka;
- the deprecated topic config `message.format.version` is accepted (CreateTopics,
  IncrementalAlterConfigs), shown by DescribeConfigs and ignored, as in Kafka 3.x; a value that is
  no Kafka version is INVALID_CONFIG, with confluent-kafka.
"""

import asyncio
import time

import pytest
from aiokafka.client import AIOKafkaClient, CoordinationType
from aiokafka.errors import GroupCoordinatorNotAvailableError
from aiokafka.protocol.fetch import FetchRequest
from aiokafka.protocol.offset import OffsetRequest
from aiokafka.protocol.produce import ProduceRequest
from aiokafka.protocol.transaction import TxnOffsetCommitRequest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                                   NewTopic)

from partition_server.testing import LiveCluster
from wire.errors import ErrorCode

pytestmark = pytest.mark.live
TOPIC = "gaps"
NONE, UNKNOWN, NOT_LEADER = ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, \
    ErrorCode.NOT_LEADER_OR_FOLLOWER


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with LiveCluster(tmp_path_factory.mktemp("gaps")) as c:
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        for f in admin.create_topics([NewTopic(TOPIC, 2, 3)]).values():
            f.result(30)
        yield c


def _batch() -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=0,
                                  producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                  batch_size=16384)
    b.append(0, timestamp=None, key=b"k", value=b"v", headers=[])
    return bytes(b.build())


async def _answers(bootstrap: str) -> dict:
    """{(api, broker, partition): error code} for partitions 0 (exists) and 5 (does not)."""
    client = AIOKafkaClient(bootstrap_servers=bootstrap)
    await client.bootstrap()
    try:
        deadline = time.monotonic() + 30
        while True:      # wait until partition 0 has a leader that answers for it
            await client.force_metadata_update()
            leader = client.cluster.leader_for_partition(TopicPartition(TOPIC, 0))
            if leader is not None and leader >= 0:
                r = await client.send(leader, OffsetRequest(-1, 0, [(TOPIC, [(0, -1)])]))
                if r.topics[0][1][0][1] == NONE:
                    break
            assert time.monotonic() < deadline, "partition 0 never led"
            await asyncio.sleep(0.2)
        out = {"leader": leader}
        for broker in (0, 1, 2):
            r = await client.send(broker, OffsetRequest(-1, 0, [(TOPIC, [(0, -1), (5, -1)])]))
            out |= {("list_offsets", broker, p[0]): p[1] for p in r.topics[0][1]}
            r = await client.send(broker, FetchRequest(10, 1, 100_000, 0,
                                                       [(TOPIC, [(0, 0, 100_000),
                                                                 (5, 0, 100_000)])]))
            out |= {("fetch", broker, p[0]): p[1] for p in r.topics[0][1]}
            r = await client.send(broker, ProduceRequest(None, 1, 5000,
                                                         [(TOPIC, [(5, _batch())])]))
            out |= {("produce", broker, p[0]): p[1] for p in r.topics[0][1]}
        return out
    finally:
        await client.close()


def test_a_missing_partition_number_is_unknown_topic_or_partition(cluster):
    answers = asyncio.run(_answers(cluster.bootstrap))
    leader = answers.pop("leader")
    for broker in (0, 1, 2):
        for api in ("list_offsets", "fetch", "produce"):
            assert answers[(api, broker, 5)] == UNKNOWN, (api, broker)
        # partition 0 exists: served by its leader, the others send the client to it
        for api in ("list_offsets", "fetch"):
            assert answers[(api, broker, 0)] == (NONE if broker == leader else NOT_LEADER), \
                (api, broker)


def test_offset_commit_for_a_missing_topic_is_refused_and_the_rest_stored(cluster):
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "gaps-commit",
                         "enable.auto.commit": False})
    try:
        with pytest.raises(KafkaException) as raised:
            consumer.commit(offsets=[TopicPartition("no-such-topic", 0, 5),
                                     TopicPartition(TOPIC, 7, 3),
                                     TopicPartition(TOPIC, 0, 1)], asynchronous=False)
        assert raised.value.args[0].code() == UNKNOWN
        committed = consumer.committed([TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 7),
                                        TopicPartition("no-such-topic", 0)], timeout=30)
        assert [(t.topic, t.partition, t.offset) for t in committed] == [
            (TOPIC, 0, 1), (TOPIC, 7, -1001), ("no-such-topic", 0, -1001)]
    finally:
        consumer.close()


async def _txn_offset_commit(bootstrap: str):
    """Per (topic, partition) codes of one TxnOffsetCommit from a producer id that has no
    transaction: what does not exist is refused as such before anything else is looked at."""
    client = AIOKafkaClient(bootstrap_servers=bootstrap)
    await client.bootstrap()
    try:
        deadline = time.monotonic() + 30
        while True:      # the first lookup creates __consumer_offsets: not available at once
            try:
                coordinator = await client.coordinator_lookup(CoordinationType.GROUP, "gaps-txn")
                break
            except GroupCoordinatorNotAvailableError:
                assert time.monotonic() < deadline, "no group coordinator"
                await asyncio.sleep(0.3)
        r = await client.send(coordinator, TxnOffsetCommitRequest(
            "gaps-txn-id", "gaps-txn", 4242, 0,
            [("no-such-topic", [(0, 5, "")]), (TOPIC, [(9, 5, ""), (0, 5, "")])]))
        return {(t, p[0]): p[1] for t, ps in r.errors for p in ps}
    finally:
        await client.close()


def test_txn_offset_commit_for_a_missing_topic_or_partition(cluster):
    codes = asyncio.run(_txn_offset_commit(cluster.bootstrap))
    assert codes[("no-such-topic", 0)] == UNKNOWN and codes[(TOPIC, 9)] == UNKNOWN
    # the partition that exists goes on to the transaction checks, which this producer fails
    assert codes[(TOPIC, 0)] not in (NONE, UNKNOWN)


def _describe(admin, topic: str):
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    return admin.describe_configs([res])[res].result(30)["message.format.version"]


def test_message_format_version_is_accepted_shown_and_ignored(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for f in admin.create_topics([NewTopic("old-format", 1, 3,
                                           config={"message.format.version": "0.10.2"})]).values():
        f.result(30)
    entry = _describe(admin, "old-format")
    assert (entry.value, entry.is_default) == ("0.10.2", False)
    assert _describe(admin, TOPIC).value == "3.0-IV1"        # Kafka 3.x's default, shown
    res = ConfigResource(ConfigResource.Type.TOPIC, TOPIC, incremental_configs=[
        ConfigEntry("message.format.version", "2.8", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(30)
    deadline = time.monotonic() + 30
    while _describe(admin, TOPIC).value != "2.8":
        assert time.monotonic() < deadline
        time.sleep(0.2)
    # not a Kafka version: refused, as Kafka's MetadataVersionValidator does
    for f in admin.create_topics([NewTopic("bad-format", 1, 3,
                                           config={"message.format.version": "1.x"})]).values():
        with pytest.raises(KafkaException) as raised:
            f.result(30)
        assert raised.value.args[0].code() == ErrorCode.INVALID_CONFIG
    # ignored: the topic takes and serves record batches v2 as any other
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    producer.produce("old-format", b"v2 anyway")
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "gaps-format",
                         "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe(["old-format"])
        deadline = time.monotonic() + 30
        while (msg := consumer.poll(0.5)) is None or msg.error():
            assert time.monotonic() < deadline, "nothing read back"
        assert msg.value() == b"v2 anyway"
    finally:
        consumer.close()
