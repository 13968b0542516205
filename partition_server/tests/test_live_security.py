"""Security against a live secure cluster (`raftka dev --secure` layout plus a SASL_PLAINTEXT
listener): real clients authenticate or are refused, ACLs decide every request, and the users
CLI manages SCRAM credentials. Strangers on inter-node ports and garbage or floods are in
test_live_security_hostile.py, on a cluster of its own built by `secure_cluster` below.

One cluster per module: brokers listen on SASL_SSL (base+id, inter-broker) and SASL_PLAINTEXT
(base+1300+id); controllers on SASL_SSL open only to the inter-node user.
"""

import asyncio
import dataclasses
import os
import time
import uuid

import pytest
import trio
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType,
                                   AdminClient, NewTopic, ResourcePatternType, ResourceType)

from clients.cli.dev import DevLayout
from clients.cli.secure_dev import SecureDev
from clients.cli.users import alter
from partition_server.testing import LiveCluster
from wire.messages.api_keys import ApiKey
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


def secure_cluster(tmp_path_factory):
    """The module's secure cluster with alice (ALL on sec-* topics, READ on sec-* groups): the
    body of the `secure` fixture here and in test_live_security_hostile.py."""
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


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    yield from secure_cluster(tmp_path_factory)


# -- real clients: right password works, wrong and none are refused -------------------------------

COMBOS = [("SASL_SSL", "SCRAM-SHA-512"), ("SASL_PLAINTEXT", "PLAIN")]


def _confluent_produce(conf, topic, errors=None, timeout_ms=8000):
    """The delivery error of one record (None: delivered)."""
    p = Producer({**conf, "error_cb": (errors if errors is not None else []).append,
                  "message.timeout.ms": timeout_ms})
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
        assert _confluent_produce(secure.conf("alice", "wrong", mech, protocol), topic, errors, 2000)
        assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), (protocol, mech, errors)
    # no credentials at all: TLS (or plain TCP) without SASL gets nowhere
    for protocol in ("SSL", "PLAINTEXT"):
        assert _confluent_produce(secure.conf(protocol=protocol), topic, None, 1500) is not None
    # the other mechanism/protocol pairs with the right password
    for protocol, mech in (("SASL_SSL", "PLAIN"), ("SASL_PLAINTEXT", "SCRAM-SHA-256")):
        assert _confluent_produce(secure.conf("alice", PASSWORD, mech, protocol), topic) is None
    assert secure.end_offset(topic) == len(COMBOS) + 2


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

    def refused(**args) -> bool:
        producer = None
        try:
            producer = KafkaProducer(**{"max_block_ms": 2000, "request_timeout_ms": 3000,
                                        "bootstrap_timeout_ms": 3000, **args})
            producer.send(topic, b"x").get(timeout=5)
        except (KPError, OSError):
            return True
        finally:
            if producer is not None:
                producer.close(timeout=1)      # else its sender thread lingers ~30 s
        return False

    for protocol, mech in COMBOS:
        producer = KafkaProducer(max_block_ms=10000, **kw(protocol, mech, PASSWORD))
        producer.send(topic, b"kp").get(timeout=15)
        producer.close()
        assert refused(**{**kw(protocol, mech, "wrong"), "request_timeout_ms": 3000})  # wrong password
    assert refused(bootstrap_servers=secure.plain_bootstrap.split(","))                # no SASL
    consumer = KafkaConsumer(topic, group_id="sec-kp-group", auto_offset_reset="earliest",
                             consumer_timeout_ms=4000, **kw("SASL_SSL", "SCRAM-SHA-512", PASSWORD))
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
        none = AIOKafkaProducer(bootstrap_servers=secure.plain_bootstrap, request_timeout_ms=2000)
        with pytest.raises((AKError, OSError, asyncio.TimeoutError)):
            await asyncio.wait_for(none.start(), 4)
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


# -- authorization matrix over the wire ---------------------------------------------------------

