"""Self-healing at the controller (rereplication.py): replicas of a broker fenced for longer
than raftka.rereplication.timeout.ms are re-placed onto usable brokers through ordinary
reassignments, driven by the controller's tick. Unit cases, then a seeded simulation (random
clusters, racks, lost brokers, ISR catch-up) checking the invariants after every step: never
fewer replicas than the replication factor, no new replica on a lost broker, and in the end
every partition with a usable leader back at its RF on usable brokers."""

from __future__ import annotations

import random

from metadata_quorum.controller import rereplication
from metadata_quorum.image import BROKER_RESOURCE
from metadata_quorum.testing import RecordLog
from wire.errors import ErrorCode as E

SESSION_MS = 3000
TIMEOUT_MS = 10_000


class Sim:
    """A controller fed by a virtual clock: live brokers heartbeat, leaders add caught-up
    replicas to the ISR (AlterPartition), the tick runs with rebalance on."""

    def __init__(self, n=4, racks=None, timeout_ms=TIMEOUT_MS):
        self.log = RecordLog(session_timeout_ms=SESSION_MS)
        self.c, self.now, self.epochs, self.alive = self.log.controller, 0, {}, set(range(n))
        for b in range(n):
            rack = racks[b] if racks else None
            res = self.log.run_pure(lambda: self.c.register_broker(
                b, f"i{b}", "127.0.0.1", 9092, rack, 0))
            self.epochs[b] = res.broker_epoch
            self.log.run_pure(lambda: self.c.broker_heartbeat(
                b, self.epochs[b], len(self.log.entries), False, False, 0))
        if timeout_ms is not None:
            res = self.log.run_pure(lambda: self.c.incremental_alter_configs(
                [(BROKER_RESOURCE, "", [(rereplication.TIMEOUT_CONFIG, 0, str(timeout_ms))])]))
            assert res == [(E.NONE, None)]

    def topic(self, name, assignments):
        res = self.log.run_pure(lambda: self.c.create_topics(
            [{"name": name, "assignments": dict(enumerate(assignments))}]))[0]
        assert res.error == E.NONE, res

    def step(self, ms=1000, catch_up=True):
        self.now += ms
        for b in sorted(self.alive):
            self.log.run_pure(lambda: self.c.broker_heartbeat(
                b, self.epochs[b], len(self.log.entries), False, False, self.now))
        if catch_up:
            self.catch_up()
        self.log.commit(self.c.tick(self.now, rebalance=True))

    def catch_up(self):
        """Every live leader takes its live replicas into the ISR."""
        for t in list(self.c.image.topics.values()):
            for p in list(t.partitions.values()):
                if p.leader not in self.alive:
                    continue
                isr = tuple(dict.fromkeys(p.isr + tuple(x for x in p.replicas
                                                         if x in self.alive)))
                if isr != p.isr:
                    self.log.run_pure(lambda: self.c.alter_partition(
                        p.leader, self.epochs[p.leader], t.topic_id, p.partition_id,
                        p.leader_epoch, p.partition_epoch, list(isr)))

    def partitions(self):
        return [p for t in self.c.image.topics.values() for p in t.partitions.values()]


def test_replicas_of_a_lost_broker_move_after_the_timeout_only():
    s = Sim(4)
    s.topic("t", [[0, 1, 2], [1, 2, 0], [2, 0, 1]])
    s.alive.discard(0)
    s.step(SESSION_MS + 1000)
    assert s.c.image.brokers[0].fenced
    while s.now < TIMEOUT_MS - 1000:
        s.step()
        assert all(0 in p.replicas and not p.adding_replicas for p in s.partitions())
    for _ in range(5):
        s.step()
    assert [p.replicas for p in s.partitions()] == [(3, 1, 2), (1, 2, 3), (2, 3, 1)]
    assert all(sorted(p.isr) == sorted(p.replicas) for p in s.partitions())
    assert s.log.replay_all().image.same_state(s.c.image)


def test_off_by_default():
    s = Sim(4, timeout_ms=None)
    s.topic("t", [[0, 1, 2]])
    s.alive.discard(0)
    for _ in range(30):
        s.step(2000)
    assert s.partitions()[0].replicas == (0, 1, 2)


def test_too_few_brokers_keeps_the_partition_as_it_is():
    s = Sim(3)
    s.topic("t", [[0, 1, 2]])
    s.alive.discard(0)
    for _ in range(20):
        s.step(2000)
    p = s.partitions()[0]
    assert p.replicas == (0, 1, 2) and not p.adding_replicas


def test_a_leaderless_partition_is_left_alone():
    s = Sim(4)
    s.topic("t", [[0]])
    s.alive.discard(0)
    for _ in range(20):
        s.step(2000)
    p = s.partitions()[0]
    assert p.replicas == (0,) and p.leader == -1 and not p.adding_replicas


def test_at_most_so_many_moves_in_flight():
    s = Sim(4)
    s.topic("t", [[0, 1, 2]] * 40)
    s.alive.discard(0)
    s.step(SESSION_MS + 1000, catch_up=False)
    while s.now < TIMEOUT_MS + 10_000:
        s.step(1000, catch_up=False)          # the new replicas do not catch up
        moving = sum(bool(p.adding_replicas) for p in s.partitions())
        assert moving <= rereplication.MAX_MOVES_IN_FLIGHT
    assert moving == rereplication.MAX_MOVES_IN_FLIGHT
    for _ in range(10):
        s.step()
    assert all(p.replicas == (3, 1, 2) for p in s.partitions())


