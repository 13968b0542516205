"""Fault F13: SIGKILL the group coordinator's broker during a steady group and during a
rebalance. Group membership is persisted in `__consumer_offsets`, so a steady group keeps its
generation (same member ids, no rebalance) through a coordinator failover; an interrupted
rebalance completes on the new coordinator. In both cases every record is processed at least once,
committed offsets are all there, and the group is stable again within session timeout + 5 s."""

import threading
import time

import msgpack
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from partition_server.group.coordinator import GROUP_KEY, OFFSETS_TOPIC, partition_for
from partition_server.testing import LiveCluster
from wire.messages.api_keys import ApiKey

pytestmark = pytest.mark.live

# Longer than a broker failover takes (broker.session.timeout.ms = 9 s, as in Kafka, then the
# new leader replays the partition), so members can ride it out without rejoining.
SESSION_MS = 12000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LiveCluster(tmp_path_factory.mktemp("group-failover"))
    c.start()
    yield c
    c.stop()


class Member(threading.Thread):
    """A confluent-kafka group member that commits after processing each record."""

    def __init__(self, cluster, topic, group, seen):
        super().__init__(daemon=True)
        self.cluster, self.topic, self.group, self.seen = cluster, topic, group, seen
        self.stop = threading.Event()
        self.assignment: set[int] = set()
        self.ready = threading.Event()

    def run(self):
        c = Consumer({"bootstrap.servers": self.cluster.bootstrap, "group.id": self.group,
                      "auto.offset.reset": "earliest", "enable.auto.commit": False,
                      "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": 500})

        def assigned(consumer, parts):
            self.assignment = {tp.partition for tp in parts}
            self.ready.set()

        def revoked(consumer, parts):
            self.assignment = set()
        c.subscribe([self.topic], on_assign=assigned, on_revoke=revoked)
        try:
            while not self.stop.is_set():
                m = c.poll(0.2)
                if m is None or m.error():
                    continue
                self.seen.append((m.partition(), m.offset(), time.time()))
                try:
                    c.commit(m, asynchronous=False)
                except Exception:  # noqa: BLE001 - a commit refused during failover is retried by redelivery
                    pass
        finally:
            c.close()


def _produce(cluster, topic, start, n):
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(start, start + n):
        p.produce(topic, str(i).encode(), partition=i % 6)
    assert p.flush(60) == 0


def _describe(admin, group, timeout_s=15):
    d = admin.describe_consumer_groups([group])[group].result(timeout_s)
    return str(d.state).rsplit(".", 1)[-1], sorted(m.member_id for m in d.members)


def _wait(pred, timeout_s, what):
    """Until `pred()` holds. A check that raises (a DescribeGroups timing out while the new
    coordinator loads the group on a loaded machine) is tried again until the deadline."""
    end = time.time() + timeout_s
    last = None
    while time.time() < end:
        try:
            if pred():
                return
        except Exception as exc:   # noqa: BLE001 - reported below if it never passes
            last = exc
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}"
                         + (f" (last error: {last!r})" if last is not None else ""))


def _coordinator(admin, group):
    md = admin.list_topics(OFFSETS_TOPIC, timeout=10).topics[OFFSETS_TOPIC]
    return md.partitions[partition_for(group, len(md.partitions))].leader


