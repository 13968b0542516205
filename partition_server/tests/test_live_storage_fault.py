"""F11-style storage fault (issue #6 (f)): one broker's log directory "fills up" (the
`raftka.storage.fault.file` shim makes every log write fail with ENOSPC) while idempotent
acks=all producers write. It is the broker's only log directory, so — Kafka's rule when every
log directory has failed — the broker shuts down (exit code 1) after a controlled shutdown: it
leaves the ISR and leadership of every partition, producers only see retriable errors, and every
acknowledged record is in the log exactly once at its acknowledged offset. (One directory of
several failing: test_live_jbod.py.)"""

import threading
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from partition_server.testing import LiveCluster

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LiveCluster(tmp_path_factory.mktemp("disk"), {"raftka.storage.fault.file": "FAIL_WRITES"})
    c.start()
    yield c
    c.stop()


def _layout(admin, topic):
    md = admin.list_topics(topic, timeout=10).topics[topic]
    return {p: (m.leader, set(m.isrs)) for p, m in md.partitions.items()}


def test_full_log_directory_takes_the_broker_out_of_leadership_and_isr(cluster):
    topic, total = "disk-full", 3000
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for fut in admin.create_topics([NewTopic(topic, 3, 3, config={"min.insync.replicas": "2"})]).values():
        fut.result(30)
    acked, failed = {}, []

    def report(err, msg):
        if err is not None:
            failed.append(err)
        else:
            acked[(msg.partition(), msg.offset())] = msg.value()

    def produce():
        p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                      "enable.idempotence": True, "linger.ms": 5})
        for i in range(total):
            p.produce(topic, str(i).encode(), partition=i % 3, on_delivery=report)
            p.poll(0)
            time.sleep(0.002)
        assert p.flush(90) == 0
    writer = threading.Thread(target=produce)
    writer.start()
    time.sleep(1.5)
    victim = _layout(admin, topic)[0][0]
    (cluster.layout.data_dir / f"broker-{victim}" / "FAIL_WRITES").touch()
    writer.join()
    try:
        proc = cluster.proc(f"broker-{victim}").proc
        proc.wait(60)                                       # no log directory left: it stops
        assert proc.returncode == 1
        end = time.time() + 20
        while time.time() < end:
            layout = _layout(admin, topic)
            if all(leader != victim and victim not in isr for leader, isr in layout.values()):
                break
            time.sleep(0.3)
        assert all(leader != victim and victim not in isr for leader, isr in layout.values()), layout
        assert failed == [] and len(acked) == total        # retries hid the failure completely
        c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "disk-check",
                      "enable.auto.commit": False})
        c.assign([TopicPartition(topic, p, 0) for p in range(3)])
        got, end = {}, time.time() + 60
        while len(got) < total and time.time() < end:
            m = c.poll(0.5)
            if m is not None and not m.error():
                assert (m.partition(), m.offset()) not in got
                got[(m.partition(), m.offset())] = m.value()
        c.close()
        for where, value in acked.items():                  # at its acknowledged offset
            assert got.get(where) == value, where
        values = sorted(int(v) for v in got.values())
        assert values == list(range(total))                 # exactly once: no duplicates
    finally:
        (cluster.layout.data_dir / f"broker-{victim}" / "FAIL_WRITES").unlink()
        cluster.restart_broker(victim)
    end = time.time() + 30                                  # after a restart it catches up
    while time.time() < end and not all(victim in isr for _, isr in _layout(admin, topic).values()):
        time.sleep(0.3)
    assert all(victim in isr for _, isr in _layout(admin, topic).values())
