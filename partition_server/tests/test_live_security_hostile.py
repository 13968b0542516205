"""Hostile peers against a live secure cluster (test_live_security.py's layout, a cluster of
this module's own): strangers on inter-node ports learn nothing, and garbage, truncated SASL
exchanges, oversized frames and connection floods do not disturb an authenticated client.
"""

import os
import socket
import ssl
import struct
import time
import uuid

import pytest
import trio
from confluent_kafka import Consumer, Producer, TopicPartition

from partition_server.tests.test_live_security import PASSWORD, secure_cluster
from wire.connection import ClientConnection
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    yield from secure_cluster(tmp_path_factory)


# -- strangers on inter-node ports ----------------------------------------------------------------

def _raw(port: int, tls: bool, ca: str | None, source: str = "127.0.0.1"):
    sock = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))
    if tls:
        ctx = ssl.create_default_context(cafile=ca)
        sock = ctx.wrap_socket(sock, server_hostname="127.0.0.1")
    return sock


def _read_all(sock, timeout_s=3.0) -> bytes:
    sock.settimeout(timeout_s)
    out = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return out
            out += chunk
    except (socket.timeout, ssl.SSLError, OSError):
        return out


def _frame(message, version: int) -> bytes:
    return ClientConnection().send_request(message, version, client_id="stranger")


def test_stranger_on_inter_node_ports_learns_nothing(secure):
    layout = secure.layout
    fetch = REQUESTS[ApiKey.FETCH]
    metadata_fetch = fetch(replica_id=99, max_wait_ms=10, min_bytes=1, max_bytes=1 << 20, topics=[
        fetch.FetchTopic(topic="__cluster_metadata", partitions=[
            fetch.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])])
    reg = REQUESTS[ApiKey.BROKER_REGISTRATION](broker_id=77, cluster_id="raftka", incarnation_id=uuid.uuid4(),
                       listeners=[], rack=None)
    for index in range(3):
        port = layout.controller_port(index)
        for message, version in ((metadata_fetch, 12), (reg, 0)):
            with _raw(port, True, secure.ca) as sock:
                sock.sendall(_frame(message, version))
                assert _read_all(sock) == b"", "controller answered an unauthenticated request"
        with _raw(port, False, None) as sock:          # no TLS: nothing but a closed socket
            sock.sendall(_frame(metadata_fetch, 12))
            assert b"__cluster_metadata" not in _read_all(sock)
    # a real user (not the inter-node one) cannot log in to a controller
    from clients.cli.users import CliError, open_connection
    props = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
             "sasl.username": "alice", "sasl.password": PASSWORD, "ssl.ca.location": secure.ca}
    with pytest.raises(CliError, match="not allowed|SASL|cannot connect"):
        trio.run(open_connection, f"127.0.0.1:{layout.controller_port(0)}", props)
    # unauthenticated broker connection: Metadata and a follower Fetch get no answer
    for port, tls in ((layout.plain_port(0), False), (layout.broker_port(0), True)):
        with _raw(port, tls, secure.ca) as sock:
            sock.sendall(_frame(REQUESTS[ApiKey.METADATA](topics=None), 12))
            assert _read_all(sock) == b""
    # even the super user's DescribeConfigs never shows a password
    from confluent_kafka.admin import ConfigResource, ResourceType as RT
    admin = secure.admin()
    entries = list(admin.describe_configs([ConfigResource(RT.BROKER, "0")]).values())[0].result(15)
    secret = entries["raftka.inter.node.sasl.password"]
    assert secret.value is None and secret.is_sensitive
    # the Raft port is password-protected (pysyncobj encryption): garbage learns nothing
    with socket.create_connection(("127.0.0.1", layout.raft_port(0)), timeout=5) as sock:
        sock.sendall(os.urandom(64))
        assert b"__cluster_metadata" not in _read_all(sock, 1.0)
    # and the cluster did not notice any of it
    # (the other tests in this module keep using the same cluster)


# -- fuzz while an authenticated client keeps working ----------------------------------------------

def _produce_until(secure, topic, stop, delivered, failed):
    """The authenticated client that must not notice the fuzzing: alice produces (idempotent,
    acks=all) until `stop`; acknowledged values go to `delivered`, errors to `failed`."""
    p = Producer({**secure.conf("alice", PASSWORD), "acks": "all",
                  "enable.idempotence": True, "linger.ms": 5})
    i = 0
    while not stop.is_set():
        p.produce(topic, b"%d" % i, on_delivery=lambda err, msg: (failed if err else delivered).append(
            err or int(msg.value())))
        i += 1
        p.poll(0.01)
    p.flush(30)


