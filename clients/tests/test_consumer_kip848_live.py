"""Our consumer with group.protocol=consumer (KIP-848) against a live cluster (one module-scoped
cluster; records written with confluent-kafka so these tests do not depend on our producer):

- three of our consumers share 6 partitions, each record consumed once; one leaves and its
  partitions move, nothing lost or duplicated; at no moment do two members own a partition;
- a mixed group of our consumer and confluent-kafka consumers (both group.protocol=consumer)
  shares the partitions;
- the blocking facade joins, commits with its member epoch, and a successor resumes there;
- regex subscription, the range assignor, static membership, and an unknown assignor's typed
  error.
"""

from __future__ import annotations

import threading
import time

import pytest
import trio
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import Producer as CKProducer
from confluent_kafka.admin import AdminClient, NewTopic

from clients.consumer import Consumer, TopicPartition
from clients.consumer.sync import SyncConsumer
from wire.errors import ErrorCode, KafkaError
from partition_server.testing import LiveCluster

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LiveCluster(tmp_path_factory.mktemp("kip848"),
                    {"group.consumer.heartbeat.interval.ms": "300",
                     "group.consumer.session.timeout.ms": "10000",
                     "offsets.topic.num.partitions": "6",
                     "transaction.state.log.num.partitions": "3"})
    c.start()
    yield c
    c.stop()


def create_topic(cluster, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for f in admin.create_topics([NewTopic(name, partitions, 3)]).values():
        f.result(30)


def produce(cluster, topic: str, start: int, n: int, partitions: int) -> None:
    """Values str(i) for i in [start, start + n), spread round the partitions."""
    p = CKProducer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 5})
    for i in range(start, start + n):
        p.produce(topic, value=str(i).encode(), partition=i % partitions)
    assert p.flush(30) == 0


def config(cluster, group: str, **extra) -> dict:
    return {"bootstrap.servers": cluster.bootstrap, "group.id": group,
            "group.protocol": "consumer", "auto.offset.reset": "earliest",
            "max.poll.interval.ms": 30000, **extra}


class Ownership:
    """Every member's listener calls in one log; checks no partition has two owners at once
    (the member's own view: revoked before anyone else is assigned it)."""

    def __init__(self):
        self.owner: dict[TopicPartition, str] = {}
        self.violations: list[str] = []
        self.log: list[tuple[str, str, list]] = []

    def listener(self, name: str):
        def assigned(tps):
            self.log.append((name, "assigned", list(tps)))
            for tp in tps:
                if self.owner.get(tp) not in (None, name):
                    self.violations.append(f"{tp} assigned to {name} while {self.owner[tp]} owns it")
                self.owner[tp] = name

        def revoked(tps):
            self.log.append((name, "revoked", list(tps)))
            for tp in tps:
                if self.owner.get(tp) == name:
                    del self.owner[tp]
        return {"on_assigned": assigned, "on_revoked": revoked}


async def run_member(consumer: Consumer, got: list, stop: trio.Event) -> None:
    while not stop.is_set():
        for r in await consumer.poll(200):
            got.append(int(r.value))


async def wait_until(predicate, timeout_s: float, what: str) -> None:
    with trio.move_on_after(timeout_s):
        while not predicate():
            await trio.sleep(0.1)
        return
    raise AssertionError(f"timed out waiting for {what}")


