"""The classic group state machine: joins, syncs, heartbeats, leaves, expiry, errors."""

import random

from partition_server.group.state import (GroupConfig, GroupCoordinatorState, GroupState,
                                          StoreGroup, group_record)
from wire.errors import ErrorCode

PROTO = [("range", b"r-meta"), ("roundrobin", b"rr-meta")]


def coord(delay=0):
    return GroupCoordinatorState(GroupConfig(initial_rebalance_delay_ms=delay))


def join(c, member="", now=0, g="g", instance=None, protocols=PROTO, require=True):
    return c.join(g, member, instance, "cli", "/h", 10_000, 30_000, "consumer", protocols, require, now)


def sync(c, g, generation, member, assignments, now_ms=None, store_error=ErrorCode.NONE):
    """SyncGroup as the coordinator runs it: a leader's completes once its generation is
    reported stored (with `store_error`). (result or None, the other members' answers)"""
    res, eff = c.sync(g, generation, member, assignments, now_ms)
    stores = [e for e in eff if isinstance(e, StoreGroup)]
    if not stores:
        return res, eff
    assert res is None and len(eff) == 1
    answers = c.stored(g, stores[0].generation_id, store_error, now_ms or 0)
    mine = [e for e in answers if e.member_id == member]
    return (mine[0] if mine else None), [e for e in answers if e.member_id != member]


def test_member_id_required_then_single_member_group_forms():
    c = coord()
    res, eff, mid = join(c)
    assert res.error == ErrorCode.MEMBER_ID_REQUIRED and mid
    res, eff, mid2 = join(c, mid, now=1)
    assert mid2 == mid and res.error == ErrorCode.NONE
    assert res.generation_id == 1 and res.leader == mid and res.protocol_name == "range"
    assert [m[0] for m in res.members] == [mid]           # the leader sees the members
    sres, eff = sync(c, "g", 1, mid, {mid: b"assign"})
    assert sres.assignment == b"assign" and c.groups["g"].state is GroupState.STABLE


def test_two_members_wait_for_each_other_and_get_one_generation():
    c = coord()
    a_res, eff, a = join(c, require=False)    # v<4: no MEMBER_ID_REQUIRED round; alone: done
    assert a_res.generation_id == 1
    sync(c, "g", 1, a, {a: b"all"})
    _, _, b = join(c, require=False, now=2)   # newcomer triggers a rebalance and waits
    assert c.groups["g"].state is GroupState.PREPARING_REBALANCE
    assert c.heartbeat("g", 1, a, 3) == ErrorCode.REBALANCE_IN_PROGRESS
    a_res, eff, _ = join(c, a, now=4)         # the old member rejoins: everyone answered
    assert a_res is not None or eff
    results = ([a_res] if a_res else []) + eff
    assert {r.member_id for r in results} == {a, b}
    assert {r.generation_id for r in results} == {2}
    leader = results[0].leader
    follower = b if leader == a else a
    assert sync(c, "g", 2, follower, {})[0] is None               # waits for the leader
    lres, eff = sync(c, "g", 2, leader, {a: b"A", b: b"B"})
    assert lres.error == ErrorCode.NONE and eff[0].member_id == follower
    assert {lres.assignment, eff[0].assignment} == {b"A", b"B"}


def test_errors():
    c = coord()
    assert join(c, "ghost")[0].error == ErrorCode.UNKNOWN_MEMBER_ID
    res, _, _ = c.join("g", "", None, "c", "h", 10, 30_000, "consumer", PROTO, True, 0)
    assert res.error == ErrorCode.INVALID_SESSION_TIMEOUT
    _, _, a = join(c, require=False)
    join(c, a)
    assert join(c, protocols=[("other", b"")], require=False)[0].error == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert sync(c, "g", 99, a, {})[0].error == ErrorCode.ILLEGAL_GENERATION
    assert c.heartbeat("g", 1, "nobody", 0) == ErrorCode.UNKNOWN_MEMBER_ID
    assert c.can_commit("g", 7, a) == ErrorCode.ILLEGAL_GENERATION
    assert c.can_commit("g", -1, "") == ErrorCode.UNKNOWN_MEMBER_ID    # group has members
    assert c.can_commit("empty-group", -1, "") == ErrorCode.NONE
    assert c.delete("g") == ErrorCode.NON_EMPTY_GROUP
    assert c.delete("missing") == ErrorCode.GROUP_ID_NOT_FOUND


