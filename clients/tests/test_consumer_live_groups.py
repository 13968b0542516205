"""Our consumer in groups against a live cluster (a module-scoped cluster of its own, built as
test_consumer_live.py builds its; records produced with confluent-kafka):

- a group of our consumers plus confluent-kafka consumers with the same assignor shares the
  partitions (one owner per partition once settled, every record consumed), and so does an
  eager sticky group with kafka-python members;
- pattern subscription with listeners and eager rebalances, a static member's restart, new
  partitions and an idle member leaving, cooperative members never sharing a partition, and
  the group coordinator SIGKILLed while members consume.
"""

from __future__ import annotations

import threading
import uuid

import pytest
import trio
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import Producer as CKProducer
from confluent_kafka.admin import AdminClient

from clients.consumer import Consumer, TopicPartition
from clients.tests.test_consumer_live import FAST_GROUP, create_topic, live_cluster, produce

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from live_cluster(tmp_path_factory)


class CKMember:
    """A confluent-kafka group member in a thread, recording what it consumed and owns."""

    def __init__(self, cluster, group: str, topic: str, strategy: str, name: str):
        self.values: list[bytes] = []
        self.owned: set[int] = set()
        self.name = name
        self.stop = threading.Event()
        self.error: Exception | None = None
        self.c = CKConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                             "partition.assignment.strategy": strategy,
                             "auto.offset.reset": "earliest", "enable.auto.commit": True,
                             "auto.commit.interval.ms": 200,
                             "session.timeout.ms": 10000, "heartbeat.interval.ms": 500,
                             "max.poll.interval.ms": 30000, "client.id": name})
        self.cooperative = strategy == "cooperative-sticky"
        self.c.subscribe([topic], on_assign=self._assign, on_revoke=self._revoke)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _assign(self, consumer, parts):
        if self.cooperative:
            consumer.incremental_assign(parts)
            self.owned |= {p.partition for p in parts}
        else:
            consumer.assign(parts)
            self.owned = {p.partition for p in parts}

    def _revoke(self, consumer, parts):
        if self.cooperative:
            consumer.incremental_unassign(parts)
            self.owned -= {p.partition for p in parts}
        else:
            consumer.unassign()
            self.owned = set()

    def _run(self):
        try:
            while not self.stop.is_set():
                m = self.c.poll(0.2)
                if m is not None and not m.error():
                    self.values.append(m.value())
        except Exception as exc:      # noqa: BLE001 - reported by the test
            self.error = exc
        finally:
            self.c.close()


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
async def test_mixed_group_with_confluent_kafka(cluster, strategy):
    topic, group = f"mixed-{strategy}", f"mixed-{uuid.uuid4().hex[:6]}"
    create_topic(cluster, topic, 6)
    sent = produce(cluster, topic, 1200, 6)
    ck = [CKMember(cluster, group, topic, strategy, f"ck{i}") for i in range(2)]
    ours_values: list[list[bytes]] = [[], []]
    ours: list[Consumer] = []
    settled = None
    try:
        async with Consumer(cluster.bootstrap, {"group.id": group,
                                                "partition.assignment.strategy": strategy,
                                                "auto.offset.reset": "earliest",
                                                "auto.commit.interval.ms": 200,
                                                **FAST_GROUP}) as a, \
                Consumer(cluster.bootstrap, {"group.id": group,
                                             "partition.assignment.strategy": strategy,
                                             "auto.offset.reset": "earliest",
                                             "auto.commit.interval.ms": 200,
                                             **FAST_GROUP}) as b:
            ours = [a, b]
            for c in ours:
                c.subscribe([topic])

            async def run(i, c):
                while True:
                    ours_values[i] += [r.value for r in await c.poll(200)]

            async with trio.open_nursery() as nursery:
                for i, c in enumerate(ours):
                    nursery.start_soon(run, i, c)
                deadline = trio.current_time() + 60
                stable_since = None
                while trio.current_time() < deadline:
                    await trio.sleep(0.25)
                    owners = [{tp.partition for tp in c.assignment()} for c in ours] + \
                             [set(m.owned) for m in ck]
                    flat = [p for o in owners for p in o]
                    consumed = sum(len(v) for v in ours_values) + sum(len(m.values) for m in ck)
                    ok = sorted(flat) == list(range(6)) and consumed >= 1200 and all(owners[:2])
                    if ok and stable_since is None:
                        stable_since, settled = trio.current_time(), owners
                    elif not ok or owners != settled:
                        stable_since = None
                    if stable_since is not None and trio.current_time() - stable_since > 2:
                        break
                nursery.cancel_scope.cancel()
    finally:
        for m in ck:
            m.stop.set()
        for m in ck:
            m.thread.join(15)
    assert all(m.error is None for m in ck), [m.error for m in ck]
    assert stable_since is not None, f"group never settled: {settled}"
    flat = [p for o in settled for p in o]
    assert sorted(flat) == list(range(6)), settled     # each partition exactly one owner
    assert all(settled), f"some member owns nothing: {settled}"
    everything = set(ours_values[0]) | set(ours_values[1]) | set(ck[0].values) | set(ck[1].values)
    assert everything == {v for vs in sent.values() for v in vs}