async def test_three_consumers_share_six_partitions_then_one_leaves(cluster):
    topic, group = "kip848-share", "g-kip848-share"
    create_topic(cluster, topic, 6)
    own = Ownership()
    consumers = {n: Consumer(config=config(cluster, group, **{"client.id": n}))
                 for n in ("a", "b", "c")}
    got = {n: [] for n in consumers}
    stops = {n: trio.Event() for n in consumers}
    async with trio.open_nursery() as nursery:
        for n, c in consumers.items():
            await c.start(nursery)
            c.subscribe([topic], **own.listener(n))
            nursery.start_soon(run_member, c, got[n], stops[n])
        # a member holds its partitions a heartbeat before the coordinator confirms it stable
        await wait_until(lambda: sorted(len(c.assignment()) for c in consumers.values())
                         == [2, 2, 2] and all(c.member.state.state.value == "stable"
                                              for c in consumers.values()),
                         30, "three stable members with two partitions each")
        assert sorted(tp for c in consumers.values() for tp in c.assignment()) == \
            [TopicPartition(topic, p) for p in range(6)]
        epochs = {c.member.generation for c in consumers.values()}
        assert min(epochs) > 0

        await trio.to_thread.run_sync(produce, cluster, topic, 0, 600, 6)
        await wait_until(lambda: sum(map(len, got.values())) >= 600, 30, "600 records")
        everything = [v for vs in got.values() for v in vs]
        assert sorted(everything) == list(range(600))            # each record exactly once
        for n, c in consumers.items():                           # each from its own partitions
            mine = {tp.partition for tp in c.assignment()}
            assert {v % 6 for v in got[n]} <= mine

        # c leaves (close commits, revokes and sends epoch -1): a and b take its partitions
        c_parts = set(consumers["c"].assignment())
        stops["c"].set()
        await consumers["c"].close()
        await wait_until(lambda: sorted(len(consumers[n].assignment()) for n in "ab") == [3, 3],
                         30, "a and b with three partitions each")
        moved = set(consumers["a"].assignment()) | set(consumers["b"].assignment())
        assert c_parts <= moved
        await trio.to_thread.run_sync(produce, cluster, topic, 600, 300, 6)
        await wait_until(lambda: sum(map(len, got.values())) >= 900, 30, "900 records")
        await trio.sleep(0.5)                                    # anything extra shows up
        everything = [v for vs in got.values() for v in vs]
        assert sorted(everything) == list(range(900))            # nothing lost, none twice
        for n in "ab":
            stops[n].set()
        for n in "ab":
            await consumers[n].close()
    assert not own.violations, own.violations
    # c's partitions (held since its last assignment) were revoked from c, at close, before
    # a or b were assigned them
    c_assigned = max(i for i, (n, what, tps) in enumerate(own.log) if n == "c" and what == "assigned"
                     and tps)
    c_revoked = max(i for i, (n, what, tps) in enumerate(own.log) if n == "c" and what == "revoked")
    later = [i for i, (n, what, tps) in enumerate(own.log)
             if i > c_assigned and n in "ab" and what == "assigned" and set(tps) & c_parts]
    assert later and min(later) > c_revoked


async def test_mixed_group_with_confluent_kafka(cluster):
    topic, group = "kip848-mixed", "g-kip848-mixed"
    create_topic(cluster, topic, 6)
    seen: list[tuple[str, int]] = []
    ck_assignment: dict[str, set] = {}
    lock = threading.Lock()
    stop = threading.Event()

    def ck_member(name: str) -> None:
        c = CKConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                        "group.protocol": "consumer", "auto.offset.reset": "earliest"})
        c.subscribe([topic])
        try:
            while not stop.is_set():
                m = c.poll(0.2)
                ck_assignment[name] = {tp.partition for tp in c.assignment()}
                if m is not None and not m.error():
                    with lock:
                        seen.append((name, int(m.value())))
        finally:
            c.close()

    threads = [threading.Thread(target=ck_member, args=(f"ck{i}",)) for i in range(2)]
    ours = Consumer(config=config(cluster, group))
    got: list[int] = []
    try:
        for t in threads:
            t.start()
        async with trio.open_nursery() as nursery:
            await ours.start(nursery)
            ours.subscribe([topic])
            our_stop = trio.Event()
            nursery.start_soon(run_member, ours, got, our_stop)

            def settled():
                parts = [{tp.partition for tp in ours.assignment()}] + \
                    [ck_assignment.get(f"ck{i}", set()) for i in range(2)]
                return all(parts) and sorted(p for s in parts for p in s) == list(range(6))
            await wait_until(settled, 40, "our consumer and two librdkafka members sharing 6")
            await trio.to_thread.run_sync(produce, cluster, topic, 0, 300, 6)
            await wait_until(lambda: len(got) + len(seen) >= 300, 30, "300 records")
            await trio.sleep(0.5)
            mine = {tp.partition for tp in ours.assignment()}
            our_stop.set()
            await ours.close()
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    everything = got + [v for _, v in seen]
    assert sorted(everything) == list(range(300))
    assert got and {v % 6 for v in got} <= mine
    assert seen


