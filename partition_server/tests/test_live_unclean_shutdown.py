"""Fault F7 / KIP-966 on a live cluster: the last ISR member comes back from a power loss
with its unflushed tail gone. It must not lead; the replica that left the ISR while it was too
small (an eligible leader replica) must, and nothing acknowledged is lost.

A power loss is simulated on one broker: SIGKILL, its partition log cut back (what an
unflushed page cache loses), and its boot id changed (`raftka.boot.id.file`) so the broker
knows the machine restarted. The other brokers are only SIGKILLed: same boot id, page cache
intact, so they come back trusted.
"""

import os
import signal
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from partition_server.testing import LiveCluster
from wire.records.batch import iter_batches

pytestmark = pytest.mark.live
BOOT_ID = "boot_id"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    data = tmp_path_factory.mktemp("unclean")
    for b in (0, 1, 2):
        os.makedirs(data / f"broker-{b}", exist_ok=True)
        (data / f"broker-{b}" / BOOT_ID).write_text(str(uuid.uuid4()))
    c = LiveCluster(data, {"replica.lag.time.max.ms": "2000", "raftka.boot.id.file": BOOT_ID})
    c.start()
    yield c
    c.stop()


def _wait(cond, timeout_s, step=0.3):
    end = time.time() + timeout_s
    while time.time() < end:
        try:
            if cond():
                return True
        except Exception:   # noqa: BLE001 - a broker may be restarting
            pass
        time.sleep(step)
    return False


def _part(admin, topic):
    return admin.list_topics(topic, timeout=10).topics[topic].partitions[0]


def _produce(cluster, topic, values):
    acked = []
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                  "enable.idempotence": True, "linger.ms": 5})
    for v in values:
        p.produce(topic, str(v).encode(), partition=0,
                  on_delivery=lambda err, msg: acked.append(int(msg.value())) if err is None else None)
    assert p.flush(60) == 0
    return acked


def _read(bootstrap, topic, want, timeout_s=30):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"v-{uuid.uuid4()}",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    got, end = [], time.time() + timeout_s
    while len(got) < want and time.time() < end:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append(int(m.value()))
    c.close()
    return got


def _lose_tail(log_dir, keep_below):
    """Cut the partition's log at the first batch holding offset `keep_below` or later, as a
    power loss drops the part of the file that never reached the disk."""
    seg = sorted(n for n in os.listdir(log_dir) if n.endswith(".log"))[-1]
    path = os.path.join(log_dir, seg)
    with open(path, "rb") as f:
        data = f.read()
    cut = next(h.pos for h in iter_batches(memoryview(data)) if h.last_offset >= keep_below)
    os.truncate(path, cut)
    return cut


def test_f7_last_isr_member_back_from_power_loss_does_not_lead(cluster):
    topic = "f7"
    a, b, c = 0, 1, 2
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for fut in admin.create_topics([NewTopic(topic, 1, replica_assignment=[[a, b, c]],
                                             config={"min.insync.replicas": "2"})]).values():
        fut.result(30)
    acked = _produce(cluster, topic, range(0, 200))
    view = AdminClient({"bootstrap.servers": f"127.0.0.1:{cluster.layout.broker_port(a)}"})
    cluster.kill(f"broker-{c}")
    assert _wait(lambda: _part(view, topic).isrs == [a, b], 20)
    acked += _produce(cluster, topic, range(200, 300))        # on a and b (min.insync = 2)
    assert acked == list(range(300))
    cluster.kill(f"broker-{b}")
    assert _wait(lambda: _part(view, topic).isrs == [a], 20)
    # power loss on a: the last 150 acknowledged records never reached its disk
    cluster.kill(f"broker-{a}")
    log_dir = cluster.layout.data_dir / f"broker-{a}" / f"{topic}-0"
    _lose_tail(log_dir, 150)
    (cluster.layout.data_dir / f"broker-{a}" / BOOT_ID).write_text(str(uuid.uuid4()))
    cluster.restart_broker(a)
    view = AdminClient({"bootstrap.servers": f"127.0.0.1:{cluster.layout.broker_port(a)}"})
    # a is up and unfenced, yet it is not trusted with the partition: no leader, empty ISR
    time.sleep(3)
    p = _part(view, topic)
    assert p.leader == -1 and p.isrs == [], (p.leader, p.isrs)
    # b was only SIGKILLed (same boot: its page cache kept everything): it leads from the ELR
    cluster.restart_broker(b)
    assert _wait(lambda: _part(view, topic).leader == b, 30), "the eligible replica never led"
    got = _read(cluster.bootstrap, topic, 300)
    assert got == list(range(300)), f"lost {sorted(set(range(300)) - set(got))[:10]}..."
    # a catches up from b and rejoins; c too; all agree
    cluster.restart_broker(c)
    assert _wait(lambda: sorted(_part(view, topic).isrs) == [a, b, c], 40)
    more = _produce(cluster, topic, range(300, 310))
    assert more == list(range(300, 310))
    cluster.kill(f"broker-{b}", signal.SIGKILL)                # now a (caught up) may lead
    assert _wait(lambda: _part(view, topic).leader in (a, c), 30)
    assert _read(cluster.bootstrap, topic, 310) == list(range(310))
    cluster.restart_broker(b)
