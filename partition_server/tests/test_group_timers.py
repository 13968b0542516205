"""Group coordinator timers (partition_server/group/timers.py): the periodic tick looks only at
groups with a deadline due, heartbeats do not touch the deadline heap, and the result is the
same as the full scan every tick that it replaces (checked against that scan, kept here as the
reference, over random seeded histories of joins, syncs, heartbeats, leaves, stores and time)."""

from __future__ import annotations

import random
import uuid

import pytest

from partition_server.group import state as classic
from partition_server.group.consumer_group import ConsumerGroupCoordinatorState
from partition_server.group.state import (GroupConfig, GroupCoordinatorState, JoinResult,
                                          StoreGroup, SyncResult)
from partition_server.group.timers import INF, DeadlineHeap
from wire.errors import ErrorCode

PROTO = [("range", b"m")]


class Box:
    def __init__(self, group_id):
        self.group_id = group_id


def test_deadline_heap_keeps_one_live_entry_per_group_and_skips_stale_ones():
    h = DeadlineHeap()
    a, b = Box("a"), Box("b")
    h.schedule(a, 100)
    h.schedule(a, 150)                       # later: nothing pushed
    assert len(h) == 1 and h.scheduled(a) == 100
    h.schedule(a, 50)                        # earlier: the 100 entry goes stale
    h.schedule(b, 70)
    h.schedule(b, INF)
    groups = {"a": a, "b": b}
    assert h.due(49, groups) == []
    assert h.due(100, groups) == [a, b] and h.scheduled(a) == INF
    assert len(h) == 0                       # the stale entry was dropped on the way
    h.schedule(a, 10)
    groups["a"] = Box("a")                   # deleted and re-created under the same id
    assert h.due(20, groups) == []


# -- classic groups ----------------------------------------------------------------------------------

class FullScan(GroupCoordinatorState):
    """The tick before the deadline heap: every group, every tick (the reference)."""

    def tick(self, now_ms):
        effects = []
        for g in list(self.groups.values()):
            g.pending_members = {k: v for k, v in g.pending_members.items() if v >= now_ms}
            for mid, m in list(g.members.items()):
                if mid in g.pending_join or mid in g.pending_sync:
                    continue
                if now_ms - m.last_heartbeat_ms > m.session_timeout_ms:
                    g._remove(mid)
                    effects += self._membership_changed(g, now_ms)
            if g.ready_to_complete_join(now_ms):
                effects += g._complete_join(now_ms)
        return effects


class Run:
    """One coordinator state driven by a script; member ids are mapped to logical names so two
    runs (whose generated ids differ) can be compared."""

    def __init__(self, state):
        self.c = state
        self.ids: dict[tuple[str, int], str] = {}     # (group, logical member) → member id
        self.names: dict[str, int] = {}
        self.stores: list = []

    def _norm(self, effects):
        out = []
        for e in effects:
            if isinstance(e, StoreGroup):
                self.stores.append(e)
                out.append(("store", e.group_id, e.generation_id))
            elif isinstance(e, JoinResult):
                out.append(("join", self.names.get(e.member_id), e.error, e.generation_id,
                            self.names.get(e.leader), len(e.members)))
            elif isinstance(e, SyncResult):
                out.append(("sync", self.names.get(e.member_id), e.error))
        return sorted(out, key=repr)

    def step(self, op, g, k, now, session, arg):
        c, mid = self.c, self.ids.get((g, k), "")
        gen = c.groups[g].generation_id if g in c.groups else -1
        if op == "join":
            res, eff, mid = c.join(g, mid, None, "cli", "/h", session, 4_000, "consumer", PROTO,
                                   False, now)
            if res is not None and res.error == ErrorCode.UNKNOWN_MEMBER_ID:
                self.ids.pop((g, k), None)
            elif mid:
                self.ids[(g, k)], self.names[mid] = mid, k
            return [("me", res and res.error)] + self._norm(eff + ([res] if res else []))
        if op == "sync":
            res, eff = c.sync(g, gen, mid, {mid: b"x"} if arg else {}, now)
            return [("me", res and res.error)] + self._norm(eff)
        if op == "heartbeat":
            return [("me", c.heartbeat(g, gen, mid, now))]
        if op == "leave":
            codes, eff = c.leave(g, [(mid, None)], now)
            return [("me", codes)] + self._norm(eff)
        if op == "stored" and self.stores:
            e = self.stores.pop(0)
            return self._norm(c.stored(e.group_id, e.generation_id,
                                       ErrorCode.NONE if arg else ErrorCode.REQUEST_TIMED_OUT, now))
        if op == "tick":
            return self._norm(c.tick(now))
        return []

    def summary(self):
        return sorted((gid, g.state.value, g.generation_id, sorted(self.names[m] for m in g.members),
                       self.names.get(g.leader_id)) for gid, g in self.c.groups.items())


