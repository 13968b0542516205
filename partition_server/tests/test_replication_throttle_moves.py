"""The reassignment tier of the replication throttle (throttle.py): moves no topic config lists
are bound by `raftka.reassignment.throttled.rate`, in their own bucket; an operator's listing
keeps a partition in the operator's tier."""

from common.topic_configs import MOVES_THROTTLED_RATE
from partition_server.quotas import WindowConfig
from partition_server.replication.throttle import (ReplicationQuota, ReplicationQuotas,
                                                   moves_by_side)

ONE_S = WindowConfig(1, 1000)


def test_tiers_have_their_own_buckets():
    q = ReplicationQuota(ONE_S)
    q.configure(1000.0, {"a": frozenset({0})})
    q.configure_moves(500.0, {"a": frozenset({1}), "b": frozenset({0})})
    assert q.is_throttled("a", 0) and q.is_throttled("a", 1) and q.is_throttled("b", 0)
    assert not q.is_throttled("a", 2)
    q.record(10_000, 0, ("a", 1))                  # the move tier goes into debt...
    assert q.would_throttle("a", 1, False, 1) and q.would_throttle("b", 0, False, 1)
    assert not q.would_throttle("a", 0, False, 1)  # ...the operator's does not
    assert not q.would_throttle("a", 1, True, 1)   # in sync: never held back
    q.record(10_000, 2, ("a", 0))
    assert q.would_throttle("a", 0, False, 3)


def test_an_operator_listing_wins_and_no_rate_means_no_tier():
    q = ReplicationQuota(ONE_S)
    q.configure(None, {"a": "*"})                  # listed, unlimited: never held back
    q.configure_moves(100.0, {"a": frozenset({3})})
    q.record(10**6, 0, ("a", 3))
    assert q.is_throttled("a", 3) and not q.would_throttle("a", 3, False, 1)
    q.configure_moves(None, {"b": frozenset({0})})
    assert not q.is_throttled("b", 0) and q.throttled == {"a": "*"}


def test_quotas_follow_the_moving_partitions_and_the_dynamic_rate():
    qs = ReplicationQuotas(7, ONE_S, static_move_rate=1000.0)
    moving = {("t", 0): False, ("t", 1): True, ("u", 2): True}
    assert moves_by_side(moving) == ({"t": frozenset({0})},
                                     {"t": frozenset({1}), "u": frozenset({2})})
    qs.update_moves(moving, 1, {})
    assert qs.leader.moves == {"t": frozenset({0})} and qs.follower.move_bound == 1000.0
    qs.update_moves({}, 1, {})                     # same version: nothing recomputed
    assert qs.leader.moves == {"t": frozenset({0})}
    qs.update_moves({}, 2, {MOVES_THROTTLED_RATE: "250"})
    assert qs.leader.moves == {} and qs.leader.move_bound == 250.0
    qs.update_moves(moving, 3, {MOVES_THROTTLED_RATE: str(2**63 - 1)})   # unlimited
    assert qs.follower.move_bound is None and not qs.follower.throttled
