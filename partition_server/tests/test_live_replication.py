"""Replication under faults on a live cluster (RF=3, min.insync.replicas=2, acks=all).

(a) SIGKILL the partition leader while an idempotent producer writes, restart it; rounds.
(b) SIGSTOP a follower: it leaves the ISR within replica.lag.time.max.ms + slack and writes go
    on; SIGCONT: it catches up and rejoins.
(d) two of three replicas down: produce fails with NOT_ENOUGH_REPLICAS, nothing becomes visible.
F4: a paused leader comes back as a zombie and acknowledges nothing.
F6: unclean election off → offline, nothing lost; turned on → available, the documented loss.
After each: every acknowledged record is readable exactly once, in acknowledgement order.
"""

import os
import signal
import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from partition_server.testing import LiveCluster

pytestmark = pytest.mark.live
LAG_MS = 3000
ROUNDS = 10 if os.environ.get("RAFTKA_SOAK") == "1" else 2


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LiveCluster(tmp_path_factory.mktemp("replication"),
                    {"replica.lag.time.max.ms": str(LAG_MS), "broker.heartbeat.interval.ms": "500",
                     "connections.max.idle.ms": "2000"})
    c.start()
    yield c
    c.stop()


def _create(cluster, topic):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for fut in admin.create_topics([NewTopic(topic, 1, 3, config={"min.insync.replicas": "2"})]).values():
        fut.result(30)
    return admin


def _partition(admin, topic):
    return admin.list_topics(topic, timeout=10).topics[topic].partitions[0]


def _read_all(cluster, topic, timeout_s=30):
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "verify",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    got = []
    deadline = time.time() + timeout_s
    while len(got) < high and time.time() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append(int(m.value()))
    c.close()
    return got


class Writer:
    """An idempotent acks=all producer recording which values were acknowledged, in order."""

    def __init__(self, cluster, topic):
        self.topic = topic
        self.acked: list[int] = []
        self.failed = 0
        self.p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                           "enable.idempotence": True, "linger.ms": 2,
                           "message.timeout.ms": 60000})
        self.next = 0

    def _cb(self, err, msg):
        if err is None:
            self.acked.append(int(msg.value()))
        else:
            self.failed += 1

    def write_for(self, seconds: float) -> None:
        end = time.time() + seconds
        while time.time() < end:
            self.p.produce(self.topic, str(self.next).encode(), partition=0, on_delivery=self._cb)
            self.next += 1
            self.p.poll(0.005)

    def flush(self) -> None:
        assert self.p.flush(90) == 0


def _check(cluster, topic, writer):
    got = _read_all(cluster, topic)
    assert len(got) == len(set(got)), "a value appears at two offsets (duplicate)"
    assert set(writer.acked) <= set(got), f"lost acknowledged writes: {sorted(set(writer.acked) - set(got))[:10]}"
    positions = {v: i for i, v in enumerate(got)}
    order = [positions[v] for v in writer.acked]
    assert order == sorted(order), "acknowledged order differs from log order"


def test_leader_sigkill_rounds_lose_nothing(cluster):
    topic = "kill-leader"
    admin = _create(cluster, topic)
    w = Writer(cluster, topic)
    for _ in range(ROUNDS):
        w.write_for(1.0)
        leader = _partition(admin, topic).leader
        cluster.kill(f"broker-{leader}")
        w.write_for(3.0)                      # the new leader takes over meanwhile
        cluster.restart_broker(leader)
    w.write_for(1.0)
    w.flush()
    assert w.acked, "nothing was acknowledged"
    _check(cluster, topic, w)


def test_paused_follower_leaves_isr_and_rejoins(cluster):
    topic = "pause-follower"
    admin = _create(cluster, topic)
    w = Writer(cluster, topic)
    w.write_for(1.0)
    # acknowledged before the pause: the producer's first request (InitProducerId) may still be
    # in flight after a second on a loaded machine, and one sent to the broker about to be
    # paused would hang until librdkafka's request timeout, longer than this test waits
    w.p.flush(30)
    assert w.acked, "nothing acknowledged before the pause"
    part = _partition(admin, topic)
    follower = next(r for r in part.replicas if r != part.leader)
    # ask only the leader from now on: a paused broker accepts connections but never answers
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{cluster.layout.broker_port(part.leader)}"})
    cluster.kill(f"broker-{follower}", signal.SIGSTOP)
    try:
        t0 = time.time()
        while follower in _partition(admin, topic).isrs and time.time() - t0 < LAG_MS / 1000 + 10:
            w.write_for(0.5)
        shrink_s = time.time() - t0
        assert follower not in _partition(admin, topic).isrs
        assert shrink_s < LAG_MS / 1000 + 10
        before = len(w.acked)
        w.write_for(1.0)
        w.p.flush(30)
        assert len(w.acked) > before          # writes go on with ISR = 2 ≥ min.insync.replicas
    finally:
        cluster.proc(f"broker-{follower}").proc.send_signal(signal.SIGCONT)
    t0 = time.time()
    while follower not in _partition(admin, topic).isrs and time.time() - t0 < 30:
        w.write_for(0.5)
    assert follower in _partition(admin, topic).isrs
    w.flush()
    _check(cluster, topic, w)