@pytest.mark.parametrize("seed", range(60))
def test_classic_tick_matches_the_full_scan(seed):
    rnd = random.Random(seed)
    cfg = GroupConfig(min_session_timeout_ms=1000, initial_rebalance_delay_ms=rnd.choice([0, 500]))
    runs = [Run(GroupCoordinatorState(cfg)), Run(FullScan(cfg))]
    now = 0
    ops = ["join", "join", "sync", "heartbeat", "heartbeat", "leave", "stored", "stored", "tick",
           "tick", "tick"]
    for i in range(400):
        op = rnd.choice(ops)
        if op == "tick":
            now += rnd.choice([1, 100, 500, 2000, 7000])
        g, k = rnd.choice("gh"), rnd.randrange(4)
        session, arg = rnd.choice([1000, 3000, 6000]), rnd.random() < 0.8
        got = [r.step(op, g, k, now, session, arg) for r in runs]
        assert got[0] == got[1], (seed, i, op, g, k)
    assert runs[0].summary() == runs[1].summary()


def _stable_group(c, gid, now, session=10_000):
    res, _, mid = c.join(gid, "", None, "cli", "/h", session, 4_000, "consumer", PROTO, False, now)
    assert res.error == ErrorCode.NONE
    (store,) = c.sync(gid, res.generation_id, mid, {mid: b"x"}, now)[1]
    c.stored(gid, store.generation_id, ErrorCode.NONE, now)
    return mid


def test_an_idle_tick_looks_at_no_group_and_heartbeats_leave_the_heap_alone(monkeypatch):
    c = GroupCoordinatorState(GroupConfig(initial_rebalance_delay_ms=0))
    members = {f"g{i}": _stable_group(c, f"g{i}", 0) for i in range(2000)}
    entries = len(c.timers)
    looked = []
    real = classic.Group.ready_to_complete_join
    monkeypatch.setattr(classic.Group, "ready_to_complete_join",
                        lambda g, now: looked.append(g.group_id) or real(g, now))
    for now in range(100, 10_000, 100):              # 99 ticks before the first session ends
        assert c.tick(now) == []
    assert looked == []
    for now in (5_000, 9_000):                       # every member heartbeats twice
        for gid, mid in members.items():
            assert c.heartbeat(gid, 1, mid, now) == ErrorCode.NONE
    assert len(c.timers) == entries
    c.take_changed()
    assert c.tick(10_001) == []                      # each group's deadline comes due once...
    assert len(looked) == 2000 and not c.take_changed() - set(members)
    looked.clear()
    assert c.tick(15_000) == [] and looked == []     # ...and moves to the last heartbeat's
    c.heartbeat("g1", 1, members["g1"], 15_000)
    c.tick(19_001)
    assert sorted(c.groups[g].state.value for g in ("g0", "g1")) == ["Empty", "Stable"]
    assert len(looked) == 2000                       # every group once; g1 is still alive


