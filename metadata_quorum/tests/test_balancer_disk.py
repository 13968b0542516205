"""The balancer's disk goal (balancer_disk.py): swaps that even disk bytes per broker without
undoing replica counts, and the controller's load reports that feed it."""

from __future__ import annotations

from hypothesis import given, settings as hsettings, strategies as st

from metadata_quorum.controller import balancer, balancer_disk
from metadata_quorum.controller.balancer import Part, Settings, decide
from metadata_quorum.controller.load_reports import LoadReports
from metadata_quorum.tests.test_balancer import apply, healthy

MiB = 1 << 20
ON = Settings(enabled=True, max_moves=4, threshold=1, disk_percent=10, disk_min_skew=MiB)
BROKERS = {0: None, 1: None, 2: None}


def rf1(*brokers):
    return {("t", i): healthy(b) for i, b in enumerate(brokers)}


def test_even_counts_skewed_bytes_get_a_count_neutral_swap():
    parts = rf1(0, 0, 1, 1, 2, 2)
    sizes = {("t", 0): 40 * MiB, ("t", 1): 40 * MiB}          # both big ones on broker 0
    d = decide(BROKERS, parts, ON, sizes)
    assert d.state == "disk", d
    assert dict(d.disk_bytes) == {0: 80 * MiB, 1: 0, 2: 0}
    assert len(d.moves) == 2 and "swap" in d.moves[0][2]
    after = apply(parts, d.moves, partial=set())
    rc, _ = balancer.counts(BROKERS, after)
    assert rc == {0: 2, 1: 2, 2: 2}                              # counts untouched
    by = balancer_disk.broker_bytes(BROKERS, after, sizes)
    assert max(by.values()) == 40 * MiB                          # one big one moved off 0
    d2 = decide(BROKERS, after, ON, sizes)
    # 40/40/0 MiB: moving either big one to the empty broker leaves the same gap
    assert d2.state == "stuck" and "narrows" in d2.reason and not d2.moves


def test_small_or_unknown_differences_are_left_alone():
    parts = rf1(0, 1, 2)
    assert decide(BROKERS, parts, ON, {("t", 0): MiB // 2}).state == "balanced"
    d = decide(BROKERS, parts, ON, None)
    assert d.state == "balanced" and "not known yet" in d.reason and d.disk_bytes == ()
    # the percent threshold: 300 MiB spread over a mean of ~10 GiB is within 10 %
    big = {("t", 0): 10_300 * MiB, ("t", 1): 10_000 * MiB, ("t", 2): 10_000 * MiB}
    assert decide(BROKERS, parts, ON, big).state == "balanced"


def test_a_single_move_is_used_when_counts_allow_and_drains_are_respected():
    parts = rf1(0, 0, 0, 1, 1, 2)            # counts 3/2/1: spread 2 > threshold 1 first
    s = Settings(True, 4, 2, 10, MiB)        # threshold 2: counts are even enough
    sizes = {("t", 0): 15 * MiB, ("t", 1): 15 * MiB}
    d = decide(BROKERS, parts, s, sizes)
    assert d.state == "disk" and len(d.moves) == 1, d
    assert d.moves[0][1] == (1,)             # to the lightest broker (lowest id of equals)
    # broker 1 is being drained by a move in progress: it receives nothing, broker 2 does
    parts[("t", 6)] = Part((2,), (1,), 1, moving=True, removing=(1,))
    d = decide(BROKERS, parts, s, sizes)
    assert d.moves and all(t == (2,) for _, t, _ in d.moves), d


@st.composite
def loaded_clusters(draw):
    n = draw(st.integers(2, 5))
    parts, sizes = {}, {}
    for i in range(draw(st.integers(2, 24))):
        rf = draw(st.integers(1, n))
        parts[("t", i)] = healthy(*draw(st.permutations(range(n)))[:rf])
        sizes[("t", i)] = draw(st.integers(0, 200)) * MiB
    return {b: None for b in range(n)}, parts, sizes, \
        Settings(True, draw(st.integers(2, 6)), 1, draw(st.integers(1, 30)),
                 draw(st.sampled_from([0, MiB, 16 * MiB])))


def _squares(by: dict) -> float:
    mean = sum(by.values()) / len(by)
    return sum((v - mean) ** 2 for v in by.values())


@hsettings(max_examples=150, deadline=None)
@given(loaded_clusters())
def test_disk_steps_keep_the_rules_shrink_the_spread_and_end(cluster):
    brokers, parts, sizes, s = cluster
    for _ in range(400):
        d = decide(brokers, parts, s, sizes)
        if not d.moves:
            break
        for key, target, _ in d.moves:
            assert len(target) == len(set(target)) == len(parts[key].replicas)
        before = balancer_disk.broker_bytes(brokers, parts, sizes)
        parts = apply(parts, d.moves, partial=set())
        if d.state == "disk":
            rc, _ = balancer.counts(brokers, parts)
            assert max(rc.values()) - min(rc.values()) <= s.threshold
            assert _squares(balancer_disk.broker_bytes(brokers, parts, sizes)) < _squares(before)
    else:
        raise AssertionError("the balancer never settled")
    assert d.state in ("balanced", "stuck"), d


def test_load_reports_count_only_once_every_broker_reported_in_full():
    loads = LoadReports()
    loads.record(0, True, {("a", 0): 5})
    loads.record(1, False, {("a", 1): 7})           # a change list: not a full picture
    assert not loads.complete_for({0, 1})
    loads.record(1, True, {("a", 1): 8})
    assert loads.complete_for({0, 1})

    class Image:                                     # only what `current` reads
        topics = {"a": type("T", (), {"partitions": {0: None}})()}
    assert loads.current(Image()) == {("a", 0): 5}   # a partition that left the image is forgotten