def test_two_replicas_down_refuses_acks_all(cluster):
    topic = "two-down"
    admin = _create(cluster, topic)
    w = Writer(cluster, topic)
    w.write_for(0.5)
    w.flush()
    part = _partition(admin, topic)
    down = [r for r in part.replicas if r != part.leader]
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{cluster.layout.broker_port(part.leader)}"})
    for b in down:
        cluster.kill(f"broker-{b}")
    try:
        # A write sent before the ISR shrinks is in doubt (appended, not acknowledged; it may
        # still commit later, as in Kafka). Once the ISR is the leader alone, acks=all must be
        # refused before anything is appended.
        t0 = time.time()
        while len(_partition(admin, topic).isrs) > 1 and time.time() - t0 < 30:
            time.sleep(0.2)
        assert _partition(admin, topic).isrs == [part.leader]
        p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                      "message.timeout.ms": 8000, "enable.idempotence": False})
        errors = []
        p.produce(topic, b"999999", partition=0,
                  on_delivery=lambda err, msg: errors.append(err))
        p.flush(20)
        assert errors and errors[0] is not None
        assert errors[0].code() in (KafkaError.NOT_ENOUGH_REPLICAS, KafkaError._MSG_TIMED_OUT), \
            errors[0]
    finally:
        for b in down:
            cluster.restart_broker(b)
    got = _read_all(cluster, topic)
    assert 999999 not in got                    # never acknowledged, never visible
    _check(cluster, topic, w)


def test_idle_connections_are_closed(cluster):
    """connections.max.idle.ms (2 s here): a silent client is disconnected, a busy one is not."""
    import socket
    host, port = cluster.bootstrap.split(",")[0].split(":")
    s = socket.create_connection((host, int(port)))
    s.settimeout(10)
    t0 = time.time()
    assert s.recv(10) == b""                    # closed by the broker
    assert 1.5 <= time.time() - t0 < 8
    s.close()


def test_high_watermarks_are_checkpointed_and_survive_sigkill(cluster):
    """Every replica writes its high watermarks to replication-offset-checkpoint (every
    replica.high.watermark.checkpoint.interval.ms, 5 s by default), so a restarted broker does not
    start them at 0."""
    from partition_server.log.offset_checkpoint import HIGH_WATERMARK_FILE, read_checkpoint
    topic = "hw-checkpoint"
    _create(cluster, topic)
    w = Writer(cluster, topic)
    for i in range(40):
        w.p.produce(topic, str(i).encode(), partition=0, on_delivery=w._cb)
    w.flush()
    assert len(w.acked) == 40
    files = {b: cluster.layout.data_dir / f"broker-{b}" / HIGH_WATERMARK_FILE for b in (0, 1, 2)}

    def checkpointed():
        return {b: read_checkpoint(str(f)).get((topic, 0)) for b, f in files.items()}
    deadline = time.time() + 15
    while checkpointed() != {0: 40, 1: 40, 2: 40} and time.time() < deadline:
        time.sleep(0.5)
    assert checkpointed() == {0: 40, 1: 40, 2: 40}
    victim = _partition(AdminClient({"bootstrap.servers": cluster.bootstrap}), topic).leader
    cluster.kill(f"broker-{victim}")
    assert read_checkpoint(str(files[victim])).get((topic, 0)) == 40     # intact after SIGKILL
    cluster.restart_broker(victim)
    assert sorted(_read_all(cluster, topic)) == list(range(40))


def _wait(cond, timeout_s, step=0.3):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if cond():
            return True
        time.sleep(step)
    return cond()


def test_paused_leader_comes_back_as_a_zombie_and_acks_nothing(cluster):
    """F4: SIGSTOP the leader past its session (the controller fences it and elects another ISR
    member) while writes go on, then SIGCONT. The resumed ex-leader must not acknowledge what it
    had in flight, and truncates to the new leader's log: no acknowledged write lost, no offset
    with two values."""
    topic = "zombie-leader"
    admin = _create(cluster, topic)
    w = Writer(cluster, topic)
    w.write_for(1.0)
    old = _partition(admin, topic).leader
    others = ",".join(f"127.0.0.1:{cluster.layout.broker_port(b)}" for b in (0, 1, 2) if b != old)
    admin = AdminClient({"bootstrap.servers": others})
    cluster.kill(f"broker-{old}", signal.SIGSTOP)
    try:
        t0 = time.time()
        while _partition(admin, topic).leader in (old, -1) and time.time() - t0 < 30:
            w.write_for(0.5)
        assert _partition(admin, topic).leader not in (old, -1), "no new leader while paused"
        w.write_for(1.0)
    finally:
        cluster.proc(f"broker-{old}").proc.send_signal(signal.SIGCONT)
    w.write_for(3.0)                          # the zombie learns the new epoch meanwhile
    w.flush()
    assert _wait(lambda: old in _partition(admin, topic).isrs, 30), "the ex-leader never rejoined"
    _check(cluster, topic, w)