async def test_pattern_subscription_listeners_and_eager_rebalance(cluster):
    for name in ("pat-a", "pat-b", "other-c"):
        create_topic(cluster, name, 2)
    group = f"pat-{uuid.uuid4().hex[:6]}"
    events: list[tuple[str, str, list]] = []

    def listener(name):
        class L:
            def on_partitions_assigned(self, tps):
                events.append((name, "assigned", sorted(tps)))

            async def on_partitions_revoked(self, tps):
                events.append((name, "revoked", sorted(tps)))
        return L()

    conf = {"group.id": group, "partition.assignment.strategy": "roundrobin", **FAST_GROUP}
    async with Consumer(cluster.bootstrap, conf) as a:
        a.subscribe("^pat-.*", listener=listener("a"))
        await a.poll(200)
        while not a.assignment():
            await a.poll(200)
        assert sorted(a.subscription()) == ["pat-a", "pat-b"]
        assert len(a.assignment()) == 4
        async with Consumer(cluster.bootstrap, conf) as b:
            b.subscribe("^pat-.*", listener=listener("b"))

            async def keep_polling(c):
                # each member polls in its own task: a join waits for every member to rejoin
                while True:
                    await c.poll(100)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(keep_polling, a)
                nursery.start_soon(keep_polling, b)
                with trio.fail_after(30):
                    while len(a.assignment()) != 2 or len(b.assignment()) != 2:
                        await trio.sleep(0.05)
                nursery.cancel_scope.cancel()
            assert set(a.assignment()) | set(b.assignment()) == {
                TopicPartition(t, p) for t in ("pat-a", "pat-b") for p in range(2)}
        with trio.fail_after(30):            # b left: a gets everything back
            while len(a.assignment()) != 4:
                await a.poll(100)
    a_events = [e for e in events if e[0] == "a"]
    assert a_events[0][1] == "assigned" and len(a_events[0][2]) == 4
    assert ("a", "revoked", a_events[0][2]) in a_events        # eager: revoke all, then assign
    assert a_events[-1][1] == "revoked"                        # close revokes


@pytest.mark.slow
async def test_group_survives_coordinator_sigkill(cluster):
    """SIGKILL the broker coordinating our group (and leading some partitions) while two of our
    consumers read and a producer writes: both keep consuming, every acknowledged record is
    consumed at least once, and committed offsets survive."""
    from clients.admin import AdminClient
    topic, group = "failover", f"fo-{uuid.uuid4().hex[:6]}"
    create_topic(cluster, topic, 4)
    conf = {"group.id": group, "auto.offset.reset": "earliest", "auto.commit.interval.ms": 300,
            "partition.assignment.strategy": "cooperative-sticky", **FAST_GROUP}
    seen: set[bytes] = set()
    acked: set[bytes] = set()
    stop_producing = threading.Event()

    def producer():
        p = CKProducer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 5, "acks": "all"})
        i = 0
        while not stop_producing.is_set():
            value = f"fo-{i}".encode()
            p.produce(topic, value=value, partition=i % 4,
                      on_delivery=lambda err, msg: err is None and acked.add(msg.value()))
            p.poll(0.002)
            i += 1
        p.flush(30)

    thread = threading.Thread(target=producer, daemon=True)
    thread.start()
    victim = None
    try:
        async with Consumer(cluster.bootstrap, conf) as a, Consumer(cluster.bootstrap, conf) as b:
            for c in (a, b):
                c.subscribe([topic])

            async def run(c):
                while True:
                    seen.update(r.value for r in await c.poll(200))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(run, a)
                nursery.start_soon(run, b)
                with trio.fail_after(30):
                    while len(seen) < 200 or not a.assignment() or not b.assignment():
                        await trio.sleep(0.1)
                async with AdminClient(cluster.bootstrap) as admin:
                    victim = (await admin.describe_groups([group]))[group].coordinator
                cluster.kill(f"broker-{victim}")
                await trio.sleep(3)
                stop_producing.set()
                await trio.to_thread.run_sync(thread.join, 60)
                with trio.fail_after(45):
                    while not acked <= seen:
                        await trio.sleep(0.2)
                await trio.sleep(1)          # an auto commit after the last records
                nursery.cancel_scope.cancel()
            committed = await a.committed([(topic, p) for p in range(4)])
            assert sum(v for v in committed.values() if v is not None) >= len(acked) - 50
    finally:
        stop_producing.set()
        if victim is not None:
            cluster.restart_broker(victim)
    assert acked <= seen and len(acked) > 200