def test_blocking_facade_commits_with_member_epoch(cluster):
    topic, group = "kip848-sync", "g-kip848-sync"
    create_topic(cluster, topic, 3)
    produce(cluster, topic, 0, 90, 3)
    with SyncConsumer(config=config(cluster, group, **{"enable.auto.commit": False})) as c:
        c.subscribe([topic])
        got: list[int] = []
        end = time.time() + 30
        while len(got) < 60 and time.time() < end:
            got += [int(r.value) for r in c.poll(200)]
        assert c.assignment() and len(c.assignment()) == 3
        c.commit()                      # OffsetCommit v9: member id + member epoch
        committed = c.committed(c.assignment())
        assert sum(committed.values()) == len(got)
    produce(cluster, topic, 90, 30, 3)
    with SyncConsumer(config=config(cluster, group)) as c:
        c.subscribe([topic])
        rest: list[int] = []
        end = time.time() + 30
        while len(got) + len(rest) < 120 and time.time() < end:
            rest += [int(r.value) for r in c.poll(200)]
    assert sorted(got + rest) == list(range(120))        # resumed at the commits


async def test_regex_range_static_and_bad_assignor(cluster):
    for t in ("kip848-rx-1", "kip848-rx-2", "kip848-other"):
        create_topic(cluster, t, 2)
    produce(cluster, "kip848-rx-1", 0, 10, 2)
    produce(cluster, "kip848-rx-2", 10, 10, 2)
    produce(cluster, "kip848-other", 100, 10, 2)
    cfg = config(cluster, "g-kip848-rx", **{"group.remote.assignor": "range",
                                           "group.instance.id": "static-1"})
    async with Consumer(config=cfg) as c:
        c.subscribe("^kip848-rx-.*")
        got: list[int] = []
        with trio.move_on_after(30):
            while len(got) < 20:
                got += [int(r.value) for r in await c.poll(200)]
        assert sorted(got) == list(range(20))                 # the regex, not kip848-other
        assert sorted(c.assignment()) == [TopicPartition(t, p) for t in
                                          ("kip848-rx-1", "kip848-rx-2") for p in range(2)]
        member_id = c.member.member_id
        await c.commit()
    # a subscription change goes out on the next heartbeat: the old partitions are revoked, the
    # new topic's assigned (committed above, so nothing of the old topics comes back)
    revoked: list = []
    async with Consumer(config=config(cluster, "g-kip848-rx")) as c:
        c.subscribe("^kip848-rx-.*", on_revoked=lambda tps: revoked.extend(tps))
        with trio.fail_after(20):
            while len(c.assignment()) < 4:
                assert await c.poll(200) == []
        c.subscribe(["kip848-other"], on_revoked=lambda tps: revoked.extend(tps))
        other: list[int] = []
        with trio.move_on_after(20):
            while len(other) < 10:
                other += [int(r.value) for r in await c.poll(200)]
        assert sorted(other) == list(range(100, 110))
        assert sorted(c.assignment()) == [TopicPartition("kip848-other", p) for p in range(2)]
        assert sorted(revoked) == [TopicPartition(t, p) for t in ("kip848-rx-1", "kip848-rx-2")
                                   for p in range(2)]
        await c.unsubscribe()
    # the static member left with epoch -2; the same instance id joins again at once
    async with Consumer(config=cfg) as c:
        c.subscribe("^kip848-rx-.*")
        with trio.move_on_after(20):
            while len(c.assignment()) < 4:
                assert await c.poll(200) == []                 # everything was committed
        assert len(c.assignment()) == 4
        assert c.member.member_id and c.member.member_id != member_id
    bad = config(cluster, "g-kip848-bad", **{"group.remote.assignor": "sticky"})
    async with Consumer(config=bad) as c:
        c.subscribe(["kip848-other"])
        with pytest.raises(KafkaError) as err:
            with trio.fail_after(20):
                while True:
                    await c.poll(200)
        assert err.value.code == ErrorCode.UNSUPPORTED_ASSIGNOR