def test_unclean_election_is_off_by_default_and_its_trade_off_when_on(cluster):
    """F6 / seed 002 §2.3. Replicas [a, b], min.insync.replicas=1: b is paused and drops out of
    the ISR, a acknowledges more writes alone, then a dies and b comes back. With unclean
    election off (the default) the partition stays offline: nothing acknowledged is lost, the
    partition just has no leader. Turning it on for the topic elects b: the partition is
    available again but the records only a had are gone — the documented trade-off. When a
    returns it truncates to b's log, so every replica agrees and no offset has two values."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource
    topic = "unclean"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    a, b = 0, 1
    for fut in admin.create_topics([NewTopic(topic, 1, replica_assignment=[[a, b]],
                                             config={"min.insync.replicas": "1"})]).values():
        fut.result(30)
    w = Writer(cluster, topic)
    for i in range(20):
        w.p.produce(topic, str(i).encode(), partition=0, on_delivery=w._cb)
    w.flush()
    survivor_view = AdminClient({"bootstrap.servers": f"127.0.0.1:{cluster.layout.broker_port(a)}"})
    cluster.kill(f"broker-{b}", signal.SIGSTOP)
    try:
        assert _wait(lambda: _partition(survivor_view, topic).isrs == [a], LAG_MS / 1000 + 15)
        for i in range(20, 50):
            w.p.produce(topic, str(i).encode(), partition=0, on_delivery=w._cb)
        w.flush()
        assert sorted(w.acked) == list(range(50))          # 30 acknowledged by a alone
        cluster.kill(f"broker-{a}")
    finally:
        cluster.proc(f"broker-{b}").proc.send_signal(signal.SIGCONT)
    view = AdminClient({"bootstrap.servers": f"127.0.0.1:{cluster.layout.broker_port(2)}"})
    # the controller fences a once its session lapses; b is alive but must not be elected
    assert _wait(lambda: _partition(view, topic).leader == -1, 20)
    time.sleep(4)
    part = _partition(view, topic)
    assert part.leader == -1 and part.isrs == [a], (part.leader, part.isrs)

    res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[ConfigEntry(
        "unclean.leader.election.enable", "true", incremental_operation=AlterConfigOpType.SET)])
    for fut in view.incremental_alter_configs([res]).values():
        fut.result(30)
    assert _wait(lambda: _partition(view, topic).leader == b, 20), "no unclean election"
    assert _partition(view, topic).isrs == [b]
    assert sorted(_read_all(cluster, topic)) == list(range(20))     # 20..49 are gone
    # (the idempotent producer that wrote 20..49 would now get a fatal OUT_OF_ORDER_SEQUENCE_NUMBER:
    # the new leader never saw those sequences — loss is detected, not papered over)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": False})
    errors = []
    for i in range(100, 105):
        p.produce(topic, str(i).encode(), partition=0, on_delivery=lambda err, msg: errors.append(err))
    assert p.flush(30) == 0 and errors == [None] * 5
    cluster.restart_broker(a)
    assert _wait(lambda: a in _partition(view, topic).isrs, 30), "a never rejoined"
    # a truncated its 30 unique records: once it leads again (the controller moves leadership
    # back to the preferred replica every 5 s) it serves exactly what b served
    assert _wait(lambda: _partition(view, topic).leader == a, 30)
    assert _read_all(cluster, topic) == list(range(20)) + list(range(100, 105))


def test_a_crashed_leader_is_replaced_before_its_session_would_expire(cluster):
    """The kernel closes a SIGKILLed broker's heartbeat connection; the controller fences it
    raftka.controller.disconnect.fence.ms (0.5 s) later instead of after broker.session.timeout.ms
    (9 s), so a new leader takes over in about a second. A paused broker keeps its socket and is
    judged by its session as before (test_paused_leader_* above)."""
    topic = "fast-failover"
    admin = _create(cluster, topic)
    w = Writer(cluster, topic)
    w.write_for(0.5)
    w.flush()
    old = _partition(admin, topic).leader
    others = ",".join(f"127.0.0.1:{cluster.layout.broker_port(b)}" for b in (0, 1, 2) if b != old)
    view = AdminClient({"bootstrap.servers": others})
    t0 = time.time()
    cluster.kill(f"broker-{old}")
    assert _wait(lambda: _partition(view, topic).leader not in (old, -1), 20, step=0.1)
    moved_s = time.time() - t0
    cluster.restart_broker(old)
    assert moved_s < 6, f"leadership moved after {moved_s:.1f} s: the session timeout did it"
    _check(cluster, topic, w)
