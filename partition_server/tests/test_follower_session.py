"""The follower's side of KIP-227 incremental fetch sessions (replication/follower_session.py)."""

from partition_server.replication.follower_session import FetchPosition, FollowerSession
from wire.errors import ErrorCode as E

A0, A1, B0 = ("a", 0), ("a", 1), ("b", 0)


def pos(offset, epoch=1, leader_epoch=1, start=0):
    return FetchPosition(offset, epoch, leader_epoch, start)


class Follower:
    """Positions as the replica manager would report them; None = not fetched from this leader."""

    def __init__(self, **positions):
        self.positions = dict(positions)

    def __call__(self, key):
        return self.positions.get(key)


def open_session(s, positions, session_id=77):
    plan = s.build(list(positions.positions), positions)
    assert plan.full and plan.session_epoch == 0
    assert s.on_response(plan, E.NONE, session_id)
    return plan


def test_full_then_idle_incremental_fetch_names_no_partition():
    s = FollowerSession()
    f = Follower()
    f.positions = {A0: pos(5), A1: pos(0)}
    plan = open_session(s, f)
    assert dict(plan.send) == {A0: pos(5), A1: pos(0)} and plan.session_id == 0
    plan = s.build(f.positions, f)
    assert (plan.session_id, plan.session_epoch, plan.send, plan.forgotten) == (77, 1, [], [])
    assert s.on_response(plan, E.NONE, 77)
    # marked but unchanged partitions are not sent either
    s.mark_all([A0, A1])
    plan = s.build(f.positions, f)
    assert plan.session_epoch == 2 and plan.send == [] and plan.forgotten == []


def test_incremental_sends_moved_added_and_forgets_removed():
    s = FollowerSession()
    f = Follower()
    f.positions = {A0: pos(5), A1: pos(0)}
    open_session(s, f)
    f.positions[A0] = pos(9)                       # records appended
    f.positions[B0] = pos(0)                       # followed now
    f.positions[A1] = pos(0, leader_epoch=2)       # a new leader epoch, same leader
    s.mark(A0), s.mark(B0), s.mark(A1)
    plan = s.build(f.positions, f)
    assert sorted(plan.send) == sorted([(A0, pos(9)), (B0, pos(0)), (A1, pos(0, leader_epoch=2))])
    assert s.on_response(plan, E.NONE, 77)
    del f.positions[A1]                            # now followed from another leader (or offline)
    s.mark(A1)
    s.mark(("never", 0))                           # never sent: nothing to forget
    plan = s.build(f.positions, f)
    assert plan.send == [] and plan.forgotten == [A1] and A1 not in s.sent
    assert s.sent == {A0: pos(9), B0: pos(0)}


def test_session_errors_and_failures_start_a_full_fetch_again():
    s = FollowerSession()
    f = Follower()
    f.positions = {A0: pos(5), A1: pos(0)}
    open_session(s, f)
    plan = s.build(f.positions, f)
    assert not s.on_response(plan, E.INVALID_FETCH_SESSION_EPOCH, 0)
    plan = s.build(f.positions, f)                 # (S, 0): close S, open a new session
    assert plan.full and plan.session_id == 77 and len(plan.send) == 2
    assert s.on_response(plan, E.NONE, 88)
    plan = s.build(f.positions, f)
    assert (plan.session_id, plan.session_epoch) == (88, 1)
    assert not s.on_response(plan, E.FETCH_SESSION_ID_NOT_FOUND, 0)   # e.g. the leader restarted
    plan = s.build(f.positions, f)
    assert plan.full and plan.session_id == 0
    s.on_response(plan, E.NONE, 99)
    s.build(f.positions, f)
    s.on_failure()                                 # no answer: the leader's epoch is unknown
    plan = s.build(f.positions, f)
    assert plan.full and plan.session_id == 99


def test_sessionless_leader_gets_full_fetches():
    s = FollowerSession()
    f = Follower()
    f.positions = {A0: pos(5)}
    open_session(s, f, session_id=0)               # the leader's session cache was full
    plan = s.build(f.positions, f)
    assert plan.full and plan.send == [(A0, pos(5))]


def test_epoch_wraps_to_one():
    s = FollowerSession()
    f = Follower()
    f.positions = {A0: pos(5)}
    open_session(s, f)
    s.next_epoch = 2**31 - 1
    plan = s.build(f.positions, f)
    assert s.on_response(plan, E.NONE, 77) and s.next_epoch == 1