def test_restored_groups_get_their_timers():
    c = GroupCoordinatorState()
    src = GroupCoordinatorState(GroupConfig(initial_rebalance_delay_ms=0))
    _stable_group(src, "g", 0)
    c.restored(classic.restore_group("g", classic.group_record(src.groups["g"]), 500), 500)
    assert c.take_changed() == {"g"}
    assert c.tick(10_500) == [] and c.groups["g"].members
    c.tick(10_501)                                   # no heartbeat since the failover: expired
    assert not c.groups["g"].members


# -- KIP-848 groups ----------------------------------------------------------------------------------

TOPICS = {"a": (uuid.UUID(int=1), 6)}


class ConsumerFullScan(ConsumerGroupCoordinatorState):
    def tick(self, now_ms, topics):
        gone = []
        for g in self.groups.values():
            for mid, m in list(g.members.items()):
                if now_ms - m.last_heartbeat_ms > self.session_timeout_ms:
                    gone.append((g.group_id, mid, "session timeout"))
                elif m.revoking and now_ms > m.revoke_deadline_ms:
                    gone.append((g.group_id, mid, "did not revoke within its rebalance timeout"))
        for gid, mid, _ in gone:
            self._remove(self.groups[gid], mid, topics)
        return gone


def _consumer_step(c, rnd_op, g, k, now, owned_all, epochs):
    mid = f"m{k}"
    if rnd_op == "tick":
        return sorted(c.tick(now, TOPICS))
    if rnd_op == "leave":
        return c.heartbeat(g, mid, -1, topics=TOPICS, now_ms=now)
    epoch = epochs.get((g, mid), 0)
    r = c.heartbeat(g, mid, epoch, subscribed_names=["a"] if epoch == 0 else None,
                    rebalance_timeout_ms=2_000, topics=TOPICS, now_ms=now,
                    owned=None if not owned_all else
                    {t: sorted(p) for t, p in c.groups[g].members[mid].assigned.items()}
                    if g in c.groups and mid in c.groups[g].members else {})
    epochs[(g, mid)] = r.member_epoch if r.error == ErrorCode.NONE else 0
    return r


@pytest.mark.parametrize("seed", range(40))
def test_consumer_tick_matches_the_full_scan(seed):
    rnd = random.Random(seed)
    runs = [(ConsumerGroupCoordinatorState(session_timeout_ms=3000), {}),
            (ConsumerFullScan(session_timeout_ms=3000), {})]
    now = 0
    for i in range(300):
        op = rnd.choice(["hb", "hb", "hb", "leave", "tick", "tick"])
        if op == "tick":
            now += rnd.choice([1, 500, 1500, 4000])
        g, k, owned = rnd.choice("gh"), rnd.randrange(4), rnd.random() < 0.7
        got = [_consumer_step(c, op, g, k, now, owned, epochs) for c, epochs in runs]
        assert got[0] == got[1], (seed, i, op)
    a, b = (sorted((gid, g.group_epoch, sorted(g.members)) for gid, g in c.groups.items())
            for c, _ in runs)
    assert a == b


def test_consumer_heartbeats_leave_the_heap_alone_and_idle_ticks_cost_nothing():
    c = ConsumerGroupCoordinatorState(session_timeout_ms=10_000)
    for i in range(1000):
        r = c.heartbeat(f"g{i}", "m", 0, subscribed_names=["a"], topics=TOPICS, now_ms=0)
        assert r.error == ErrorCode.NONE
    entries = len(c.timers)
    for now in (3_000, 6_000):
        for i in range(1000):
            c.heartbeat(f"g{i}", "m", 1, topics=TOPICS, now_ms=now)
    assert len(c.timers) == entries
    assert all(c.tick(now, TOPICS) == [] for now in range(100, 10_001, 100))
    assert c.tick(10_001, TOPICS) == []              # the first deadlines: looked at, alive
    assert len(c.timers) == 1000                     # one entry each, at last heartbeat + 10 s
    assert c.timers.due(16_000, c.groups) == []
    assert len(c.tick(16_001, TOPICS)) == 1000
