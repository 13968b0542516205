"""The balancer (balancer.py): unit cases of the pure decision, property tests of its invariants
on simulated clusters (replication factor and ISR never lowered by plan, racks spanned never
fewer, partitions already moving untouched, at most max.moves in flight, convergence to replica
counts within the threshold and then silence), and the controller driving it through ordinary
reassignments when a broker joins."""

from __future__ import annotations

from hypothesis import given, settings as hsettings, strategies as st

from metadata_quorum.controller import balancer
from metadata_quorum.controller.balancer import Part, Settings, decide
from metadata_quorum.image import BROKER_RESOURCE
from metadata_quorum.tests.test_rereplication import Sim
from wire.errors import ErrorCode as E

ON = Settings(enabled=True, max_moves=4, threshold=1)


def healthy(*replicas):
    return Part(tuple(replicas), tuple(replicas), replicas[0])


def three_on_three():
    return {("t", i): healthy(*[(i + k) % 3 for k in range(3)]) for i in range(6)}


def test_disabled_by_default_and_says_so():
    d = decide({0: None, 1: None, 2: None, 3: None}, three_on_three(), Settings())
    assert d.state == "disabled" and not d.moves
    assert Settings.from_configs({}) == Settings()
    assert Settings.from_configs({balancer.ENABLE_CONFIG: "true",
                                  balancer.MAX_MOVES_CONFIG: "2"}) == Settings(True, 2, 1)


def test_a_new_broker_gets_replicas_in_place_bounded_by_max_moves():
    d = decide({0: None, 1: None, 2: None, 3: None}, three_on_three(), ON)
    assert d.state == "moving" and len(d.moves) == 4
    parts = three_on_three()
    for key, target, why in d.moves:
        before = parts[key].replicas
        assert 3 in target and len(target) == len(before) == 3
        # in place: exactly one position changed, to the new broker
        assert sum(a != b for a, b in zip(before, target)) == 1
        assert "-> 3" in why
    assert len({key for key, _, _ in d.moves}) == 4


def test_balanced_cluster_does_nothing():
    d = decide({0: None, 1: None, 2: None}, three_on_three(), ON)
    assert d.state == "balanced" and not d.moves
    assert [c[1] for c in d.replica_counts] == [6, 6, 6]


def test_moves_in_flight_and_moving_partitions_are_left_alone():
    parts = three_on_three()
    for i in range(4):
        p = parts[("t", i)]
        parts[("t", i)] = Part(p.replicas, p.isr, p.leader, moving=True)
    d = decide({0: None, 1: None, 2: None, 3: None}, parts, ON)
    assert d.state == "moves in flight" and not d.moves
    d = decide({0: None, 1: None, 2: None, 3: None}, parts, Settings(True, 6, 1))
    assert d.state == "moving" and len(d.moves) == 2
    assert {key for key, _, _ in d.moves} <= {("t", 4), ("t", 5)}


def test_a_broker_being_drained_receives_nothing():
    # broker 3 is being decommissioned: a move in flight takes its replica off; it has the
    # fewest replicas, yet the balancer sends it none
    parts = {("t", i): healthy(*[(i + k) % 3 for k in range(3)]) for i in range(12)}
    parts[("u", 0)] = Part((0, 1, 2), (0, 1, 2, 3), 0, moving=True, removing=(3,))
    d = decide({0: None, 1: None, 2: None, 3: None}, parts, Settings(True, 8, 1))
    assert d.state == "stuck" and "drained receive none: [3]" in d.reason
    assert all(3 not in target for _, target, _ in d.moves)
    # without the drain, 3 would get replicas
    parts[("u", 0)] = healthy(0, 1, 2)
    d = decide({0: None, 1: None, 2: None, 3: None}, parts, Settings(True, 8, 1))
    assert d.state == "moving" and all(3 in target for _, target, _ in d.moves)


def test_waits_while_a_replica_is_on_an_unusable_broker():
    d = decide({0: None, 1: None, 3: None}, three_on_three(), ON)
    assert d.state == "waiting" and "[2]" in d.reason and not d.moves
    assert decide({0: None}, {}, ON).state == "no usable broker"


def test_out_of_sync_partitions_are_not_moved():
    parts = {k: Part(p.replicas, p.replicas[:2], p.leader)
             for k, p in three_on_three().items()}
    d = decide({0: None, 1: None, 2: None, 3: None}, parts, ON)
    assert d.state == "stuck" and not d.moves


def test_rack_rule_kept():
    # brokers 0,1 on rack a, 2 on b, new broker 3 on a: a partition on (0, 2) may not become
    # (3, 2)? it may (still two racks); (0, 2) -> (0, 3) would leave rack b: refused
    racks = {0: "a", 1: "a", 2: "b", 3: "a"}
    parts = {("t", i): healthy(0 if i % 2 else 1, 2) for i in range(8)}
    d = decide(racks, parts, Settings(True, 8, 1))
    assert d.moves
    for key, target, _ in d.moves:
        assert len({racks[b] for b in target}) == 2 and 2 in target


def test_leader_balance_reorders_the_replica_set():
    # every partition prefers broker 0
    parts = {("t", i): healthy(0, 1, 2) for i in range(6)}
    d = decide({0: None, 1: None, 2: None}, parts, ON)
    assert d.state == "leaders" and len(d.moves) == 4
    for key, target, why in d.moves:
        assert sorted(target) == [0, 1, 2] and target[0] != 0 and "preferred leader" in why


# -- properties over simulated clusters ------------------------------------------------------------

