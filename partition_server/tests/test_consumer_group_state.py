"""KIP-848 consumer groups: epochs, reconciliation (revoke before reassign), errors, assignors."""

import random
import uuid

from hypothesis import given, settings, strategies as st

from partition_server.group.consumer_group import (ConsumerGroupCoordinatorState, MemberState,
                                                   range_assign, uniform_assign)
from wire.errors import ErrorCode

T1, T2 = uuid.uuid4(), uuid.uuid4()
TOPICS = {"a": (T1, 6), "b": (T2, 3)}


def hb(c, mid="", epoch=0, now=0, owned=None, names=("a",), **kw):
    return c.heartbeat("g", mid, epoch, subscribed_names=list(names) if epoch == 0 else kw.pop("sub", None),
                       owned=owned, topics=kw.pop("topics", TOPICS), now_ms=now, **kw)


def parts(assignment, tid=T1):
    return set(assignment.get(tid, ())) if assignment else set()


def test_single_member_joins_and_gets_everything():
    c = ConsumerGroupCoordinatorState()
    r = hb(c)
    assert r.error == ErrorCode.NONE and r.member_id and r.member_epoch == 1
    assert parts(r.assignment) == set(range(6))
    again = hb(c, r.member_id, 1, now=10, owned={T1: list(range(6))})
    assert again.assignment is None and again.member_epoch == 1          # nothing changed
    assert c.groups["g"].state == "Stable"


def test_second_member_waits_until_the_first_revokes():
    c = ConsumerGroupCoordinatorState()
    a = hb(c)
    b = hb(c, now=5)
    assert b.member_epoch == 2 and parts(b.assignment) == set()      # all still owned by a
    g = c.groups["g"]
    ra = hb(c, a.member_id, 1, now=6, owned={T1: list(range(6))})
    assert ra.member_epoch == 1 and len(parts(ra.assignment)) == 3   # told to drop 3
    assert g.member_state(g.members[a.member_id]) is MemberState.UNREVOKED_PARTITIONS
    rb = hb(c, b.member_id, 2, now=7, owned={})
    assert parts(rb.assignment) == set()                            # a has not let go yet
    kept = sorted(parts(ra.assignment))
    ra2 = hb(c, a.member_id, 1, now=8, owned={T1: kept})             # a revoked
    assert ra2.member_epoch == 2
    rb2 = hb(c, b.member_id, 2, now=9, owned={})
    assert parts(rb2.assignment) == set(range(6)) - set(kept)
    assert g.state == "Stable"


def test_leave_and_session_expiry_reassign():
    c = ConsumerGroupCoordinatorState(session_timeout_ms=1000)
    a = hb(c)
    b = hb(c, now=1)
    hb(c, a.member_id, 1, now=2, owned={T1: list(range(6))})
    left = hb(c, b.member_id, -1, now=3)
    assert left.error == ErrorCode.NONE and left.member_epoch == -1
    r = hb(c, a.member_id, 1, now=4, owned={T1: list(range(3))})
    assert parts(r.assignment) == set(range(6))
    b = hb(c, now=5)
    hb(c, b.member_id, b.member_epoch, now=1400, owned={})
    gone = c.tick(1500, TOPICS)                                      # a: last heartbeat at 4
    assert [(x[1], x[2]) for x in gone] == [(a.member_id, "session timeout")]
    assert parts(hb(c, b.member_id, b.member_epoch, now=1501, owned={}).assignment) == set(range(6))


def test_errors():
    c = ConsumerGroupCoordinatorState()
    assert hb(c, "ghost", 3).error == ErrorCode.UNKNOWN_MEMBER_ID
    a = hb(c)
    assert hb(c, a.member_id, 7, owned={}).error == ErrorCode.FENCED_MEMBER_EPOCH
    assert hb(c, server_assignor="sticky").error == ErrorCode.UNSUPPORTED_ASSIGNOR
    s = hb(c, instance_id="i1")
    assert hb(c, instance_id="i1").error == ErrorCode.UNRELEASED_INSTANCE_ID
    assert s.error == ErrorCode.NONE
    assert c.heartbeat("g", "", 0, topics=TOPICS, now_ms=0).error == ErrorCode.INVALID_REQUEST
    assert c.can_commit("g", a.member_id, a.member_epoch) == ErrorCode.NONE
    assert c.can_commit("g", a.member_id, 99) == ErrorCode.FENCED_MEMBER_EPOCH
    assert c.can_commit("g", "", -1) == ErrorCode.UNKNOWN_MEMBER_ID    # group has members


def test_a_lost_answer_is_resent_for_the_previous_epoch():
    c = ConsumerGroupCoordinatorState()
    a = hb(c)
    hb(c, now=1)                                                     # b joins: epoch 2
    ra = hb(c, a.member_id, 1, now=2, owned={T1: list(range(6))})   # a: revoke half
    kept = sorted(parts(ra.assignment))
    moved = hb(c, a.member_id, 1, now=3, owned={T1: kept})
    assert moved.member_epoch == 2                                   # ... this answer is lost
    back = hb(c, a.member_id, 1, now=4, owned={T1: kept})           # a retries with epoch 1
    assert back.error == ErrorCode.NONE and back.member_epoch == 2
    assert sorted(parts(back.assignment)) == kept                    # resent
    assert hb(c, a.member_id, 0 + 1, now=5, owned={T1: list(range(6))}).error == \
        ErrorCode.FENCED_MEMBER_EPOCH                                # owns more than it may


