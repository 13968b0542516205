"""Client quotas on a live cluster: confluent-kafka producing and consuming as fast as it can is
held near producer_byte_rate / consumer_byte_rate for its client id and sees throttle time, while
another client id in the same run is much faster; removing the quota lifts the limit within a
metadata round trip; quotas survive a controller leader change.

The brokers run with quota.window.num=2 (Kafka's default is 11): the rate's floor of num − 1
windows lets a fresh client burst (num − 1) × quota before its first throttle, and with 11 that
burst alone would dominate a few seconds of measurement. The window math at the defaults is
covered by test_quotas.py.
"""

from __future__ import annotations

import json
import time

import pytest
import trio
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient as CkAdmin
from confluent_kafka.admin import NewTopic

from clients.admin import AdminClient
from partition_server.testing import LiveCluster
from wire.errors import InvalidRequestError
from wire.messages.api_keys import ApiKey

pytestmark = pytest.mark.live
QUOTA = 100 * 1024                   # bytes per second
VALUE = b"x" * 1000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LiveCluster(tmp_path_factory.mktemp("quotas"), {"quota.window.num": "2"})
    c.start()
    yield c
    c.stop()


def _admin(cluster, fn, *args, **kw):
    async def run():
        async with AdminClient(cluster.bootstrap, request_timeout_ms=10000) as admin:
            return await getattr(admin, fn)(*args, **kw)
    return trio.run(run)


def _create_topic(cluster, name):
    admin = CkAdmin({"bootstrap.servers": cluster.bootstrap})
    for fut in admin.create_topics([NewTopic(name, 1, 1)]).values():
        fut.result(30)