@st.composite
def clusters(draw):
    n = draw(st.integers(2, 6))
    racked = draw(st.booleans())
    racks = {b: (f"r{b % draw(st.integers(1, 3))}" if racked else None) for b in range(n)}
    parts = {}
    for i in range(draw(st.integers(1, 30))):
        rf = draw(st.integers(1, n))
        replicas = tuple(draw(st.permutations(range(n)))[:rf])
        parts[("t", i)] = healthy(*replicas)
    added = draw(st.integers(1, 3))
    for b in range(n, n + added):
        racks[b] = f"r{b % 2}" if racked else None
    return racks, parts, Settings(True, draw(st.integers(1, 6)), draw(st.integers(1, 2)))


def apply(parts, moves, partial):
    """Start the moves; finish each in-flight move (the new replica caught up) unless `partial`
    holds it back one round. Returns the new parts and the ISR floor seen meanwhile."""
    out = dict(parts)
    for key, target, _ in moves:
        p = out[key]
        if set(target) == set(p.replicas):       # a reorder: one record, no copy
            out[key] = Part(target, p.isr, p.leader)
        else:
            # moving: the old ISR stays until every target replica has joined it
            out[key] = Part(target, p.isr, p.leader, moving=True)
    for key, p in out.items():
        if p.moving and key not in partial:
            out[key] = Part(p.replicas, p.replicas, p.replicas[0])
    return out


@hsettings(max_examples=150, deadline=None)
@given(clusters(), st.randoms(use_true_random=False))
def test_invariants_and_convergence(cluster, rng):
    racks, parts, s = cluster
    rounds = 0
    while True:
        d = decide(racks, parts, s)
        in_flight = sum(p.moving for p in parts.values())
        copies = sum(1 for key, t, _ in d.moves if set(t) != set(parts[key].replicas))
        assert copies == 0 or in_flight + copies <= s.max_moves
        for key, target, _ in d.moves:
            before = parts[key]
            assert not before.moving                                    # moving: untouched
            assert len(target) == len(set(target)) == len(before.replicas)   # RF kept
            assert set(before.isr) == set(before.replicas)              # only healthy moved
            assert len({racks[b] for b in target}) >= len({racks[b] for b in before.replicas})
        if not d.moves and not any(p.moving for p in parts.values()):
            break
        partial = {key for key, _, _ in d.moves if rng.random() < 0.3}
        parts = apply(parts, d.moves, partial)
        rounds += 1
        assert rounds < 500, d
    rc, pc = balancer.counts(racks, parts)
    if all(r is None for r in racks.values()):
        # without racks it always gets there; with racks the rule may forbid it
        assert max(rc.values()) - min(rc.values()) <= s.threshold, (rc, d)
        assert d.state in ("balanced", "stuck")
        if d.state == "stuck":      # leaders may be stuck, replica counts never are
            assert max(pc.values()) - min(pc.values()) > s.threshold
    assert decide(racks, parts, s).moves == ()                       # it stops proposing


# -- the controller drives it --------------------------------------------------------------------

def _enable(s, **more):
    configs = {balancer.ENABLE_CONFIG: "true"} | more
    res = s.log.run_pure(lambda: s.c.incremental_alter_configs(
        [(BROKER_RESOURCE, "", [(k, 0, v) for k, v in configs.items()])]))
    assert res == [(E.NONE, None)]


def test_controller_evens_counts_after_a_broker_joins():
    s = Sim(4, timeout_ms=None)
    s.alive.discard(3)                  # broker 3 "joins" later: fenced until it heartbeats
    s.step(4000)
    assert s.c.image.brokers[3].fenced
    s.topic("a", [[i % 3, (i + 1) % 3] for i in range(6)])
    s.topic("b", [[i % 3, (i + 1) % 3, (i + 2) % 3] for i in range(6)])
    for _ in range(5):
        s.step()
    assert all(3 not in p.replicas for p in s.partitions())
    assert s.c.balancer_decision.state == "disabled"
    _enable(s, **{balancer.MAX_MOVES_CONFIG: "2"})
    s.alive.add(3)
    for _ in range(60):
        s.step()
        for p in s.partitions():
            assert len(p.isr) >= 2 or len(p.replicas) - len(p.removing_replicas) < 3
            assert len(p.replicas) - len(p.removing_replicas) in (2, 3)
        assert sum(bool(p.adding_replicas) for p in s.partitions()) <= 2
        if s.c.balancer_decision.state == "balanced":
            break
    assert s.c.balancer_decision.state == "balanced", s.c.balancer_decision
    counts = [sum(b in p.replicas for p in s.partitions()) for b in range(4)]
    assert max(counts) - min(counts) <= 1 and sum(counts) == 30, counts
    leaders = [sum(p.leader == b for p in s.partitions()) for b in range(4)]
    assert min(leaders) >= 2, leaders
    assert s.log.replay_all().image.same_state(s.c.image)


def test_bad_settings_are_refused_as_invalid_config():
    s = Sim(3, timeout_ms=None)
    for key, value in ((balancer.ENABLE_CONFIG, "maybe"), (balancer.MAX_MOVES_CONFIG, "0"),
                       (balancer.THRESHOLD_CONFIG, "x")):
        res = s.log.run_pure(lambda: s.c.incremental_alter_configs(
            [(BROKER_RESOURCE, "", [(key, 0, value)])]))
        assert res[0][0] == E.INVALID_CONFIG, (key, res)
    assert balancer.decide_image(s.c.image).state == "disabled"