async def test_cooperative_members_never_share_a_partition(cluster):
    """Three of our cooperative-sticky consumers join one by one, then one leaves; a watcher
    checks at every scheduling point that no partition is held by two members, and listeners see
    only increments (on_assigned: what was added; on_revoked: what moved away)."""
    topic, group = "coop-own", f"coop-{uuid.uuid4().hex[:6]}"
    create_topic(cluster, topic, 6)
    conf = {"group.id": group, "partition.assignment.strategy": "cooperative-sticky",
            **FAST_GROUP}
    consumers: list[Consumer] = []
    log: dict[int, list] = {0: [], 1: [], 2: []}
    violations: list = []

    def listeners(i):
        return dict(on_assigned=lambda tps: log[i].append(("+", sorted(tps))),
                    on_revoked=lambda tps: log[i].append(("-", sorted(tps))))

    async def watch():
        while True:
            held = [tp for c in consumers if not c.closed for tp in c.assignment()]
            if len(held) != len(set(held)):
                violations.append(held)
            await trio.sleep(0)

    async def run(c):
        while not c.closed:
            await c.poll(100)

    def settled(n):
        live = [c for c in consumers if not c.closed]
        held = [tp.partition for c in live for tp in c.assignment()]
        return len(live) == n and sorted(held) == list(range(6)) and \
            all(len(c.assignment()) == 6 // n for c in live)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch)
        for i in range(3):
            c = Consumer(cluster.bootstrap, conf)
            await c.start(nursery)
            c.subscribe([topic], **listeners(i))
            consumers.append(c)
            nursery.start_soon(run, c)
            with trio.fail_after(30):
                while not settled(i + 1):
                    await trio.sleep(0.05)
        before = {tp for c in consumers[:2] for tp in c.assignment()}
        await consumers[2].close()
        with trio.fail_after(30):
            while not settled(2):
                await trio.sleep(0.05)
        after = {tp for c in consumers[:2] for tp in c.assignment()}
        before_close = {i: list(entries) for i, entries in log.items()}
        for c in consumers[:2]:
            await c.close()
        nursery.cancel_scope.cancel()
    assert violations == []
    assert before < after                      # the survivors kept theirs and took the rest
    # only what had to move moved: consumer 0 went 6 -> 3 -> 2 (gave away 4), consumer 1
    # went 3 -> 2 (gave away 1)
    log0 = before_close[0]
    assert log0[0] == ("+", [TopicPartition(topic, p) for p in range(6)])
    gave = [tp for sign, tps in log0 if sign == "-" for tp in tps]
    assert len(gave) == len(set(gave)) == 4
    assert len([tp for sign, tps in before_close[1] if sign == "-" for tp in tps]) == 1


async def test_static_member_restart_keeps_assignment_and_pattern_sees_new_topic(cluster):
    create_topic(cluster, "static-1", 2)
    group = f"static-{uuid.uuid4().hex[:6]}"
    conf = {"group.id": group, "group.instance.id": "instance-a", "metadata.max.age.ms": 1000,
            **FAST_GROUP}
    async with Consumer(cluster.bootstrap, conf) as c:
        c.subscribe("^static-.*")
        with trio.fail_after(30):
            while len(c.assignment()) != 2:
                await c.poll(100)
        first_member_id = c.member.member_id
    # a static member does not leave on close (KIP-345): the coordinator still counts it, and
    # its replacement with the same group.instance.id takes its place and partitions
    from clients.admin import AdminClient as OurAdmin
    async with OurAdmin(cluster.bootstrap) as admin:
        members = (await admin.describe_groups([group]))[group].members
    assert [(m.member_id, m.group_instance_id) for m in members] == [(first_member_id,
                                                                       "instance-a")]
    async with Consumer(cluster.bootstrap, conf) as c:
        c.subscribe("^static-.*")
        with trio.fail_after(20):
            while len(c.assignment()) != 2:
                await c.poll(100)
        create_topic(cluster, "static-2", 1)          # the pattern picks it up and rejoins
        with trio.fail_after(30):
            while len(c.assignment()) != 3:
                await c.poll(100)
        assert c.subscription() == ["static-1", "static-2"]


async def test_leader_rebalances_on_new_partitions_and_idle_member_leaves(cluster):
    topic, group = "grows", f"grow-{uuid.uuid4().hex[:6]}"
    create_topic(cluster, topic, 2)
    lost: list = []
    conf = {"group.id": group, "metadata.max.age.ms": 1000, "session.timeout.ms": 10000,
            "heartbeat.interval.ms": 300, "max.poll.interval.ms": 2000}
    async with Consumer(cluster.bootstrap, conf) as a, Consumer(cluster.bootstrap, conf) as b:
        a.subscribe([topic])
        b.subscribe([topic], on_revoked=lambda tps: lost.append(sorted(tps)))

        async def poll_forever(c):
            while True:
                await c.poll(100)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(poll_forever, a)
            b_scope = trio.CancelScope()

            async def poll_b():
                with b_scope:
                    await poll_forever(b)
            nursery.start_soon(poll_b)
            with trio.fail_after(30):
                while len(a.assignment()) + len(b.assignment()) != 2 or not b.assignment():
                    await trio.sleep(0.05)
            admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
            from confluent_kafka.admin import NewPartitions
            for f in admin.create_partitions([NewPartitions(topic, 4)]).values():
                f.result(30)
            with trio.fail_after(30):       # the leader notices and the group takes all four
                while len(a.assignment()) + len(b.assignment()) != 4 or not b.assignment():
                    await trio.sleep(0.05)
            held_by_b = sorted(b.assignment())
            revocations_before = len(lost)
            b_scope.cancel()                # b stops polling: after max.poll.interval.ms it
            with trio.fail_after(30):       # leaves and a takes everything
                while len(a.assignment()) != 4:
                    await trio.sleep(0.05)
            nursery.start_soon(poll_forever, b)    # b comes back and rejoins
            with trio.fail_after(30):
                while len(a.assignment()) != 2 or len(b.assignment()) != 2:
                    await trio.sleep(0.05)
            nursery.cancel_scope.cancel()
    # what b held when it went idle was reported lost (through on_revoked) when it came back
    assert lost[revocations_before] == held_by_b


async def test_mixed_sticky_group_with_kafka_python(cluster):
    """Eager "sticky" with kafka-python 3.x members (librdkafka has no eager sticky): the
    group shares the partitions, one owner each, every record consumed."""
    from kafka import KafkaConsumer
    from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
    topic, group = "mixed-sticky", f"kps-{uuid.uuid4().hex[:6]}"
    create_topic(cluster, topic, 4)
    sent = produce(cluster, topic, 400, 4)
    theirs: list[bytes] = []
    their_owned: set[int] = set()
    stop = threading.Event()
    errors: list = []

    def kafka_python_member():
        try:
            c = KafkaConsumer(topic, bootstrap_servers=cluster.bootstrap, group_id=group,
                              auto_offset_reset="earliest", session_timeout_ms=10000,
                              heartbeat_interval_ms=500, max_poll_interval_ms=30000,
                              partition_assignment_strategy=[StickyPartitionAssignor])
            while not stop.is_set():
                for records in c.poll(200).values():
                    theirs.extend(r.value for r in records)
                their_owned.clear()
                their_owned.update(tp.partition for tp in c.assignment())
            c.close()
        except Exception as exc:      # noqa: BLE001 - reported by the test
            errors.append(exc)

    thread = threading.Thread(target=kafka_python_member, daemon=True)
    thread.start()
    ours: list[bytes] = []
    try:
        async with Consumer(cluster.bootstrap, {"group.id": group, "auto.offset.reset": "earliest",
                                                "partition.assignment.strategy": "sticky",
                                                **FAST_GROUP}) as c:
            c.subscribe([topic])
            stable_for = 0
            with trio.fail_after(60):
                while stable_for < 10:
                    ours += [r.value for r in await c.poll(200)]
                    mine = {tp.partition for tp in c.assignment()}
                    settled = (mine and their_owned and not mine & their_owned
                               and mine | their_owned == set(range(4))
                               and len(ours) + len(theirs) >= 400)
                    stable_for = stable_for + 1 if settled else 0
    finally:
        stop.set()
        thread.join(30)
    assert not errors, errors
    assert c.member.protocol.name == "sticky"
    assert set(ours) | set(theirs) == {v for vs in sent.values() for v in vs}
