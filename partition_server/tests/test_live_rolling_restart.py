"""F14: rolling restart of every broker (SIGTERM: controlled shutdown) and then every
controller (SIGKILL) under acks=all idempotent load, RF=3, min.insync.replicas=2. Writes go on during every step
(progress > 0 while each node is down), and afterwards every acknowledged record is readable
exactly once, in acknowledgement order, per partition."""

import signal
import threading
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from clients.cli.dev import CONTROLLER_IDS
from partition_server.testing import LiveCluster

pytestmark = pytest.mark.live
TOPIC, PARTITIONS = "rolling", 3


class Load:
    """A producer thread writing consecutive values round-robin over the partitions."""

    def __init__(self, bootstrap):
        self.acked: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
        self.failed = 0
        self.stop = threading.Event()
        self.p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                           "linger.ms": 2, "message.timeout.ms": 120000})
        self.thread = threading.Thread(target=self._run, daemon=True)

    def count(self) -> int:
        return sum(len(v) for v in self.acked.values())

    def _cb(self, err, msg):
        if err is None:
            self.acked[msg.partition()].append(int(msg.value()))
        else:
            self.failed += 1

    def _run(self):
        i = 0
        while not self.stop.is_set():
            self.p.produce(TOPIC, str(i).encode(), partition=i % PARTITIONS, on_delivery=self._cb)
            i += 1
            self.p.poll(0.004)
        self.p.flush(120)


def _read(bootstrap, partition):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "rolling-check",
                  "enable.auto.commit": False})
    tp = TopicPartition(TOPIC, partition, 0)
    _, high = c.get_watermark_offsets(tp, timeout=10)
    c.assign([tp])
    got, deadline = [], time.time() + 60
    while len(got) < high and time.time() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append(int(m.value()))
    c.close()
    return got


def _progress_while(load, action, min_new=20, timeout_s=60):
    """Run `action` (a node goes down and comes back) and require acknowledgements meanwhile."""
    before = load.count()
    action()
    deadline = time.time() + timeout_s
    while load.count() - before < min_new and time.time() < deadline:
        time.sleep(0.2)
    assert load.count() - before >= min_new, "writes stalled during the restart"


def _all_in_sync(admin):
    parts = admin.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions.values()
    return all(len(p.isrs) == 3 and p.leader >= 0 for p in parts)


def test_rolling_restart_of_every_node_under_load(tmp_path):
    with LiveCluster(tmp_path, {"broker.heartbeat.interval.ms": "500",
                                "replica.lag.time.max.ms": "5000"}) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        for fut in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3,
                                                 config={"min.insync.replicas": "2"})]).values():
            fut.result(30)
        load = Load(cluster.bootstrap)
        load.thread.start()
        try:
            time.sleep(1.0)
            for b in (0, 1, 2):
                def bounce_broker(b=b):
                    cluster.kill(f"broker-{b}", signal.SIGTERM)     # controlled shutdown
                    assert cluster.proc(f"broker-{b}").proc.returncode == 0
                    cluster.restart_broker(b)
                _progress_while(load, bounce_broker)
                deadline = time.time() + 60
                while not _all_in_sync(admin) and time.time() < deadline:
                    time.sleep(0.3)
                assert _all_in_sync(admin), f"broker {b} did not rejoin every ISR"
            for index in range(len(CONTROLLER_IDS)):
                _progress_while(load, lambda index=index: cluster.restart_controller(index))
        finally:
            load.stop.set()
            load.thread.join(150)
        assert load.failed == 0, f"{load.failed} writes failed with retries left"
        for p in range(PARTITIONS):
            got = _read(cluster.bootstrap, p)
            assert len(got) == len(set(got)), f"partition {p}: a value at two offsets"
            missing = set(load.acked[p]) - set(got)
            assert not missing, f"partition {p}: lost {sorted(missing)[:10]}"
            pos = {v: i for i, v in enumerate(got)}
            order = [pos[v] for v in load.acked[p]]
            assert order == sorted(order), f"partition {p}: log order differs from ack order"
