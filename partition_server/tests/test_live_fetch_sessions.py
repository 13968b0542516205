"""Followers fetch in incremental fetch sessions (KIP-227) on a live cluster: replication works
through them, across a leader change and a follower restart, and an idle follower's fetch names
no partition and gets none back (read from the brokers' /metrics)."""

import re
import time
import urllib.request

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from partition_server.testing import LiveCluster

pytestmark = pytest.mark.live
TOPIC, PARTITIONS = "fs", 6


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LiveCluster(tmp_path_factory.mktemp("fetch-sessions"),
                    {"replica.lag.time.max.ms": "3000", "broker.heartbeat.interval.ms": "500"})
    c.start()
    yield c
    c.stop()


def _metrics(cluster, broker_id) -> str:
    url = f"http://127.0.0.1:{cluster.layout.metrics_port(broker_id)}/metrics"
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read().decode()


def _per_leader(text, name) -> dict[int, float]:
    return {int(m.group(1)): float(m.group(2))
            for m in re.finditer(re.escape(name) + r'\{leader="(\d+)"\} (\S+)', text)}


def _idle_fetches_are_empty(cluster, brokers) -> bool:
    """Every broker in `brokers` follows from the other two, and its last fetch to each named
    no partition and got none back, in a session (incremental)."""
    for b in brokers:
        text = _metrics(cluster, b)
        req = _per_leader(text, "raftka_replica_fetch_request_partitions")
        resp = _per_leader(text, "raftka_replica_fetch_response_partitions")
        incremental = [int(m.group(1)) for m in re.finditer(
            r'raftka_replica_fetch_requests_total\{leader="(\d+)",kind="incremental"\} (\d+)', text)
            if int(m.group(2)) > 0]
        others = {0, 1, 2} - {b}
        if not others <= set(incremental):
            return False
        if any(req.get(o) != 0 or resp.get(o) != 0 for o in others):
            return False
    return True


def _wait(pred, timeout_s, what):
    deadline = time.time() + timeout_s
    while not pred():
        assert time.time() < deadline, f"timed out waiting until {what}"
        time.sleep(0.3)


def _produce(cluster, values):
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                  "enable.idempotence": True, "message.timeout.ms": 60000})
    acked, errors = [], []
    for v in values:
        p.produce(TOPIC, str(v).encode(), partition=v % PARTITIONS,
                  on_delivery=lambda err, m: (errors if err else acked).append(m))
    assert p.flush(90) == 0
    assert not errors, errors[:3]
    return {int(m.value()) for m in acked}


def _read_all(cluster, expected: int):
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "verify",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    got = []
    deadline = time.time() + 60
    while len(got) < expected and time.time() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append(int(m.value()))
    c.close()
    return got


def _isr_full(admin) -> bool:
    md = admin.list_topics(TOPIC, timeout=10).topics[TOPIC]
    return all(p.leader >= 0 and len(p.isrs) == 3 for p in md.partitions.values())


def _leader_of(admin, partition) -> int:
    return admin.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions[partition].leader


def _read_replica_is_complete(cluster, expected: set[int]) -> None:
    got = _read_all(cluster, len(expected))
    assert sorted(got) == sorted(expected)          # each acknowledged record once


def test_replication_through_sessions_leader_change_and_restart(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for fut in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3,
                                             config={"min.insync.replicas": "2"})]).values():
        fut.result(30)
    _wait(lambda: _isr_full(admin), 30, "every partition has 3 in-sync replicas")
    acked = _produce(cluster, range(0, 300))
    _wait(lambda: _idle_fetches_are_empty(cluster, [0, 1, 2]), 30,
          "idle follower fetches name no partition")

    # a leader change: the leader of partition 0 dies; writes go on through the new leader
    victim = _leader_of(admin, 0)
    cluster.kill(f"broker-{victim}")
    _wait(lambda: _leader_of(admin, 0) not in (-1, victim), 30, "partition 0 has a new leader")
    acked |= _produce(cluster, range(300, 600))
    _read_replica_is_complete(cluster, acked)

    # the follower restarts (a full fetch in a new session) and catches up into the ISR; the
    # survivors' sessions with it are gone (FETCH_SESSION_ID_NOT_FOUND → a full fetch again)
    cluster.restart_broker(victim)
    _wait(lambda: _isr_full(admin), 60, "the restarted broker rejoins every ISR")
    acked |= _produce(cluster, range(600, 900))
    _wait(lambda: _idle_fetches_are_empty(cluster, [0, 1, 2]), 30,
          "idle follower fetches name no partition after the restart")
    _read_replica_is_complete(cluster, acked)