def _stored_members(cluster, group) -> list[str] | None:
    """Member ids of the last group record of `group` below the high watermark of its
    __consumer_offsets partition: what a new coordinator would load (None: no record yet)."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    n = len(admin.list_topics(OFFSETS_TOPIC, timeout=10).topics[OFFSETS_TOPIC].partitions)
    key = msgpack.packb([GROUP_KEY, group])
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "f13-probe",
                  "enable.auto.commit": False})
    try:
        tp = TopicPartition(OFFSETS_TOPIC, partition_for(group, n), 0)
        _, high = c.get_watermark_offsets(tp, timeout=10)
        c.assign([tp])
        members, pos, end = None, 0, time.time() + 10
        while pos < high and time.time() < end:
            m = c.poll(0.5)
            if m is None or m.error():
                continue
            if m.key() == key:
                members = None if m.value() is None else \
                    sorted(mem[0] for mem in msgpack.unpackb(m.value())[4])
            pos = m.offset() + 1
        return members
    finally:
        c.close()


def _setup(cluster, topic, group, members):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for fut in admin.create_topics([NewTopic(topic, 6, 3, config={"min.insync.replicas": "2"})]).values():
        fut.result(30)
    _produce(cluster, topic, 0, 300)
    seen: list = []
    ms = [Member(cluster, topic, group, seen) for _ in range(members)]
    for m in ms:
        m.start()
    _wait(lambda: len({(p, o) for p, o, _ in seen}) >= 300, 60, "the first 300 records")
    _wait(lambda: all(m.assignment for m in ms)
          and sorted(p for m in ms for p in m.assignment) == list(range(6)), 30,
          "a complete, disjoint assignment to every member")
    return admin, seen, ms


def _finish(cluster, admin, group, seen, ms, killed, t_kill):
    """Produce 60 more, wait for all 360 and a stable group; returns (seconds from the kill to
    the first record processed after it, (state, member ids) while the members still run)."""
    try:
        _produce(cluster, f"{ms[0].topic}", 300, 60)
        _wait(lambda: len({(p, o) for p, o, _ in seen}) >= 360, SESSION_MS / 1000 + 25,
              "all 360 records after the failover")
        seen_last = {}

        def stable():
            seen_last["assignments"] = [sorted(m.assignment) for m in ms]
            # a fresh admin client each time: one from before the kill may keep asking the
            # dead coordinator's address
            fresh = AdminClient({"bootstrap.servers": cluster.bootstrap})
            seen_last["describe"] = None
            seen_last["describe"] = _describe(fresh, group, 5)
            return seen_last["describe"][0] == "STABLE" and all(m.assignment for m in ms) \
                and sorted(p for m in ms for p in m.assignment) == list(range(6))
        try:
            _wait(stable, SESSION_MS / 1000 + 5, "a stable group, every member owning "
                  "partitions, every partition owned once")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; last seen: {seen_last}") from None
        resumed = min(t for p, o, t in seen if t > t_kill)
        return resumed - t_kill, _describe(AdminClient({"bootstrap.servers": cluster.bootstrap}),
                                           group)
    finally:
        for m in ms:
            m.stop.set()
        for m in ms:
            m.join(20)
        cluster.restart_broker(killed)


def test_steady_group_keeps_its_generation_through_coordinator_sigkill(cluster):
    topic, group = "f13-steady", "g-f13-steady"
    admin, seen, ms = _setup(cluster, topic, group, 3)
    state, before = _describe(admin, group)
    assert state == "STABLE" and len(before) == 3
    # SyncGroup answers only once the generation is stored, so this holds at once (an earlier
    # generation's record, from before every member had joined, would not do)
    assert _stored_members(cluster, group) == before
    killed = _coordinator(admin, group)
    t_kill = time.time()
    cluster.kill(f"broker-{killed}")
    delay, (state, after) = _finish(cluster, admin, group, seen, ms, killed, t_kill)
    assert after == before, "membership was lost: the members had to rejoin"
    assert delay < SESSION_MS / 1000 + 5
    offsets = [(p, o) for p, o, _ in seen]
    assert set(offsets) == {(p, o) for p in range(6) for o in range(60)}    # 360 = 6 × 60


def test_rebalance_interrupted_by_coordinator_sigkill_completes(cluster):
    topic, group = "f13-rebalance", "g-f13-rebalance"
    admin, seen, ms = _setup(cluster, topic, group, 2)
    killed = _coordinator(admin, group)
    newcomer = Member(cluster, topic, group, seen)
    newcomer.start()
    ms.append(newcomer)
    time.sleep(0.3)                                    # the newcomer's join starts a rebalance
    t_kill = time.time()
    cluster.kill(f"broker-{killed}")
    _, (state, members) = _finish(cluster, admin, group, seen, ms, killed, t_kill)
    assert state == "STABLE" and len(members) == 3
    offsets = {(p, o) for p, o, _ in seen}
    assert offsets == {(p, o) for p in range(6) for o in range(60)}


def _consumer_group_describe(cluster, admin, group):
    """(group epoch, {member id: member epoch}) from ConsumerGroupDescribe on the coordinator."""
    import trio

    from clients.connection import BrokerConnection
    from wire.messages.index_generated import REQUESTS
    node = _coordinator(admin, group)
    port = int(cluster.bootstrap.split(",")[node].rsplit(":", 1)[1])

    async def go():
        conn = BrokerConnection("127.0.0.1", port)
        await conn.connect()
        try:
            return await conn.request(REQUESTS[ApiKey.CONSUMER_GROUP_DESCRIBE](group_ids=[group]), 0)
        finally:
            await conn.aclose()
    g = trio.run(go).groups[0]
    return g.error_code, g.group_epoch, {m.member_id: m.member_epoch for m in g.members}


def test_kip848_group_keeps_its_epochs_through_coordinator_sigkill(cluster):
    """KIP-848 group state (epochs, assignments) is persisted too: after the coordinator's
    broker is killed the new coordinator continues the same group epoch with the same members."""
    topic, group = "f13-kip848", "g-f13-kip848"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for fut in admin.create_topics([NewTopic(topic, 6, 3, config={"min.insync.replicas": "2"})]).values():
        fut.result(30)
    _produce(cluster, topic, 0, 300)
    seen, current, stop = [], {}, threading.Event()

    def member(i):
        c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                      "group.protocol": "consumer", "auto.offset.reset": "earliest",
                      "enable.auto.commit": False})
        c.subscribe([topic])
        while not stop.is_set():
            m = c.poll(0.2)
            current[i] = {tp.partition for tp in c.assignment()}
            if m is None or m.error():
                continue
            seen.append((m.partition(), m.offset()))
            try:
                c.commit(m, asynchronous=False)
            except Exception:  # noqa: BLE001 - refused during failover: redelivered
                pass
        c.close()
    threads = [threading.Thread(target=member, args=(i,), daemon=True) for i in range(3)]
    for t in threads:
        t.start()
    killed = None
    try:
        _wait(lambda: len(set(seen)) >= 300 and len(current) == 3 and all(current.values())
              and sorted(p for ps in list(current.values()) for p in ps) == list(range(6)),
              60, "a settled KIP-848 group that consumed the first 300 records")
        # a fourth member comes and goes, so the group epoch is past what three fresh joins on
        # a new coordinator would reach (5 > 3): that tells "carried on" from "started over"
        visitor = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                            "group.protocol": "consumer"})
        visitor.subscribe([topic])
        for _ in range(10):
            visitor.poll(0.2)
        visitor.close()
        _wait(lambda: _consumer_group_describe(cluster, admin, group)[1] >= 5
              and len(_consumer_group_describe(cluster, admin, group)[2]) == 3, 30,
              "the visitor to come and go")
        time.sleep(1.0)
        err, epoch_before, members_before = _consumer_group_describe(cluster, admin, group)
        assert err == 0 and len(members_before) == 3 and epoch_before >= 5
        killed = _coordinator(admin, group)
        cluster.kill(f"broker-{killed}")
        _produce(cluster, topic, 300, 60)
        _wait(lambda: len(set(seen)) >= 360, 60, "the 60 records written after the kill")
        err, epoch_after, members_after = _consumer_group_describe(cluster, admin, group)
        assert err == 0
        assert set(members_after) == set(members_before)
        assert epoch_after >= epoch_before            # the group went on, it did not start over
        assert {(p, o) for p, o in seen} == {(p, o) for p in range(6) for o in range(60)}
    finally:
        stop.set()
        for t in threads:
            t.join(20)
        if killed is not None:
            cluster.restart_broker(killed)
