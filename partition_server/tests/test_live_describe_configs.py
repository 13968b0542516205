"""Issue #21 item 5: DescribeConfigs of a BROKER (and TOPIC) resource answers like Kafka's broker,
seen through confluent-kafka, kafka-python 3, kafka-python 2.0.2 and aiokafka: every config we
honour (advertised.listeners included, null when unset), sources per level
(DYNAMIC_BROKER / DYNAMIC_DEFAULT_BROKER / STATIC_BROKER / DEFAULT), Kafka's config types (never
UNKNOWN), PASSWORD values redacted, synonyms most specific first. And ApiVersions: kafka-python
infers Kafka 3.9 (its test is Fetch v17) and reads records through Fetch v17 (topics by id).
"""

import asyncio
import json
import subprocess

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource as AioResource
from aiokafka.admin.config_resource import ConfigResourceType as AioType
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic
from kafka.admin import ConfigResource as KpResource
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient

from clients.cli.main import main as cli_main
from partition_server.config import BROKER_CONFIG_DEFS
from partition_server.testing import LiveCluster
from partition_server.tests.test_live_cluster import kp2_python

pytestmark = pytest.mark.live
TOPIC = "described"
STATIC = {"log.retention.ms": "3600000", "ssl.key.password": "not-for-your-eyes"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with LiveCluster(tmp_path_factory.mktemp("describe-configs"), overrides=STATIC,
                     brokers=1) as c:
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        for f in admin.create_topics([NewTopic(TOPIC, 1, 1, config={"min.insync.replicas": "1"})]).values():
            f.result(30)
        # one dynamic level each: this broker's own, and the cluster-wide default (a resource
        # name librdkafka and kafka-python refuse to send: our CLI, as kafka-configs.sh)
        for who in (["--entity-name", "0"], ["--entity-default"]):
            value = "1000" if who[0] == "--entity-name" else "2000"
            assert cli_main(["configs", "alter", "--entity-type", "brokers", *who, "--add-config",
                             f"log.retention.bytes={value}", "--bootstrap-server",
                             c.bootstrap]) == 0
        yield c


def test_confluent_kafka_sees_sources_synonyms_and_redaction(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    res = ConfigResource("BROKER", "0")
    got = admin.describe_configs([res])[res].result(30)
    assert set(BROKER_CONFIG_DEFS) | {"broker.id"} <= set(got)
    assert got["advertised.listeners"].value is None            # unset: listed, null
    assert got["listeners"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert got["broker.id"].value == got["node.id"].value == "0"
    assert got["num.partitions"].value == "1" and got["num.partitions"].is_default
    assert got["num.partitions"].source == ConfigSource.DEFAULT_CONFIG.value
    # confluent-kafka keys synonyms by name, so levels of one name collapse: sources here,
    # the synonym lists with kafka-python 2 and aiokafka below
    assert (got["log.retention.ms"].value, got["log.retention.ms"].source) == (
        "3600000", ConfigSource.STATIC_BROKER_CONFIG.value)
    assert (got["log.retention.bytes"].value, got["log.retention.bytes"].source) == (
        "1000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    assert got["log.retention.bytes"].is_read_only is False       # dynamic broker config
    assert got["log.dirs"].is_read_only is True
    secret = got["ssl.key.password"]
    assert secret.is_sensitive and secret.value is None
    assert all(s.value is None for s in secret.synonyms.values())
    # a topic without overrides takes the broker's levels, under the broker's key names
    res = ConfigResource("TOPIC", TOPIC)
    topic = admin.describe_configs([res])[res].result(30)
    assert topic["retention.bytes"].value == "1000"
    assert topic["retention.bytes"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    assert (topic["retention.ms"].value, topic["retention.ms"].source) == (
        "3600000", ConfigSource.STATIC_BROKER_CONFIG.value)
    assert list(topic["retention.ms"].synonyms) == ["log.retention.ms"]
    assert topic["compression.type"].source == ConfigSource.DEFAULT_CONFIG.value


def test_kafka_python_3_sees_kafka_config_types(cluster):
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        got = admin.describe_configs([KpResource("BROKER", "0"), KpResource("TOPIC", TOPIC)],
                                     include_synonyms=True, config_filter="all")
    finally:
        admin.close()
    broker, topic = got["broker"]["0"], got["topic"][TOPIC]
    types = {k: v["config_type"] for k, v in {**broker, **topic}.items()}
    assert "UNKNOWN" not in types.values(), types
    expected = {"advertised.listeners": "STRING", "listeners": "STRING", "log.dirs": "STRING",
                "num.partitions": "INT", "log.retention.ms": "LONG",
                "auto.create.topics.enable": "BOOLEAN", "process.roles": "LIST",
                "offsets.topic.replication.factor": "SHORT", "ssl.key.password": "PASSWORD",
                "retention.ms": "LONG", "min.cleanable.dirty.ratio": "DOUBLE",
                "cleanup.policy": "LIST", "segment.bytes": "INT"}
    assert {k: types[k] for k in expected} == expected
    assert broker["ssl.key.password"]["value"] is None
    assert broker["ssl.key.password"]["is_sensitive"] is True
    assert broker["log.retention.bytes"]["config_source"] == "DYNAMIC_BROKER_CONFIG"
    assert broker["num.partitions"]["documentation"] is None       # not asked for


KP2_SCRIPT = r"""
import sys
from kafka.admin import ConfigResource, KafkaAdminClient
admin = KafkaAdminClient(bootstrap_servers=sys.argv[1])
[resp] = admin.describe_configs([ConfigResource("BROKER", "0")], include_synonyms=True)
for name, value, _ro, source, sensitive, synonyms in resp.resources[0][4]:
    print(name, value, source, sensitive, ",".join(str(s[2]) for s in synonyms))
admin.close()
"""


def test_kafka_python_2_sees_sources_and_synonyms(cluster):
    out = subprocess.run([kp2_python(), "-c", KP2_SCRIPT, cluster.bootstrap],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = {line.split(" ")[0]: line.split(" ")[1:] for line in out.stdout.splitlines()}
    assert rows["log.retention.bytes"] == ["1000", "2", "False", "2,3,5"]
    assert rows["log.retention.ms"] == ["3600000", "4", "False", "4,5"]
    assert rows["ssl.key.password"] == ["None", "4", "True", "4"]
    assert rows["advertised.listeners"][:2] == ["None", "5"]


def test_aiokafka_sees_sources_and_synonyms(cluster):
    async def describe():
        admin = AIOKafkaAdminClient(bootstrap_servers=cluster.bootstrap)
        await admin.start()
        try:
            return await admin.describe_configs(
                [AioResource(AioType.BROKER, "0"), AioResource(AioType.TOPIC, TOPIC)],
                include_synonyms=True)
        finally:
            await admin.close()
    responses = asyncio.run(describe())
    by_resource = {r[3]: {c[0]: c for c in r[4]} for resp in responses for r in resp.resources}
    name, value, read_only, source, sensitive, synonyms = by_resource["0"]["log.retention.bytes"]
    assert (value, read_only, source, sensitive) == ("1000", False, 2, False)
    assert [s[2] for s in synonyms] == [2, 3, 5]
    assert by_resource["0"]["ssl.key.password"][1] is None
    assert by_resource[TOPIC]["retention.bytes"][1:4] == ("1000", False, 2)


def test_kafka_python_infers_3_9_and_fetches_at_v17(cluster):
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
    try:
        for i in range(5):
            producer.send(TOPIC, key=b"k", value=b"v%d" % i)
        producer.flush(30)
    finally:
        producer.close()
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, enable_auto_commit=False,
                             consumer_timeout_ms=20000)
    try:
        assert consumer.config["api_version"] == (3, 9)         # inferred from ApiVersions
        tp = TopicPartition(TOPIC, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        values = []
        for record in consumer:
            values.append(record.value)
            if len(values) == 5:
                break
    finally:
        consumer.close()
    assert values == [b"v%d" % i for i in range(5)]


def test_cluster_default_resource_lists_only_what_is_set_there(cluster, capsys):
    """BROKER "" (kafka-configs.sh --entity-default) answers the cluster-wide dynamic defaults
    alone, as Kafka's broker does, not every config of the answering broker."""
    capsys.readouterr()
    assert cli_main(["configs", "describe", "--entity-type", "brokers", "--entity-default",
                     "--all", "--output", "json", "--bootstrap-server", cluster.bootstrap]) == 0
    got = json.loads(capsys.readouterr().out)
    assert [(c["name"], c["value"], c["source"]) for c in got["configs"]] == [
        ("log.retention.bytes", "2000", "DYNAMIC_DEFAULT_BROKER_CONFIG")]