def test_new_partitions_trigger_a_new_target():
    c = ConsumerGroupCoordinatorState()
    a = hb(c)
    grown = {"a": (T1, 8), "b": (T2, 3)}
    r = hb(c, a.member_id, 1, now=1, owned={T1: list(range(6))}, topics=grown)
    assert r.member_epoch == 2 and parts(r.assignment) == set(range(8))


def test_range_assignor():
    out = range_assign({"m1": {"a"}, "m2": {"a", "b"}}, TOPICS)
    assert out["m1"] == {T1: frozenset({0, 1, 2})}
    assert out["m2"] == {T1: frozenset({3, 4, 5}), T2: frozenset({0, 1, 2})}


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 8), st.integers(0, 40), st.randoms(use_true_random=False))
def test_uniform_is_balanced_and_sticky(n_members, n_parts, rnd):
    topics = {"t": (T1, n_parts)}
    members = [f"m{i}" for i in range(n_members)]
    subs = {m: {"t"} for m in members}
    first = uniform_assign(subs, topics, {})
    counts = [len(first[m].get(T1, ())) for m in members]
    assert sum(counts) == n_parts and max(counts) - min(counts) <= 1
    assert sorted(p for m in members for p in first[m].get(T1, ())) == list(range(n_parts))
    if n_members > 1:                                  # one member leaves: only its partitions move
        gone = rnd.choice(members)
        rest = {m: subs[m] for m in members if m != gone}
        second = uniform_assign(rest, topics, first)
        moved = sum(len(set(first[m].get(T1, ())) - set(second[m].get(T1, ()))) for m in rest)
        assert moved == 0
        counts = [len(second[m].get(T1, ())) for m in rest]
        assert max(counts) - min(counts) <= 1


def test_simulated_members_never_share_a_partition():
    """Members heartbeat in random order, report what they own, sometimes leave and rejoin:
    after every step no partition is owned by two members."""
    for seed in range(30):
        rng = random.Random(seed)
        c = ConsumerGroupCoordinatorState(session_timeout_ms=10_000)
        owned: dict[str, set] = {}
        epochs: dict[str, int] = {}
        now = 0
        for step in range(300):
            now += rng.randint(1, 50)
            action = rng.random()
            if action < 0.08 or not owned:
                r = hb(c, now=now)
                owned[r.member_id], epochs[r.member_id] = parts(r.assignment), r.member_epoch
            elif action < 0.12 and len(owned) > 1:
                mid = rng.choice(sorted(owned))
                hb(c, mid, -1, now=now)
                del owned[mid], epochs[mid]
            else:
                mid = rng.choice(sorted(owned))
                r = hb(c, mid, epochs[mid], now=now, owned={T1: sorted(owned[mid])})
                assert r.error == ErrorCode.NONE, (seed, step, r)
                epochs[mid] = r.member_epoch
                if r.assignment is not None:
                    owned[mid] = parts(r.assignment)
            everyone = [p for ps in owned.values() for p in ps]
            assert len(everyone) == len(set(everyone)), (seed, step, owned)
        for _ in range(3):                        # settle: everyone heartbeats a few times
            for mid in sorted(owned):
                now += 1
                r = hb(c, mid, epochs[mid], now=now, owned={T1: sorted(owned[mid])})
                epochs[mid] = r.member_epoch
                if r.assignment is not None:
                    owned[mid] = parts(r.assignment)
        assert sorted(p for ps in owned.values() for p in ps) == list(range(6)), (seed, owned)
        assert c.groups["g"].state == "Stable"


def test_persisted_group_restores_epochs_and_assignments():
    import msgpack

    from partition_server.group.consumer_group import consumer_group_record, restore_consumer_group
    c = ConsumerGroupCoordinatorState()
    a = hb(c)
    b = hb(c, now=1)
    ra = hb(c, a.member_id, 1, now=2, owned={T1: list(range(6))})    # a is revoking
    g = c.groups["g"]
    value = msgpack.unpackb(msgpack.packb(consumer_group_record(g)))
    r = restore_consumer_group("g", value, 100)
    assert consumer_group_record(r) == value
    assert (r.group_epoch, r.assignment_epoch) == (g.group_epoch, g.assignment_epoch)
    for mid, m in g.members.items():
        n = r.members[mid]
        assert (n.member_epoch, n.assigned, n.revoking) == (m.member_epoch, m.assigned, m.revoking)
    # a new coordinator carries on: a's next heartbeat (revoked) moves it forward, no fencing
    c2 = ConsumerGroupCoordinatorState()
    c2.groups["g"] = r
    kept = sorted(parts(ra.assignment))
    r2 = hb(c2, a.member_id, 1, now=101, owned={T1: kept})
    assert r2.error == ErrorCode.NONE and r2.member_epoch == 2
    rb = hb(c2, b.member_id, 2, now=102, owned={})
    assert parts(rb.assignment) == set(range(6)) - set(kept)
