"""Replica placement (controller/placement.py): the CreateTopics layout and the drain plan of a
decommission share one rack rule; a drain keeps every partition's replication factor, takes
nothing onto a leaving broker, spreads the moved replicas and refuses rather than shrink."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metadata_quorum.controller.placement import (NotEnoughBrokers, drain_plan, pick_replica,
                                                  place, rack_alternating)


def test_rack_alternation_interleaves_racks():
    brokers = {0: "a", 1: "a", 2: "b", 3: "b", 4: "c"}
    assert rack_alternating(brokers) == [0, 2, 4, 1, 3]


def test_pick_prefers_an_unused_rack_then_any_broker():
    racks = {0: "a", 1: "a", 2: "b"}
    assert pick_replica([1, 2], [0], racks) == 2          # 1 shares rack a with 0
    assert pick_replica([1, 0], [0, 2], racks) == 1       # every rack used: any non-replica
    assert pick_replica([0, 2], [0, 2], racks) is None


def test_place_puts_each_partition_on_distinct_racks():
    brokers = {0: "a", 1: "a", 2: "b", 3: "b", 4: "c", 5: "c"}
    layout = place(brokers, 12, 3)
    for replicas in layout:
        assert len(set(replicas)) == 3 and len({brokers[b] for b in replicas}) == 3
    leaders = [r[0] for r in layout]
    assert all(leaders.count(b) == 2 for b in brokers)    # leaders spread evenly
    assert place(brokers, 1, 7) is None


def test_drain_replaces_only_the_leaving_broker_in_place():
    brokers = {0: None, 1: None, 2: None, 3: None}
    parts = {("t", 0): (0, 1, 2), ("t", 1): (1, 2, 3), ("t", 2): (2, 0, 3)}
    plan = drain_plan(brokers, parts, {0})
    assert set(plan) == {("t", 0), ("t", 2)}             # ("t", 1) has nothing on 0
    assert plan[("t", 0)] == [3, 1, 2]                   # 3 is the only broker left to take it
    assert plan[("t", 2)][0] == 2 and plan[("t", 2)][2] == 3 and plan[("t", 2)][1] == 1


def test_drain_keeps_racks_apart_when_it_can():
    brokers = {0: "a", 1: "b", 2: "c", 3: "a", 4: "b", 5: "c"}
    parts = {("t", p): r for p, r in enumerate(place(brokers, 12, 3))}
    plan = drain_plan(brokers, parts, {0})
    for key, target in plan.items():
        assert 0 not in target and len(set(target)) == 3
        assert len({brokers[b] for b in target}) == 3, (key, target)   # 3 takes rack a's part
        assert 3 in target


def test_drain_spreads_the_moved_replicas_by_load():
    brokers = {b: None for b in range(6)}
    parts = {("t", p): (0, 1 + p % 2) for p in range(8)}  # broker 0 holds 8, 1 and 2 hold 4
    plan = drain_plan(brokers, parts, {0})
    takers = [t[0] for t in plan.values()]
    assert sorted(takers.count(b) for b in (3, 4, 5)) == [2, 3, 3]  # the empty ones first
    assert not {1, 2} & set(takers)                      # they hold more already


def test_drain_refuses_to_shrink_a_partition():
    with pytest.raises(NotEnoughBrokers):
        drain_plan({0: None, 1: None, 2: None}, {("t", 0): (0, 1, 2)}, {2})
    assert drain_plan({0: None, 1: None}, {("t", 0): (0,)}, {0}) == {("t", 0): [1]}


@settings(max_examples=150, deadline=None)
@given(n=st.integers(3, 9), racks=st.integers(1, 4), rf=st.integers(1, 3),
       partitions=st.integers(1, 30), leaving=st.sets(st.integers(0, 8), min_size=1, max_size=2))
def test_drain_invariants(n, racks, rf, partitions, leaving):
    brokers = {b: f"r{b % racks}" for b in range(n)}
    leaving = {b for b in leaving if b < n}
    layout = place(brokers, partitions, min(rf, n))
    parts = {("t", p): tuple(r) for p, r in enumerate(layout)}
    remaining = {b: x for b, x in brokers.items() if b not in leaving}
    if len(remaining) < min(rf, n):
        with pytest.raises(NotEnoughBrokers):
            drain_plan(brokers, parts, leaving)
        return
    plan = drain_plan(brokers, parts, leaving)
    for key, replicas in parts.items():
        target = plan.get(key, list(replicas))
        assert len(target) == len(replicas) == len(set(target))      # RF kept, distinct
        assert not set(target) & leaving
        assert [b for b in target if b in replicas] == [b for b in replicas if b not in leaving]
        if key not in plan:
            assert not set(replicas) & leaving
        # as many racks as the remaining brokers allow
        want = min(len(replicas), len(set(remaining.values())))
        kept_racks = {brokers[b] for b in replicas if b not in leaving}
        if len(kept_racks) == len(replicas) - len(set(replicas) & leaving):
            assert len({brokers[b] for b in target}) >= want