E_TOPIC, E_GROUP, E_CLUSTER = 29, 30, 31


class Wire:
    """Raw requests as one user (PLAIN over the SASL_PLAINTEXT listener), to the right broker."""

    def __init__(self, secure: Secure, user: str, password: str):
        self.secure = secure
        self.props = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                      "sasl.username": user, "sasl.password": password}

    def call(self, message, version: int, broker: int = 0):
        from clients.cli.users import open_connection

        async def go():
            conn = await open_connection(f"127.0.0.1:{self.secure.layout.plain_port(broker)}",
                                         self.props)
            try:
                return await conn.request(message, version, timeout_s=10)
            finally:
                await conn.aclose()
        return trio.run(go)

    def leader(self, topic: str) -> int:
        admin = self.secure.admin()
        return admin.list_topics(topic, timeout=10).topics[topic].partitions[0].leader

    def produce(self, topic: str) -> int:
        from wire.records.batch import Record, build_batch
        cls = REQUESTS[ApiKey.PRODUCE]
        batch = build_batch([Record(offset_delta=0, value=b"x")], base_offset=0,
                            base_timestamp=int(time.time() * 1000))
        req = cls(acks=-1, timeout_ms=5000, topic_data=[cls.TopicProduceData(
            name=topic, partition_data=[cls.PartitionProduceData(index=0, records=batch)])])
        resp = self.call(req, 9, self.leader(topic))
        return resp.responses[0].partition_responses[0].error_code

    def fetch(self, topic: str) -> int:
        cls = REQUESTS[ApiKey.FETCH]
        req = cls(replica_id=-1, max_wait_ms=10, min_bytes=1, max_bytes=1 << 20, session_id=0,
                  session_epoch=-1, topics=[cls.FetchTopic(topic=topic, partitions=[
                      cls.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])])
        resp = self.call(req, 12, self.leader(topic))
        return resp.responses[0].partitions[0].error_code

    def join(self, group: str) -> int:
        cls = REQUESTS[ApiKey.JOIN_GROUP]
        req = cls(group_id=group, session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="",
                  protocol_type="consumer",
                  protocols=[cls.JoinGroupRequestProtocol(name="range", metadata=b"")])
        return self.call(req, 5).error_code

    def topics(self) -> list[str]:
        resp = self.call(REQUESTS[ApiKey.METADATA](topics=None), 12)
        return [t.name for t in resp.topics]


@pytest.fixture(scope="module")
def bob(secure):
    secure.add_user("bob", "bob-secret")
    return Wire(secure, "bob", "bob-secret")


def test_our_clients_with_different_credentials_in_one_process(secure, bob):
    """Connection security is a value each client carries (common.security.ClientSecurity, from
    its own properties), not a process-wide hook: in one process and one trio run, at the same
    time, alice (SCRAM, allowed on sec-*) writes, bob (SCRAM, no ACL on the topic) is refused
    by the authorizer, and alice with a wrong password is refused at login."""
    from clients.errors import ClientError
    from clients.producer import Producer as OurProducer
    from wire.errors import ErrorCode, KafkaError as WireKafkaError
    topic = f"sec-two-{uuid.uuid4().hex[:6]}"
    secure.create_topic(topic)
    quick = {"enable.idempotence": False, "acks": "all", "max.block.ms": 8000,
             "delivery.timeout.ms": 8000, "request.timeout.ms": 5000,
             "socket.connection.setup.timeout.ms": 5000}

    async def produce(conf) -> object:
        try:
            async with OurProducer(config={**conf, **quick}) as producer:
                return await (await producer.send(topic, b"hello"))
        except (WireKafkaError, OSError) as exc:
            return exc

    async def main():
        results = {}

        async def run(name, conf):
            results[name] = await produce(conf)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run, "wrong", secure.conf("alice", "not-the-password"))
            nursery.start_soon(run, "bob", secure.conf("bob", "bob-secret"))
            nursery.start_soon(run, "alice", secure.conf("alice", PASSWORD))
        return results

    results = trio.run(main)
    assert not isinstance(results["alice"], Exception), results
    assert results["alice"].offset >= 0
    assert isinstance(results["bob"], WireKafkaError), results
    assert results["bob"].code == ErrorCode.TOPIC_AUTHORIZATION_FAILED, results
    assert isinstance(results["wrong"], (ClientError, OSError)), results
    assert secure.end_offset(topic) == 1          # alice's record, nobody else's


