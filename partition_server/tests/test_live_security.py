"""Security against a live secure cluster (`raftka dev --secure` layout plus a SASL_PLAINTEXT
listener): real clients authenticate or are refused, ACLs decide every request, strangers on
inter-node ports learn nothing, and garbage or floods do not disturb an authenticated client.

One cluster per module: brokers listen on SASL_SSL (base+id, inter-broker) and SASL_PLAINTEXT
(base+1300+id); controllers on SASL_SSL open only to the inter-node user.
"""

import asyncio
import dataclasses
import os
import socket
import ssl
import struct
import time
import uuid

import pytest
import trio
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType,
                                   AdminClient, NewTopic, ResourcePatternType, ResourceType)

from clients.cli.dev import DevLayout
from clients.cli.secure_dev import SecureDev
from clients.cli.users import alter
from partition_server.testing import LiveCluster
from wire.connection import ClientConnection
from wire.messages.index_generated import REQUESTS

pytestmark = pytest.mark.live

PASSWORD = "alice-secret"


@dataclasses.dataclass(frozen=True)
class TwoListenerLayout(DevLayout):
    def plain_port(self, broker_id: int) -> int:
        return self.base_port + 1300 + broker_id

    def broker_properties(self, broker_id: int) -> dict[str, str]:
        props = super().broker_properties(broker_id)
        props["listeners"] += f",SASL_PLAINTEXT://127.0.0.1:{self.plain_port(broker_id)}"
        return props


class Secure:
    def __init__(self, cluster: LiveCluster):
        self.cluster = cluster
        self.layout = cluster.layout
        self.dev = SecureDev(self.layout)
        self.ca = str(self.dev.dir / "ca.pem")
        self.ssl_bootstrap = self.layout.bootstrap_servers
        self.plain_bootstrap = ",".join(f"127.0.0.1:{self.layout.plain_port(b)}" for b in range(3))

    def conf(self, user="admin", password=None, mechanism="SCRAM-SHA-512", protocol="SASL_SSL"):
        if user == "admin" and password is None:
            password = self.dev.client_properties()["sasl.password"]
        conf = {"bootstrap.servers": self.ssl_bootstrap if "SSL" in protocol else self.plain_bootstrap,
                "security.protocol": protocol}
        if protocol.startswith("SASL"):
            conf.update({"sasl.mechanism": mechanism, "sasl.username": user,
                         "sasl.password": password})
        if "SSL" in protocol:
            conf["ssl.ca.location"] = self.ca
        return conf

    def admin(self) -> AdminClient:
        return AdminClient(self.conf())

    def add_user(self, user: str, password: str) -> None:
        for mechanism in (2, 1):        # one request each: a user twice in one is refused
            results = trio.run(alter, self.ssl_bootstrap, self.dev.client_properties(),
                               [(user, mechanism, password, 4096)])
            assert all(code == 0 for code, _ in results.values()), results

    def acl(self, principal, op, name, rtype=ResourceType.TOPIC, pattern=ResourcePatternType.LITERAL,
            perm=AclPermissionType.ALLOW):
        return AclBinding(rtype, name, pattern, principal, "*", op, perm)

    def create_acls(self, *bindings) -> None:
        admin = self.admin()        # must outlive its futures
        for f in admin.create_acls(list(bindings)).values():
            f.result(15)

    def delete_acls(self, *bindings) -> None:
        filters = [AclBindingFilter(b.restype, b.name, b.resource_pattern_type, b.principal, b.host,
                                    b.operation, b.permission_type) for b in bindings]
        admin = self.admin()
        for f in admin.delete_acls(filters).values():
            f.result(15)

    def create_topic(self, name: str, partitions: int = 1) -> None:
        admin = self.admin()
        for f in admin.create_topics([NewTopic(name, partitions, 3)]).values():
            f.result(20)

    def end_offset(self, topic: str) -> int:
        c = Consumer({**self.conf(), "group.id": "probe-" + uuid.uuid4().hex[:6]})
        try:
            return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
        finally:
            c.close()


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    c = LiveCluster(tmp_path_factory.mktemp("secure"),
                    {"max.connections.per.ip": "120", "connections.max.reauth.ms": "60000"})
    c.layout = TwoListenerLayout(c.layout.data_dir, c.layout.base_port, c.layout.overrides, True)
    c.start()
    try:
        SecureDev(c.layout).bootstrap_super_user()
        s = Secure(c)
        s.add_user("alice", PASSWORD)
        s.create_acls(s.acl("User:alice", AclOperation.ALL, "sec-", pattern=ResourcePatternType.PREFIXED),
                      s.acl("User:alice", AclOperation.READ, "sec-", rtype=ResourceType.GROUP,
                            pattern=ResourcePatternType.PREFIXED))
        yield s
    finally:
        c.stop()


# -- real clients: right password works, wrong and none are refused -------------------------------

