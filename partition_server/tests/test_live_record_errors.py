"""KIP-467 per-record errors, live, with confluent-kafka, kafka-python, aiokafka and our producer:
a record with a null key on a compacted topic is refused with INVALID_RECORD, one whose
CreateTime timestamp is outside message.timestamp.before/after.max.ms with INVALID_TIMESTAMP;
the batch is not appended (the log end offset counts only the records accepted), and the clients
surface the broker's per-record message."""

from __future__ import annotations

import time
import uuid

import pytest
import trio

from clients.admin import LATEST, AdminClient
from clients.cluster import TopicPartition
from clients.producer import Producer
from partition_server.testing import LiveCluster
from wire.errors import ErrorCode

pytestmark = pytest.mark.live
HOUR = 3_600_000
KEY_MSG = "Compacted topic cannot accept message without key in topic partition {}-0"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from confluent_kafka.admin import AdminClient as CAdmin, NewTopic
    with LiveCluster(tmp_path_factory.mktemp("rec")) as c:
        c.compacted, c.timed = f"cmp-{uuid.uuid4().hex[:6]}", f"ts-{uuid.uuid4().hex[:6]}"
        admin = CAdmin({"bootstrap.servers": c.bootstrap})
        futures = admin.create_topics([
            NewTopic(c.compacted, 1, 3, config={"cleanup.policy": "compact"}),
            NewTopic(c.timed, 1, 3, config={"message.timestamp.before.max.ms": str(HOUR),
                                            "message.timestamp.after.max.ms": "60000"})])
        for f in futures.values():
            f.result(30)
        yield c


def _end_offset(bootstrap: str, topic: str) -> int:
    async def ask():
        async with AdminClient(bootstrap) as admin:
            return (await admin.list_offsets({TopicPartition(topic, 0): LATEST}))[
                TopicPartition(topic, 0)]
    return trio.run(ask)[0]


def _confluent(bootstrap: str, topic: str, key, timestamp: int = 0):
    from confluent_kafka import Producer as CProducer
    p = CProducer({"bootstrap.servers": bootstrap, "acks": "all", "retries": 0})
    outcome = []
    p.produce(topic, value=b"v", key=key, partition=0, timestamp=timestamp,
              on_delivery=lambda err, msg: outcome.append(err))
    assert p.flush(30) == 0
    return outcome[0]


def test_confluent_kafka_sees_invalid_record_and_invalid_timestamp(cluster):
    assert _confluent(cluster.bootstrap, cluster.compacted, b"k") is None
    err = _confluent(cluster.bootstrap, cluster.compacted, None)
    assert err is not None and err.code() == ErrorCode.INVALID_RECORD, err
    now = int(time.time() * 1000)
    assert _confluent(cluster.bootstrap, cluster.timed, b"k", now) is None
    for ts in (now - 2 * HOUR, now + HOUR):
        err = _confluent(cluster.bootstrap, cluster.timed, b"k", ts)
        assert err is not None and err.code() == ErrorCode.INVALID_TIMESTAMP, err
    assert _end_offset(cluster.bootstrap, cluster.compacted) == 1
    assert _end_offset(cluster.bootstrap, cluster.timed) == 1


def test_kafka_python_sees_the_record_error(cluster):
    from kafka import KafkaProducer
    from kafka.errors import InvalidRecordError, InvalidTimestampError
    before = _end_offset(cluster.bootstrap, cluster.compacted)
    p = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", retries=0)
    try:
        with pytest.raises(InvalidRecordError):
            p.send(cluster.compacted, value=b"v", key=None, partition=0).get(30)
        with pytest.raises(InvalidTimestampError):
            p.send(cluster.timed, value=b"v", key=b"k", partition=0,
                   timestamp_ms=int(time.time() * 1000) + HOUR).get(30)
    finally:
        p.close(10)
    assert _end_offset(cluster.bootstrap, cluster.compacted) == before


def test_our_producer_names_the_record_and_why(cluster):
    async def run():
        async with Producer(cluster.bootstrap, {"acks": "all", "linger.ms": "2000"}) as p:
            # one batch: the keyed records fail with the batch, the null key with its reason
            futures = [await p.send(cluster.compacted, b"v", key=k, partition=0)
                       for k in (b"a", None, b"b")]
            await p.flush()
            errors = [f.exception() for f in futures]
            late = await p.send(cluster.timed, b"v", key=b"k", partition=0,
                                timestamp_ms=int(time.time() * 1000) + HOUR)
            await p.flush()
            return errors, late.exception()
    before = _end_offset(cluster.bootstrap, cluster.compacted)
    errors, late = trio.run(run)
    assert all(e is not None and e.code == ErrorCode.INVALID_RECORD for e in errors), errors
    assert KEY_MSG.format(cluster.compacted) in str(errors[1])
    assert "record 1" in str(errors[1])
    assert "One or more records have been rejected due to 1 record errors" in str(errors[0])
    assert late is not None and late.code == ErrorCode.INVALID_TIMESTAMP
    assert "is out of range. The timestamp should be within" in str(late)
    assert _end_offset(cluster.bootstrap, cluster.compacted) == before