def _await(predicate, timeout_s=5.0):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


def test_authorization_matrix(secure, bob):
    x = uuid.uuid4().hex[:6]
    readonly, writeonly, other = f"authz-r-{x}", f"authz-w-{x}", f"hidden-{x}"
    for t in (readonly, writeonly, other):
        secure.create_topic(t)
    secure.create_acls(secure.acl("User:bob", AclOperation.READ, readonly),
                       secure.acl("User:bob", AclOperation.WRITE, writeonly),
                       secure.acl("User:bob", AclOperation.READ, "bob-", rtype=ResourceType.GROUP,
                                  pattern=ResourcePatternType.PREFIXED))
    # DescribeAcls (answered from the broker's image) shows them to the super user
    admin = secure.admin()
    listed = admin.describe_acls(AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, "User:bob", None, AclOperation.ANY,
        AclPermissionType.ANY)).result(10)
    assert {(b.name, b.operation) for b in listed} >= {(readonly, AclOperation.READ),
                                                       (writeonly, AclOperation.WRITE)}
    # no Write: produce refused and nothing appended
    _await(lambda: bob.fetch(readonly) == 0)
    assert bob.produce(readonly) == E_TOPIC
    assert secure.end_offset(readonly) == 0
    # Write allowed
    assert bob.produce(writeonly) == 0
    # no Read: fetch refused; group without Read: join refused, with Read: allowed
    assert bob.fetch(writeonly) == E_TOPIC
    assert bob.join(f"other-{x}") == E_GROUP
    assert bob.join(f"bob-{x}") != E_GROUP
    # Metadata hides what bob may not Describe (Read and Write imply Describe)
    visible = bob.topics()
    assert readonly in visible and writeonly in visible and other not in visible
    # cluster operations: CreateAcls needs Alter on the cluster
    cls = REQUESTS[ApiKey.CREATE_ACLS]
    resp = bob.call(cls(creations=[cls.AclCreation(resource_type=2, resource_name="*",
                                                   resource_pattern_type=3, principal="User:bob",
                                                   host="*", operation=2, permission_type=3)]), 3)
    assert resp.results[0].error_code == E_CLUSTER


def test_deny_overrides_allow_and_prefixed(secure, bob):
    x = uuid.uuid4().hex[:6]
    topic, prefixed = f"authz-d-{x}", f"authz-p{x}-events"
    for t in (topic, prefixed):
        secure.create_topic(t)
    secure.create_acls(secure.acl("User:bob", AclOperation.ALL, topic),
                       secure.acl("User:bob", AclOperation.READ, f"authz-p{x}",
                                  pattern=ResourcePatternType.PREFIXED))
    _await(lambda: bob.produce(topic) == 0)
    deny = secure.acl("User:*", AclOperation.WRITE, f"authz-d-{x}"[:10],
                      pattern=ResourcePatternType.PREFIXED, perm=AclPermissionType.DENY)
    secure.create_acls(deny)
    _await(lambda: bob.produce(topic) == E_TOPIC)
    assert bob.fetch(topic) == 0                    # the deny names Write only
    secure.delete_acls(deny)
    assert bob.fetch(prefixed) == 0
    assert bob.produce(prefixed) == E_TOPIC