COMBOS = [("SASL_SSL", "SCRAM-SHA-512"), ("SASL_PLAINTEXT", "PLAIN"), ("SASL_PLAINTEXT", "SCRAM-SHA-512"),
          ("SASL_SSL", "PLAIN")]


def _confluent_produce(conf, topic, errors=None):
    """The delivery error of one record (None: delivered)."""
    p = Producer({**conf, "error_cb": (errors if errors is not None else []).append,
                  "message.timeout.ms": 4000})
    delivered = []
    p.produce(topic, b"hello", on_delivery=lambda err, msg: delivered.append(err))
    p.flush(10)
    assert delivered, "no delivery report"
    return delivered[0]


def test_confluent_kafka(secure):
    topic = "sec-ck-" + uuid.uuid4().hex[:6]
    secure.create_topic(topic)
    for protocol, mech in COMBOS:
        assert _confluent_produce(secure.conf("alice", PASSWORD, mech, protocol), topic) is None, \
            (protocol, mech)
        errors = []
        assert _confluent_produce(secure.conf("alice", "wrong", mech, protocol), topic, errors)
        assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), (protocol, mech, errors)
    # no credentials at all: TLS (or plain TCP) without SASL gets nowhere
    for protocol in ("SSL", "PLAINTEXT"):
        assert _confluent_produce(secure.conf(protocol=protocol), topic) is not None
    assert secure.end_offset(topic) == len(COMBOS)


def test_kafka_python(secure):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.errors import KafkaError as KPError
    topic = "sec-kp-" + uuid.uuid4().hex[:6]
    secure.create_topic(topic)

    def kw(protocol, mech, password):
        bootstrap = secure.ssl_bootstrap if "SSL" in protocol else secure.plain_bootstrap
        args = dict(bootstrap_servers=bootstrap.split(","), security_protocol=protocol,
                    sasl_mechanism=mech, sasl_plain_username="alice", sasl_plain_password=password,
                    request_timeout_ms=8000)
        if "SSL" in protocol:
            args["ssl_cafile"] = secure.ca
            args["ssl_check_hostname"] = False
        return args

    for protocol, mech in COMBOS:
        producer = KafkaProducer(max_block_ms=10000, **kw(protocol, mech, PASSWORD))
        producer.send(topic, b"kp").get(timeout=15)
        producer.close()
        with pytest.raises((KPError, OSError)):
            KafkaProducer(max_block_ms=5000, **kw(protocol, mech, "wrong")).send(
                topic, b"x").get(timeout=10)
    with pytest.raises((KPError, OSError)):
        KafkaProducer(bootstrap_servers=secure.plain_bootstrap.split(","), request_timeout_ms=3000,
                      max_block_ms=3000).send(topic, b"x").get(5)
    consumer = KafkaConsumer(topic, group_id="sec-kp-group", auto_offset_reset="earliest",
                             consumer_timeout_ms=10000, **kw("SASL_SSL", "SCRAM-SHA-512", PASSWORD))
    got = [m.value for m in consumer]
    consumer.close()
    assert got == [b"kp"] * len(COMBOS)


def test_aiokafka(secure):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.errors import KafkaError as AKError
    from aiokafka.helpers import create_ssl_context
    topic = "sec-ak-" + uuid.uuid4().hex[:6]
    secure.create_topic(topic)

    def kw(protocol, mech, password):
        bootstrap = secure.ssl_bootstrap if "SSL" in protocol else secure.plain_bootstrap
        args = dict(bootstrap_servers=bootstrap, security_protocol=protocol, sasl_mechanism=mech,
                    sasl_plain_username="alice", sasl_plain_password=password,
                    request_timeout_ms=8000)
        if "SSL" in protocol:
            args["ssl_context"] = create_ssl_context(cafile=secure.ca)
        return args

    async def run():
        for protocol, mech in COMBOS:
            producer = AIOKafkaProducer(**kw(protocol, mech, PASSWORD))
            await producer.start()
            await producer.send_and_wait(topic, b"ak")
            await producer.stop()
            bad = AIOKafkaProducer(**kw(protocol, mech, "wrong"))
            with pytest.raises((AKError, OSError)):
                await bad.start()
            await bad.stop()
        none = AIOKafkaProducer(bootstrap_servers=secure.plain_bootstrap, request_timeout_ms=3000)
        with pytest.raises((AKError, OSError, asyncio.TimeoutError)):
            await asyncio.wait_for(none.start(), 10)
        await none.stop()
        consumer = AIOKafkaConsumer(topic, group_id="sec-ak-group", auto_offset_reset="earliest",
                                    **kw("SASL_SSL", "SCRAM-SHA-512", PASSWORD))
        await consumer.start()
        try:
            got = []
            deadline = time.monotonic() + 20
            while len(got) < len(COMBOS) and time.monotonic() < deadline:
                batch = await consumer.getmany(timeout_ms=1000)
                got += [m.value for msgs in batch.values() for m in msgs]
        finally:
            await consumer.stop()
        return got

    assert asyncio.run(run()) == [b"ak"] * len(COMBOS)
