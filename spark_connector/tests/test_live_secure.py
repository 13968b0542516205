"""The connector's client against `raftka dev --secure` brokers: SASL_SSL with SCRAM-SHA-512,
SCRAM-SHA-256 and PLAIN, the dev CA as trust store; a wrong password is refused."""

from __future__ import annotations

import pytest

from clients.cli.dev import DevLayout
from partition_server.testing import LiveCluster, free_base_port
from spark_connector import kafka_io
from spark_connector.options import sink_options
from spark_connector.sink import TopicWriter

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    from clients.cli.secure_dev import SecureDev
    c = LiveCluster(tmp_path_factory.mktemp("secure-cluster"))
    c.layout = DevLayout(c.layout.data_dir, free_base_port(), {}, True)
    c.start(timeout_s=120)
    try:
        SecureDev(c.layout).bootstrap_super_user(timeout_s=60)
        props = SecureDev(c.layout).client_properties()
        yield c, props
    finally:
        kafka_io.close_all()
        c.stop()


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"])
def test_sasl_ssl_produce_and_fetch(secure, mechanism):
    c, props = secure
    opts = {"kafka.bootstrap.servers": c.bootstrap, "kafka.client.id": f"secure-{mechanism}",
            **{f"kafka.{k}": v for k, v in props.items()}, "kafka.sasl.mechanism": mechanism}
    o = sink_options({**opts, "topic": "secured"})
    assert o.client.security_protocol == "SASL_SSL"
    client = kafka_io.get_client(o.client)
    from spark_connector.tests.live_helpers import create_topic
    create_topic(c.bootstrap, "secured", 1, rf=1, client_config=o.client)
    before = client.list_offsets({("secured", 0): kafka_io.LATEST})[("secured", 0)]
    w = TopicWriter(o)
    for i in range(5):
        w.add("secured", 0, None, b"m%d" % i)
    w.flush()
    res = client.fetch("secured", 0, before)
    assert res.error_code == 0 and res.high_watermark == before + 5


def test_wrong_password_is_refused(secure):
    c, props = secure
    cfg = kafka_io.ClientConfig.from_kafka_params({
        "bootstrap.servers": c.bootstrap, **props, "sasl.password": "wrong",
        "request.timeout.ms": "5000"})
    with pytest.raises(kafka_io.KafkaError, match="SASL_AUTHENTICATION_FAILED"):
        kafka_io.KafkaClient(cfg).topic_partitions(["secured"])