def test_removing_an_acl_takes_effect_quickly(secure, bob):
    topic = "authz-rm-" + uuid.uuid4().hex[:6]
    secure.create_topic(topic)
    grant = secure.acl("User:bob", AclOperation.WRITE, topic)
    secure.create_acls(grant)
    _await(lambda: bob.produce(topic) == 0)
    start = time.monotonic()
    secure.delete_acls(grant)
    _await(lambda: bob.produce(topic) == E_TOPIC, timeout_s=3)
    elapsed = time.monotonic() - start
    print(f"ACL removal effective after {elapsed * 1000:.0f} ms (DeleteAcls round trip included)")
    assert elapsed < 3


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_legacy_unframed_sasl_kafka_python_2(secure, mechanism):
    """SaslHandshake v0 + raw tokens (kafka-python 2.0.2 from its own virtualenv)."""
    import json
    from pathlib import Path
    from partition_server.testing import run_script
    python = os.environ.get("RAFTKA_KP2_PYTHON") or str(
        Path(__file__).resolve().parents[2] / ".venv" / "kafka-python-2" / "bin" / "python")
    assert os.path.exists(python), f"kafka-python 2.0.2 interpreter not found at {python}"
    topic = "sec-legacy-" + uuid.uuid4().hex[:6]
    secure.create_topic(topic)
    proc = run_script(python, Path(__file__).parent / "interop" / "check_sasl_legacy.py",
                      secure.plain_bootstrap, topic, mechanism, "alice", PASSWORD, timeout_s=90)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines, proc.stderr[-3000:]
    result = json.loads(lines[-1])
    assert result["ok"], f"{result.get('error')}\n{proc.stderr[-2000:]}"
    assert secure.end_offset(topic) == 1


# -- the CLI and `raftka dev --secure` ---------------------------------------------------------------

def _raftka(*args, timeout_s=60):
    import subprocess
    import sys
    return subprocess.run([sys.executable, "-m", "clients.cli.main", *args], capture_output=True,
                          text=True, timeout=timeout_s)


def test_users_scram_cli(secure, tmp_path):
    admin = tmp_path / "admin.properties"
    admin.write_text("".join(f"{k}={v}\n" for k, v in secure.dev.client_properties().items()))
    common = ["--bootstrap-server", secure.ssl_bootstrap, "--command-config", str(admin)]
    out = _raftka("users", "scram", "add", *common, "--user", "carol", "--password", "c-pw")
    assert out.returncode == 0 and "carol: ok" in out.stdout, out.stderr
    out = _raftka("users", "scram", "list", *common)
    assert out.returncode == 0 and "carol\tSCRAM-SHA-512 (iterations=8192)" in out.stdout
    assert "c-pw" not in out.stdout
    carol = Wire(secure, "carol", "c-pw")
    assert isinstance(carol.topics(), list)               # logs in (sees no topics: no ACLs)
    out = _raftka("users", "scram", "remove", *common, "--user", "carol")
    assert out.returncode == 0, out.stderr
    from clients.cli.users import CliError
    with pytest.raises(CliError):
        carol.topics()
    out = _raftka("users", "scram", "list", *common, "--user", "carol")
    assert out.returncode == 1 and "RESOURCE_NOT_FOUND" in out.stderr
    # a non-super user may not manage users; bad credentials are a clear one-line error
    alice = tmp_path / "alice.properties"
    alice.write_text(f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.username=alice\n"
                     f"sasl.password={PASSWORD}\n")
    out = _raftka("users", "scram", "add", "--bootstrap-server", secure.plain_bootstrap,
                  "--command-config", str(alice), "--user", "eve", "--password", "x")
    assert out.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in out.stderr
    alice.write_text(alice.read_text().replace(PASSWORD, "wrong"))
    out = _raftka("users", "scram", "list", "--bootstrap-server", secure.plain_bootstrap,
                  "--command-config", str(alice))
    assert out.returncode == 2 and "raftka users:" in out.stderr and "Traceback" not in out.stderr