def test_session_expiry_and_leave_trigger_rebalance():
    c = coord()
    _, _, a = join(c, require=False)
    sync(c, "g", 1, a, {a: b"x"})
    c.heartbeat("g", 1, a, 1000)
    assert c.tick(5_000) == []
    c.tick(20_000)                                   # session 10 s lapsed
    g = c.groups["g"]
    assert not g.members and g.state is GroupState.EMPTY and g.generation_id == 2
    _, _, b = join(c, require=False, now=30_000)
    codes, eff = c.leave("g", [(b, None), ("nobody", None)], 30_002)
    assert codes == [ErrorCode.NONE, ErrorCode.UNKNOWN_MEMBER_ID]
    assert c.groups["g"].state is GroupState.EMPTY


def test_static_member_rejoins_without_rebalance_and_fences_impostor():
    c = coord()
    res, _, leader = join(c, instance="i-0")
    sync(c, "g", 1, leader, {leader: b"x"})
    _, _, a = join(c, instance="i-1", now=1)
    r, eff, _ = join(c, leader, instance="i-0", now=2)
    gen = c.groups["g"].generation_id
    sync(c, "g", gen, leader, {leader: b"x", a: b"y"})
    assert c.groups["g"].state is GroupState.STABLE
    res, _, again = join(c, "", instance="i-1", now=5)       # a follower restarts
    assert again == a and res.error == ErrorCode.NONE
    assert c.groups["g"].generation_id == gen and c.groups["g"].state is GroupState.STABLE
    assert join(c, "someone-else", instance="i-1")[0].error == ErrorCode.FENCED_INSTANCE_ID


def test_random_rebalances_never_assign_a_partition_twice_in_a_generation():
    """Seeded model: members join, leave and expire at random; each completed generation's
    assignment (partitions split by the leader) gives each partition to exactly one member."""
    rng = random.Random(42)
    c = coord()
    members: list[str] = []
    now = 0
    owners: dict[int, dict[int, str]] = {}
    for _ in range(600):
        now += rng.randint(1, 2000)
        op = rng.random()
        if op < 0.3 or not members:
            res, eff, mid = join(c, require=False, now=now)
            members.append(mid)
            eff = ([res] if res else []) + eff
        elif op < 0.5:
            mid = members.pop(rng.randrange(len(members)))
            _, eff = c.leave("g", [(mid, None)], now)
        elif op < 0.8:
            eff = []
            for mid in list(members):
                r, e, _ = join(c, mid, now=now)
                eff += ([r] if r else []) + e
        else:
            eff = c.tick(now)
            members = [m for m in members if m in c.groups["g"].members]
        g = c.groups["g"]
        leaders = [r for r in eff if r.error == ErrorCode.NONE and r.member_id == r.leader]
        for r in leaders:
            ids = [m[0] for m in r.members]
            plan = {p: ids[p % len(ids)] for p in range(6)}
            lres, _ = sync(c, "g", r.generation_id, r.member_id,
                             {m: bytes(p for p in range(6) if plan[p] == m) for m in ids})
            if lres and lres.error == ErrorCode.NONE:
                gen = owners.setdefault(r.generation_id, {})
                for p, m in plan.items():
                    assert gen.setdefault(p, m) == m, "partition assigned twice in one generation"
        for m in g.members.values():
            m.last_heartbeat_ms = now            # keep the survivors alive between steps


def test_a_long_rebalance_does_not_expire_the_members_that_waited_in_it():
    """Member a waits in JoinGroup longer than its session timeout (10 s) for b; when the join
    completes both start fresh sessions: a tick just after must not expire a (which used to
    start another rebalance, over and over on a slow machine)."""
    c = coord()
    _, _, a = join(c, require=False)
    sync(c, "g", 1, a, {a: b"all"}, now_ms=1)
    _, _, b = join(c, require=False, now=100)              # rebalance starts, b waits
    res, eff, _ = join(c, a, now=25_000)                   # a rejoins 25 s later: join completes
    assert {r.member_id for r in ([res] if res else []) + eff} == {a, b}
    assert c.tick(25_100) == [] and set(c.groups["g"].members) == {a, b}
    leader = c.groups["g"].leader_id
    follower = b if leader == a else a
    assert sync(c, "g", 2, follower, {}, now_ms=25_200)[0] is None
    # the follower waits in SyncGroup past its own session timeout for a slow leader: alive
    c.heartbeat("g", 2, leader, 34_000)
    assert c.tick(36_000) == [] and follower in c.groups["g"].members
    lres, eff = sync(c, "g", 2, leader, {a: b"A", b: b"B"}, now_ms=36_100)
    assert lres.error == ErrorCode.NONE and c.groups["g"].state is GroupState.STABLE
    assert [e.member_id for e in eff] == [follower]
    # once stable, a member that stops heartbeating is expired after its session timeout
    c.heartbeat("g", 2, leader, 45_000)
    c.tick(51_000)
    assert set(c.groups["g"].members) == {leader}