async def test_member_that_stops_polling_leaves_and_its_partitions_are_lost(cluster):
    """max.poll.interval.ms passes without a poll: the member leaves (epoch -1), the other member
    takes everything; the next poll reports the partitions lost (no commit) and rejoins."""
    topic, group = "kip848-idle", "g-kip848-idle"
    create_topic(cluster, topic, 4)
    lost: list = []
    a = Consumer(config=config(cluster, group, **{"max.poll.interval.ms": 1500}))
    b = Consumer(config=config(cluster, group))
    async with trio.open_nursery() as nursery:
        await a.start(nursery)
        await b.start(nursery)
        a.subscribe([topic], on_lost=lambda tps: lost.extend(tps))
        b.subscribe([topic])
        b_stop = trio.Event()
        nursery.start_soon(run_member, b, [], b_stop)
        with trio.fail_after(30):
            while sorted(len(c.assignment()) for c in (a, b)) != [2, 2]:
                await a.poll(100)
        mine = a.assignment()
        first_epoch = a.member.generation
        # no poll: the watchdog leaves (awaited, not a fixed 3 s: it checks every 0.375 s)
        await wait_until(lambda: not a.member.stable, 20, "a's watchdog to leave the group")
        await wait_until(lambda: len(b.assignment()) == 4, 20, "b to take all four")
        with trio.fail_after(30):
            while sorted(len(c.assignment()) for c in (a, b)) != [2, 2]:
                await a.poll(100)
        assert sorted(lost) == sorted(mine)
        assert a.member.generation > first_epoch
        b_stop.set()
        await a.close()
        await b.close()


async def test_coordinator_sigkill_heartbeats_find_the_new_one(cluster):
    """The group coordinator's broker dies: heartbeats find the new coordinator, which carries
    the group on (same member, no fencing), and every record is consumed once."""
    from partition_server.group.coordinator import OFFSETS_TOPIC, partition_for
    topic, group = "kip848-failover", "g-kip848-failover"
    create_topic(cluster, topic, 3)
    lost: list = []
    killed = None
    c = Consumer(config=config(cluster, group))
    got: list[int] = []
    try:
        async with trio.open_nursery() as nursery:
            await c.start(nursery)
            c.subscribe([topic], on_lost=lambda tps: lost.extend(tps))
            stop = trio.Event()
            nursery.start_soon(run_member, c, got, stop)
            await wait_until(lambda: len(c.assignment()) == 3 and c.member.stable, 30,
                             "the member to own all three partitions")
            await trio.to_thread.run_sync(produce, cluster, topic, 0, 60, 3)
            await wait_until(lambda: len(got) >= 60, 30, "the first 60 records")
            await c.commit()
            member_id = c.member.member_id
            admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
            md = admin.list_topics(OFFSETS_TOPIC, timeout=10).topics[OFFSETS_TOPIC]
            killed = md.partitions[partition_for(group, len(md.partitions))].leader
            cluster.kill(f"broker-{killed}")
            await trio.to_thread.run_sync(produce, cluster, topic, 60, 60, 3)
            await wait_until(lambda: len(got) >= 120, 40, "the records written after the kill")
            # a heartbeat has gone to the new coordinator and was answered
            sent = c.member.state.heartbeat_interval_ms
            await trio.sleep(3 * sent / 1000 + 1)
            assert c.member.member_id == member_id and c.member.stable and not lost
            assert c.member.coordinator != killed
            stop.set()
            await c.close()
    finally:
        if killed is not None:
            await trio.to_thread.run_sync(cluster.restart_broker, killed)
    assert sorted(got) == list(range(120))