def _fuzz_random_bytes(rng, ports, ca):
    """1. random bytes, raw and inside TLS"""
    for _ in range(40):
        port, tls = rng.choice(ports)
        try:
            with _raw(port, tls and rng.random() < 0.5, ca) as sock:
                sock.sendall(rng.randbytes(rng.randrange(1, 4096)))
                _read_all(sock, 0.2)
        except (OSError, ssl.SSLError):
            pass


def _truncated_sasl_exchanges(rng, ports):
    """2. truncated SASL exchanges: handshake, then half a SaslAuthenticate, then hang up"""
    hs = _frame(REQUESTS[ApiKey.SASL_HANDSHAKE](mechanism="SCRAM-SHA-512"), 1)
    auth = ClientConnection(first_correlation_id=2).send_request(
        REQUESTS[ApiKey.SASL_AUTHENTICATE](auth_bytes=b"n,,n=alice,r=abc"), 2)
    for cut in range(0, len(auth), 7):
        port, _ = rng.choice(ports[:3])
        with _raw(port, False, None) as sock:
            sock.sendall(hs + auth[:cut])
            time.sleep(0.01)


def _oversized_frames_refused_at_once(ports, ca):
    """3. oversized pre-authentication frames are refused at once"""
    for port, tls in ports:
        with _raw(port, tls, ca) as sock:
            t0 = time.monotonic()
            sock.sendall(struct.pack(">i", 50 * 1024 * 1024) + b"\x00" * 1024)
            assert _read_all(sock, 5) == b""
            assert time.monotonic() - t0 < 3


def _flood_beyond_connection_limit(layout):
    """4. a flood from another address beyond max.connections.per.ip (120): at least 30 of 160
    connections are refused (at connect, or closed by the broker)."""
    flood, refused = [], 0
    for _ in range(160):
        try:
            flood.append(_raw(layout.plain_port(0), False, None, source="127.0.0.2"))
        except OSError:
            refused += 1
    # the broker accepts at its own pace: poll until the refused ones are seen closed
    open_socks = list(flood)
    for sock in open_socks:
        sock.setblocking(False)
    deadline = time.monotonic() + 10
    while refused < 40 and time.monotonic() < deadline:
        time.sleep(0.2)
        for sock in list(open_socks):
            try:
                if sock.recv(1) == b"":
                    refused += 1
                    open_socks.remove(sock)
            except BlockingIOError:
                pass
            except OSError:
                refused += 1
                open_socks.remove(sock)
    assert refused >= 30, f"only {refused} of 160 flood connections were refused"
    for sock in flood:
        sock.close()


def _read_partition_zero(secure, topic, expected_count):
    """Read the topic's partition 0 from the start as alice until expected_count values (or 30 s)."""
    c = Consumer({**secure.conf("alice", PASSWORD), "group.id": "sec-fuzz-check",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    seen = []
    deadline = time.monotonic() + 30
    while len(seen) < expected_count and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            seen.append(int(m.value()))
    c.close()
    return seen


def test_fuzz_and_floods_do_not_disturb_authenticated_clients(secure):
    import random
    import threading
    rng = random.Random(int(os.environ.get("RAFTKA_FUZZ_SEED", "1234")))
    topic = "sec-fuzz-" + uuid.uuid4().hex[:6]
    secure.create_topic(topic)
    layout = secure.layout
    stop = threading.Event()
    delivered, failed = [], []
    worker = threading.Thread(target=_produce_until, args=(secure, topic, stop, delivered, failed))
    worker.start()
    try:
        ports = [(layout.plain_port(b), False) for b in range(3)] + \
                [(layout.broker_port(b), True) for b in range(3)]
        _fuzz_random_bytes(rng, ports, secure.ca)
        _truncated_sasl_exchanges(rng, ports)
        _oversized_frames_refused_at_once(ports, secure.ca)
        _flood_beyond_connection_limit(layout)
        time.sleep(1.0)
    finally:
        stop.set()
        worker.join(60)
    assert not failed, failed[:5]
    assert len(delivered) > 50
    # nothing lost: everything acknowledged is in the log, exactly once
    seen = _read_partition_zero(secure, topic, len(delivered))
    assert sorted(seen) == sorted(delivered)