def _wait_quotas(cluster, expect, timeout_s=10.0):
    """Until describe (every broker answers from its own image) shows `expect`."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = _admin(cluster, "describe_client_quotas")
        if sorted(map(repr, got)) == sorted(map(repr, expect)) or time.monotonic() > deadline:
            return got
        time.sleep(0.2)


def _metrics(cluster, broker_id) -> str:
    import urllib.request
    url = f"http://127.0.0.1:{cluster.layout.metrics_port(broker_id)}/metrics"
    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.read().decode()


def _produce_for(cluster, topic, client_id, seconds, extra=None):
    """Produce as fast as librdkafka allows for `seconds`: (acked bytes per s, max throttle ms).
    `extra`: more client properties (security)."""
    acked, throttles = [0], []

    def on_delivery(err, msg):
        if err is None:
            acked[0] += len(msg.value())

    def on_stats(raw):
        for b in json.loads(raw).get("brokers", {}).values():
            throttles.append(b.get("throttle", {}).get("max", 0))

    p = Producer({"bootstrap.servers": cluster.bootstrap, "client.id": client_id, "acks": 1,
                  "linger.ms": 5, "statistics.interval.ms": 500, "stats_cb": on_stats,
                  # Java's default batch size: librdkafka's 1 MB batches would make each request
                  # worth ten seconds of quota, so 4 s of measurement would see one or two
                  "batch.size": 16384, "queue.buffering.max.kbytes": 2048, **(extra or {})})
    p.list_topics(topic, timeout=10)
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        try:
            p.produce(topic, VALUE, on_delivery=on_delivery)
        except BufferError:
            p.poll(0.01)
        else:
            p.poll(0)
    elapsed = time.monotonic() - start
    rate = acked[0] / elapsed
    p.poll(0.6)                        # one more stats interval
    p.purge()
    p.flush(5)
    return rate, max(throttles, default=0)


def test_producer_byte_rate(cluster):
    _create_topic(cluster, "q-prod")
    errors = _admin(cluster, "alter_client_quotas",
                    [({"client-id": "slow"}, {"producer_byte_rate": QUOTA})])
    assert errors == [None]
    assert _wait_quotas(cluster, [({"client-id": "slow"}, {"producer_byte_rate": float(QUOTA)})])

    slow, slow_throttle = _produce_for(cluster, "q-prod", "slow", 4)
    fast, _ = _produce_for(cluster, "q-prod", "fast", 2)
    print(f"slow {slow / 1024:.0f} KB/s (throttle max {slow_throttle} ms), "
          f"fast {fast / 1024:.0f} KB/s")
    assert 0.3 * QUOTA < slow < 2 * QUOTA
    assert slow_throttle > 0
    assert fast > 5 * QUOTA
    # the partition's leader shows the bucket on its Prometheus endpoint
    throttled = [line for b in (0, 1, 2) for line in _metrics(cluster, b).splitlines()
                 if line.startswith("raftka_client_quota_throttle_time_ms_total")
                 and 'client_id="slow"' in line]
    assert len(throttled) == 1 and float(throttled[0].split()[-1]) > 0, throttled

    # removal: the limit is gone once the brokers have the record
    assert _admin(cluster, "alter_client_quotas",
                  [({"client-id": "slow"}, {"producer_byte_rate": None})]) == [None]
    assert _wait_quotas(cluster, []) == []
    freed, _ = _produce_for(cluster, "q-prod", "slow", 2)
    print(f"slow after removal {freed / 1024:.0f} KB/s")
    assert freed > 5 * QUOTA


def _consume_for(cluster, topic, client_id, seconds, total):
    """(value bytes per s, max throttle ms, bytes read) reading from offset 0."""
    throttles = []

    def on_stats(raw):
        for b in json.loads(raw).get("brokers", {}).values():
            throttles.append(b.get("throttle", {}).get("max", 0))

    c = Consumer({"bootstrap.servers": cluster.bootstrap, "client.id": client_id,
                  "group.id": f"g-{client_id}-{time.monotonic_ns()}", "enable.auto.commit": False,
                  "statistics.interval.ms": 500, "stats_cb": on_stats})
    c.assign([TopicPartition(topic, 0, 0)])
    got, start, give_up = 0, None, time.monotonic() + 30
    try:
        while got < total and time.monotonic() < give_up:
            msg = c.poll(0.2)
            if msg is not None and msg.error() is None:
                if start is None:
                    start = time.monotonic()   # from the first record: connection set-up excluded
                got += len(msg.value())
            if start is not None and time.monotonic() - start >= seconds:
                break
        elapsed = time.monotonic() - (start or time.monotonic())
        c.poll(0.6)
    finally:
        c.close()
    return got / max(elapsed, 1e-3), max(throttles, default=0), got


def test_consumer_byte_rate(cluster):
    _create_topic(cluster, "q-cons")
    p = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 20, "acks": 1,
                  "batch.size": 16384})
    total = 1500 * len(VALUE)
    for _ in range(1500):
        p.produce("q-cons", VALUE)
        p.poll(0)
    assert p.flush(30) == 0
    assert _admin(cluster, "alter_client_quotas",
                  [({"client-id": "slow-c"}, {"consumer_byte_rate": QUOTA})]) == [None]
    _wait_quotas(cluster, [({"client-id": "slow-c"}, {"consumer_byte_rate": float(QUOTA)})])

    slow, slow_throttle, _ = _consume_for(cluster, "q-cons", "slow-c", 4, total)
    fast, _, fast_got = _consume_for(cluster, "q-cons", "fast-c", 10, total)
    print(f"consumer slow {slow / 1024:.0f} KB/s (throttle max {slow_throttle} ms), "
          f"fast {fast / 1024:.0f} KB/s")
    assert 0.3 * QUOTA < slow < 2 * QUOTA
    assert slow_throttle > 0
    assert fast_got == total and fast > 5 * QUOTA

    assert _admin(cluster, "alter_client_quotas",
                  [({"client-id": "slow-c"}, {"consumer_byte_rate": None})]) == [None]
    assert _wait_quotas(cluster, []) == []
    freed, _, freed_got = _consume_for(cluster, "q-cons", "slow-c", 10, total)
    assert freed_got == total and freed > 5 * QUOTA


def test_bad_alterations_are_refused_with_a_message(cluster):
    errors = _admin(cluster, "alter_client_quotas", [
        ({"client-id": "x"}, {"producer_byte_rate": 1.5}),
        ({"user": "u"}, {"controller_mutation_rate": 10}),
        ({"ip": "1.2.3.4"}, {"connection_creation_rate": 10}),
        ({"user": "u"}, {"bogus": 1}),
        ({"user": None}, {"request_percentage": 50})])
    assert [type(e) for e in errors[:4]] == [InvalidRequestError] * 4
    assert "whole number" in str(errors[0]) and "not supported" in str(errors[1])
    assert errors[4] is None
    assert _wait_quotas(cluster, [({"user": None}, {"request_percentage": 50.0})])
    assert _admin(cluster, "alter_client_quotas",
                  [({"user": None}, {"request_percentage": None})]) == [None]
    assert _wait_quotas(cluster, []) == []


def test_quotas_survive_a_controller_leader_change(cluster):
    ent = {"user": "alice", "client-id": "app"}
    assert _admin(cluster, "alter_client_quotas", [(ent, {"producer_byte_rate": 4096})]) == [None]
    _wait_quotas(cluster, [(ent, {"producer_byte_rate": 4096.0})])
    leader = _admin(cluster, "describe_quorum")["leader_id"]
    cluster.kill(f"controller-{leader}")
    try:
        # the new active controller knows the quota: changing and removing it writes records
        deadline = time.monotonic() + 30
        while True:
            try:
                errors = _admin(cluster, "alter_client_quotas",
                                [(ent, {"producer_byte_rate": 8192, "consumer_byte_rate": 1024})])
                if errors == [None]:
                    break
            except Exception:               # noqa: BLE001 - election in progress
                pass
            assert time.monotonic() < deadline, "no controller took over"
            time.sleep(0.5)
        assert _admin(cluster, "describe_quorum")["leader_id"] != leader
        got = _wait_quotas(cluster, [(ent, {"consumer_byte_rate": 1024.0,
                                            "producer_byte_rate": 8192.0})])
        assert got == [(ent, {"consumer_byte_rate": 1024.0, "producer_byte_rate": 8192.0})]
        assert _admin(cluster, "alter_client_quotas",
                      [(ent, {"producer_byte_rate": None, "consumer_byte_rate": None})]) == [None]
        assert _wait_quotas(cluster, []) == []
    finally:
        cluster.restart_controller(list(c for c in (3000, 3001, 3002)).index(leader))


def test_kafka_python_producer_and_aiokafka_consumer_are_held_too(cluster):
    """The Python clients (their own throttle handling, older request versions) under the same
    quotas: kafka-python produces, aiokafka consumes."""
    import asyncio

    import aiokafka
    from kafka import KafkaProducer
    _create_topic(cluster, "q-py")
    limits = {"producer_byte_rate": QUOTA, "consumer_byte_rate": QUOTA}
    assert _admin(cluster, "alter_client_quotas", [({"client-id": "py"}, limits)]) == [None]
    _wait_quotas(cluster, [({"client-id": "py"}, {k: float(v) for k, v in limits.items()})])

    p = KafkaProducer(bootstrap_servers=cluster.bootstrap, client_id="py", acks=1, linger_ms=5,
                      batch_size=16384)
    acked, sent = [0], 0
    start = time.monotonic()
    while time.monotonic() - start < 3:
        if sent - acked[0] > 512 * 1024:    # kafka-python 3 has no buffer_memory: bound it here
            time.sleep(0.002)
            continue
        p.send("q-py", VALUE).add_callback(lambda md: acked.__setitem__(0, acked[0] + len(VALUE)))
        sent += len(VALUE)
    produced = acked[0] / (time.monotonic() - start)
    # lift the producer quota so the (bounded) backlog drains and the producer closes cleanly
    assert _admin(cluster, "alter_client_quotas",
                  [({"client-id": "py"}, {"producer_byte_rate": None})]) == [None]
    p.close(timeout=30)

    async def consume() -> float:
        c = aiokafka.AIOKafkaConsumer(bootstrap_servers=cluster.bootstrap, client_id="py",
                                      enable_auto_commit=False)
        await c.start()
        try:
            tp = aiokafka.TopicPartition("q-py", 0)
            c.assign([tp])
            c.seek(tp, 0)
            got, first = 0, None
            while first is None or time.monotonic() - first < 3:
                for msgs in (await c.getmany(timeout_ms=500)).values():
                    first = first or time.monotonic()
                    got += sum(len(m.value) for m in msgs)
            return got / (time.monotonic() - first)
        finally:
            await c.stop()
    consumed = asyncio.run(consume())
    print(f"kafka-python produce {produced / 1024:.0f} KB/s, aiokafka consume "
          f"{consumed / 1024:.0f} KB/s")
    assert 0.3 * QUOTA < produced < 2 * QUOTA
    assert 0.3 * QUOTA < consumed < 2 * QUOTA
    assert _admin(cluster, "alter_client_quotas",
                  [({"client-id": "py"}, {"consumer_byte_rate": None})]) == [None]
    assert _wait_quotas(cluster, []) == []


def test_request_percentage_throttles_a_busy_client(cluster):
    """KIP-124: a client id allowed 0.01 % of a request thread that keeps asking for metadata is
    throttled (throttle_time_ms set, at most one window); another client id is not."""
    from clients.connection import BrokerConnection
    from wire.messages.index_generated import REQUESTS
    assert _admin(cluster, "alter_client_quotas",
                  [({"client-id": "busy"}, {"request_percentage": 0.01})]) == [None]
    _wait_quotas(cluster, [({"client-id": "busy"}, {"request_percentage": 0.01})])
    port = int(cluster.bootstrap.split(",")[0].rsplit(":", 1)[1])

    async def hammer(client_id, n=12):
        conn = BrokerConnection("127.0.0.1", port, client_id=client_id)
        await conn.connect()
        try:
            throttles = []
            for _ in range(n):
                resp = await conn.request(REQUESTS[ApiKey.METADATA](topics=None), 9)
                throttles.append(resp.throttle_time_ms)
                if resp.throttle_time_ms:
                    await trio.sleep(resp.throttle_time_ms / 1000)   # as a KIP-219 client does
            return throttles
        finally:
            await conn.aclose()
    busy = trio.run(hammer, "busy")
    idle = trio.run(hammer, "idle")
    print(f"request_percentage: busy throttles {busy}")
    assert any(busy) and max(busy) <= 1000      # capped at one window (quota.window.size 1 s)
    assert not any(idle)
    assert _admin(cluster, "alter_client_quotas",
                  [({"client-id": "busy"}, {"request_percentage": None})]) == [None]
    assert _wait_quotas(cluster, []) == []