def test_aiokafka_sees_the_refusal(cluster):
    """aiokafka 0.14 has no class for INVALID_RECORD (87): it raises its UnknownError, as it
    would against Kafka; INVALID_TIMESTAMP it knows."""
    import asyncio

    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import InvalidTimestampError, UnknownError

    async def run():
        p = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
        await p.start()
        try:
            with pytest.raises(UnknownError):
                await p.send_and_wait(cluster.compacted, b"v", key=None, partition=0)
            with pytest.raises(InvalidTimestampError):
                await p.send_and_wait(cluster.timed, b"v", key=b"k", partition=0,
                                      timestamp_ms=int(time.time() * 1000) - 2 * HOUR)
            return await p.send_and_wait(cluster.compacted, b"v", key=b"k", partition=0)
        finally:
            await p.stop()
    before = _end_offset(cluster.bootstrap, cluster.compacted)
    ok = asyncio.run(run())
    assert ok.offset == before and _end_offset(cluster.bootstrap, cluster.compacted) == before + 1


def test_a_topic_made_compacted_by_alter_configs_refuses_null_keys_at_once(cluster):
    """The rules follow a topic config changed on a running cluster: the open logs take the
    new config (replica_manager._reconfigure), no restart needed."""
    from confluent_kafka.admin import AdminClient as CAdmin, ConfigResource, NewTopic
    topic = f"alt-{uuid.uuid4().hex[:6]}"
    admin = CAdmin({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(30)
    assert _confluent(cluster.bootstrap, topic, None) is None       # delete policy: allowed
    res = ConfigResource("topic", topic, set_config={"cleanup.policy": "compact"})
    admin.alter_configs([res])[res].result(30)
    deadline = time.monotonic() + 30
    while (err := _confluent(cluster.bootstrap, topic, None)) is None:
        assert time.monotonic() < deadline, "a null key is still accepted after the change"
        time.sleep(0.2)
    assert err.code() == ErrorCode.INVALID_RECORD


def _until(predicate, what: str, timeout_s: float = 30):
    deadline = time.monotonic() + timeout_s
    while not (outcome := predicate()):
        assert time.monotonic() < deadline, what
        time.sleep(0.2)
    return outcome


def test_log_message_timestamp_limits_are_dynamic_broker_configs(cluster):
    """log.message.timestamp.before.max.ms as Kafka's dynamic broker config: the cluster default
    reaches the open logs at once, a per-broker value overrides it, deleting them restores the
    static value (no limit)."""
    from confluent_kafka.admin import AdminClient as CAdmin, NewTopic
    from clients.admin import AlterConfigOp, AlterConfigOpType, ConfigResource, ConfigResourceType
    topic = f"dyn-{uuid.uuid4().hex[:6]}"
    admin = CAdmin({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(30)
    old = int(time.time() * 1000) - 2 * HOUR
    assert _confluent(cluster.bootstrap, topic, b"k", old) is None

    def alter(name: str, value: str | None):     # ours: confluent-kafka refuses the "" name
        op = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
        res = ConfigResource(ConfigResourceType.BROKER, name)

        async def run():
            async with AdminClient(cluster.bootstrap) as ours:
                return await ours.incremental_alter_configs({res: [AlterConfigOp(
                    "log.message.timestamp.before.max.ms", value, op)]})
        assert trio.run(run) == {res: None}

    alter("", str(HOUR))                            # the cluster-wide default
    err = _until(lambda: _confluent(cluster.bootstrap, topic, b"k", old),
                 "a 2-hour-old record is still accepted under a 1-hour cluster default")
    assert err.code() == ErrorCode.INVALID_TIMESTAMP
    for b in range(3):                              # per broker: beats the default
        alter(str(b), str(3 * HOUR))
    _until(lambda: _confluent(cluster.bootstrap, topic, b"k", old) is None,
           "per-broker values did not override the cluster default")
    alter("", None)
    for b in range(3):
        alter(str(b), None)
    assert _confluent(cluster.bootstrap, topic, b"k", old) is None