def test_a_rebalance_answers_members_waiting_in_sync_at_once():
    """When the leader's session expires while a follower waits in SyncGroup, the follower is
    answered REBALANCE_IN_PROGRESS in that same step (not after the rebalance timeout)."""
    c = coord()
    _, _, a = join(c, require=False)
    sync(c, "g", 1, a, {a: b"all"}, now_ms=1)
    _, _, b = join(c, require=False, now=100)
    join(c, a, now=200)
    leader = c.groups["g"].leader_id
    follower = b if leader == a else a
    assert sync(c, "g", 2, follower, {}, now_ms=300)[0] is None
    eff = c.tick(10_300)                                   # the leader never synced: expired
    answers = [e for e in eff if e.member_id == follower]
    assert [e.error for e in answers] == [ErrorCode.REBALANCE_IN_PROGRESS]
    assert set(c.groups["g"].members) == {follower}


def test_commits_during_a_rebalance():
    """As in Kafka: a member of the current generation may commit while the group prepares a
    rebalance (its on-revoke commit), not while assignments are being handed out."""
    c = coord()
    _, _, a = join(c, require=False)
    sync(c, "g", 1, a, {a: b"all"})
    assert c.can_commit("g", 1, a) == ErrorCode.NONE
    _, _, b = join(c, require=False, now=2)                  # PreparingRebalance
    assert c.can_commit("g", 1, a) == ErrorCode.NONE
    join(c, a, now=3)                                        # CompletingRebalance, generation 2
    assert c.groups["g"].state is GroupState.COMPLETING_REBALANCE
    assert c.can_commit("g", 2, a) == ErrorCode.REBALANCE_IN_PROGRESS
    assert c.can_commit("g", 1, a) == ErrorCode.ILLEGAL_GENERATION


def _two_member_generation(c):
    _, _, a = join(c, require=False)
    sync(c, "g", 1, a, {a: b"all"})
    _, _, b = join(c, require=False, now=2)
    join(c, a, now=3)
    leader = c.groups["g"].leader_id
    return leader, (b if leader == a else a)


def test_no_member_learns_its_assignment_before_the_generation_is_stored():
    """Kafka's storeGroup: the leader's SyncGroup asks for the group record to be made durable;
    until then the group stays CompletingRebalance and every member (the leader included)
    waits, so a coordinator failover cannot forget a generation members already run with."""
    c = coord()
    leader, follower = _two_member_generation(c)
    assert c.sync("g", 2, follower, {})[0] is None
    res, eff = c.sync("g", 2, leader, {leader: b"L", follower: b"F"})
    assert res is None and eff == [StoreGroup("g", 2)]
    g = c.groups["g"]
    assert g.state is GroupState.COMPLETING_REBALANCE
    rec = group_record(g)                       # what gets stored: the new assignments
    assert rec[1] == 2 and {m[0]: m[7] for m in rec[4]} == {leader: b"L", follower: b"F"}
    assert c.sync("g", 2, leader, {leader: b"?"}) == (None, [])     # a retry stores nothing new
    answers = c.stored("g", 2, ErrorCode.NONE, 10)
    assert {(a.member_id, a.error, a.assignment) for a in answers} == \
        {(leader, ErrorCode.NONE, b"L"), (follower, ErrorCode.NONE, b"F")}
    assert g.state is GroupState.STABLE


def test_a_failed_store_answers_everyone_with_the_error_and_rebalances():
    c = coord()
    leader, follower = _two_member_generation(c)
    c.sync("g", 2, follower, {})
    c.sync("g", 2, leader, {leader: b"L", follower: b"F"})
    answers = c.stored("g", 2, ErrorCode.COORDINATOR_NOT_AVAILABLE, 10)
    assert {(a.member_id, a.error) for a in answers} == \
        {(leader, ErrorCode.COORDINATOR_NOT_AVAILABLE), (follower, ErrorCode.COORDINATOR_NOT_AVAILABLE)}
    g = c.groups["g"]
    assert g.state is GroupState.PREPARING_REBALANCE
    assert all(m.assignment == b"" for m in g.members.values())


def test_a_store_overtaken_by_a_rebalance_answers_no_one():
    c = coord()
    leader, follower = _two_member_generation(c)
    c.sync("g", 2, follower, {})
    c.sync("g", 2, leader, {leader: b"L", follower: b"F"})
    _, eff, _ = join(c, require=False, now=5)             # a newcomer: the rebalance answers
    assert {(e.member_id, e.error) for e in eff} == \
        {(leader, ErrorCode.REBALANCE_IN_PROGRESS), (follower, ErrorCode.REBALANCE_IN_PROGRESS)}
    assert c.stored("g", 2, ErrorCode.NONE, 6) == []
    assert c.groups["g"].state is GroupState.PREPARING_REBALANCE