def test_a_new_active_controller_restarts_the_clock():
    s = Sim(4)
    s.topic("t", [[0, 1, 2]])
    s.alive.discard(0)
    s.step(TIMEOUT_MS - 2000)
    s.c.become_active(s.now)                  # a failover: every session starts afresh
    s.step(3000)
    assert s.partitions()[0].replicas == (0, 1, 2)
    for _ in range(TIMEOUT_MS // 1000 + 3):
        s.step()
    assert 0 not in s.partitions()[0].replicas


def test_lost_brokers_is_a_function_of_image_and_clock():
    s = Sim(4)
    s.alive.discard(2)
    s.step(SESSION_MS + 1)
    seen = dict(s.c.heartbeats.last_seen)
    at = seen[2]
    assert rereplication.lost_brokers(s.c.image, seen, at + TIMEOUT_MS - 1, TIMEOUT_MS) == set()
    assert rereplication.lost_brokers(s.c.image, seen, at + TIMEOUT_MS, TIMEOUT_MS) == {2}
    assert rereplication.lost_brokers(s.c.image, seen, at + 10 * TIMEOUT_MS, -1) == set()


def _check(s: Sim, rf: dict, lost: set):
    for t in s.c.image.topics.values():
        for p in t.partitions.values():
            want = rf[(t.name, p.partition_id)]
            assert len(p.replicas) - len(p.removing_replicas) == want      # target keeps RF
            assert len(p.replicas) >= want and p.isr
            assert not set(p.adding_replicas) & lost


def test_seeded_simulation_regains_rf_with_racks():
    healed = 0
    for seed in range(25):
        rng = random.Random(seed)
        n = rng.randint(4, 8)
        racks = [f"r{b % rng.randint(1, 3)}" for b in range(n)]
        s = Sim(n, racks)
        rf = {}
        for k in range(rng.randint(1, 3)):
            width = rng.randint(1, 3)
            layout = [rng.sample(range(n), width) for _ in range(rng.randint(1, 12))]
            s.topic(f"t{k}", layout)
            rf.update({(f"t{k}", i): width for i in range(len(layout))})
        before = {(t.name, p.partition_id): p.replicas for t in s.c.image.topics.values()
                  for p in t.partitions.values()}
        lost = set(rng.sample(range(n), rng.randint(1, max(1, n - 3))))
        s.alive -= lost
        for _ in range(60):
            s.step(rng.choice((500, 1000, 2000)))
            _check(s, rf, lost)
        usable = {b.broker_id for b in s.c.image.usable_brokers()}
        for t in s.c.image.topics.values():
            for p in t.partitions.values():
                if p.leader == -1:
                    continue                  # only lost brokers held it: nothing to copy
                assert not p.adding_replicas and set(p.replicas) <= usable, (seed, p)
                healed += bool(set(p.replicas) - set(before[(t.name, p.partition_id)]))
        assert s.log.replay_all().image.same_state(s.c.image), seed
    assert healed > 50          # the seeds do exercise moves (rack rules: test_placement.py)


def test_a_move_onto_a_lost_broker_is_replaced():
    s = Sim(5)
    s.topic("t", [[0, 1, 2]])
    s.topic("load", [[2, 0, 1]] * 3)          # broker 2 holds more than the empty broker 4
    res = s.log.run_pure(lambda: s.c.alter_partition_reassignments([("t", 0, [0, 1, 3])]))
    assert res == [(E.NONE, None)]
    s.alive.discard(3)                        # the move's new replica is lost before it joins
    s.step(SESSION_MS + 1000, catch_up=False)
    assert s.c.image.partition("t", 0).adding_replicas == (3,)
    for _ in range(TIMEOUT_MS // 1000 + 6):
        s.step()
    p = s.c.image.partition("t", 0)
    # not cancelled (back to 2): the lost target replaced by the least loaded usable broker
    assert p.replicas == (0, 1, 4) and not p.adding_replicas and sorted(p.isr) == [0, 1, 4]
    assert s.c.image.brokers[3].fenced


def test_replicas_of_an_unregistered_broker_are_re_placed_at_once():
    s = Sim(4)
    s.topic("t", [[0, 1, 2]])
    s.alive.discard(0)
    s.log.run_pure(lambda: s.c.unregister_broker(0))  # KRaft leaves 0 in the replica list
    assert s.c.image.partition("t", 0).replicas == (0, 1, 2)
    for _ in range(5):                        # well within the timeout: unregistered is final
        s.step()
    assert s.c.image.partition("t", 0).replicas == (3, 1, 2)


def test_an_unregistered_broker_is_left_alone_when_off():
    s = Sim(4, timeout_ms=None)
    s.topic("t", [[0, 1, 2]])
    s.alive.discard(0)
    s.log.run_pure(lambda: s.c.unregister_broker(0))
    for _ in range(5):
        s.step()
    assert s.c.image.partition("t", 0).replicas == (0, 1, 2)
