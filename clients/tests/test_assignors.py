"""Assignors: encodings, the KIP-54 (seed 003) C0/C1/C2 examples, and properties (balance,
validity, minimal movement when a member leaves, cooperative never double-owns)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clients.consumer.assignors import (Assignment, Subscription, decode_assignment,
                                        decode_subscription, encode_assignment,
                                        encode_subscription, get_assignor)
from clients.consumer.assignors.protocol import decode_sticky_user_data, encode_sticky_user_data
from wire.errors import DecodeError

NAMES = ["range", "roundrobin", "sticky", "cooperative-sticky"]


def tp_list(*names):
    """'t0p1' -> ('t0', 1)"""
    out = []
    for n in names:
        t, p = n.split("p")
        out.append((t, int(p)))
    return sorted(out)


def run(assignor, ppt, members: dict[str, list[str]], owned=None, generation=1):
    subs = {}
    for m, topics in members.items():
        subs[m] = assignor.subscription(topics, (owned or {}).get(m, []), generation)
        subs[m] = decode_subscription(encode_subscription(subs[m]))     # through the wire
    out = assignor.assign(ppt, subs)
    return {m: decode_assignment(encode_assignment(a)).partitions for m, a in out.items()}


# -- encodings ---------------------------------------------------------------------------------

@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_subscription_round_trip_every_version(version):
    sub = Subscription(topics=["a", "b"], user_data=b"xy", owned_partitions=[("a", 0), ("b", 2)],
                       generation_id=7, rack_id="r1", version=version)
    back = decode_subscription(encode_subscription(sub))
    assert back.topics == ["a", "b"] and back.user_data == b"xy" and back.version == version
    assert back.owned_partitions == ([] if version < 1 else [("a", 0), ("b", 2)])
    assert back.generation_id == (7 if version >= 2 else -1)
    assert back.rack_id == ("r1" if version >= 3 else None)


def test_newer_subscription_version_is_read_as_far_as_known():
    body = encode_subscription(Subscription(topics=["a"], generation_id=3))[2:]
    data = struct.pack(">h", 9) + body + b"\x00\x01future-fields"
    back = decode_subscription(data)
    assert back.topics == ["a"] and back.generation_id == 3 and back.version == 9


def test_assignment_round_trip_and_empty():
    a = Assignment([("t", 1), ("t", 0), ("u", 3)], b"ud")
    back = decode_assignment(encode_assignment(a))
    assert back.partitions == [("t", 0), ("t", 1), ("u", 3)] and back.user_data == b"ud"
    assert decode_assignment(b"").partitions == []


@pytest.mark.parametrize("garbage", [b"\x00", b"\x00\x00\x00\x05ab", b"\xff\xff", b"\x00\x01\x00"])
def test_garbage_raises_decode_error(garbage):
    with pytest.raises(DecodeError):
        decode_subscription(garbage)
    if garbage:
        with pytest.raises(DecodeError):
            decode_assignment(garbage)


def test_kafka_python_metadata_decodes():
    """kafka-python frames subscriptions as Java does (v0 here); read its bytes as ours."""
    from kafka.protocol.old import consumer_protocol as protocol
    raw = protocol.ConsumerProtocolMemberMetadata_v0(0, ["t1", "t2"], b"ud").encode()
    sub = decode_subscription(raw)
    assert sub.topics == ["t1", "t2"] and sub.user_data == b"ud"
    raw_a = protocol.ConsumerProtocolMemberAssignment_v0(0, [("t1", [0, 2])], b"").encode()
    assert decode_assignment(raw_a).partitions == [("t1", 0), ("t1", 2)]


def test_sticky_user_data_round_trip_and_garbage():
    data = encode_sticky_user_data([("b", 1), ("a", 0)], 12)
    assert decode_sticky_user_data(data) == ([("a", 0), ("b", 1)], 12)
    assert decode_sticky_user_data(struct.pack(">i", 5)) == ([], 5)     # cooperative flavour
    assert decode_sticky_user_data(b"\x00\x00\x00\x09\x00") == ([], -1)
    # V0 (no generation) still gives the partitions
    assert decode_sticky_user_data(data[:-4]) == ([("a", 0), ("b", 1)], -1)


def test_sticky_user_data_from_kafka_python():
    """kafka-python 3.x prefixes its StickyAssignorUserData with an int16 version (Java and
    librdkafka do not); we read both."""
    from kafka.coordinator.assignors.sticky.user_data import StickyAssignorUserData
    theirs = StickyAssignorUserData([("t", [0, 1]), ("a", [3])], 5).encode()
    assert sorted(decode_sticky_user_data(theirs)[0]) == [("a", 3), ("t", 0), ("t", 1)]
    assert decode_sticky_user_data(theirs)[1] == 5


def test_names_and_java_class_names():
    for name in NAMES:
        assert get_assignor(name).name == name
    assert get_assignor("org.apache.kafka.clients.consumer.CooperativeStickyAssignor").name == \
        "cooperative-sticky"
    with pytest.raises(ValueError, match="unknown partition.assignment.strategy"):
        get_assignor("fancy")


# -- seed 003 / KIP-54 fixed cases -------------------------------------------------------------

FOUR_TOPICS = {"t0": 2, "t1": 2, "t2": 2, "t3": 2}
ALL = ["t0", "t1", "t2", "t3"]


def test_example1_initial_roundrobin_and_sticky_agree():
    expected = {"C0": tp_list("t0p0", "t1p1", "t3p0"), "C1": tp_list("t0p1", "t2p0", "t3p1"),
                "C2": tp_list("t1p0", "t2p1")}
    members = {"C0": ALL, "C1": ALL, "C2": ALL}
    assert run(get_assignor("roundrobin"), FOUR_TOPICS, members) == expected
    sticky = run(get_assignor("sticky"), FOUR_TOPICS, members)
    assert sorted(len(v) for v in sticky.values()) == [2, 3, 3]


def test_example1_c1_leaves():
    before = {"C0": tp_list("t0p0", "t1p1", "t3p0"), "C1": tp_list("t0p1", "t2p0", "t3p1"),
              "C2": tp_list("t1p0", "t2p1")}
    members = {"C0": ALL, "C2": ALL}
    rr = run(get_assignor("roundrobin"), FOUR_TOPICS, members, before)
    assert rr == {"C0": tp_list("t0p0", "t1p0", "t2p0", "t3p0"),
                  "C2": tp_list("t0p1", "t1p1", "t2p1", "t3p1")}      # everything reshuffled
    for name in ("sticky", "cooperative-sticky"):
        got = run(get_assignor(name), FOUR_TOPICS, members, before)
        # C0 keeps t0p0 t1p1 t3p0, C2 keeps t1p0 t2p1; C1's three are spread 1/2
        assert set(before["C0"]) <= set(got["C0"]) and set(before["C2"]) <= set(got["C2"])
        assert sorted(got["C0"] + got["C2"]) == sorted(tp for t in ALL for tp in tp_list(
            f"{t}p0", f"{t}p1"))
        assert sorted(len(v) for v in got.values()) == [4, 4]


EX2 = {"t0": 1, "t1": 2, "t2": 3}
EX2_MEMBERS = {"C0": ["t0"], "C1": ["t0", "t1"], "C2": ["t0", "t1", "t2"]}


def test_example2_different_subscriptions():
    rr = run(get_assignor("roundrobin"), EX2, EX2_MEMBERS)
    assert rr == {"C0": tp_list("t0p0"), "C1": tp_list("t1p0"),
                  "C2": tp_list("t1p1", "t2p0", "t2p1", "t2p2")}
    sticky = run(get_assignor("sticky"), EX2, EX2_MEMBERS)
    assert sticky == {"C0": tp_list("t0p0"), "C1": tp_list("t1p0", "t1p1"),
                      "C2": tp_list("t2p0", "t2p1", "t2p2")}


def test_example2_c0_leaves():
    before = {"C0": tp_list("t0p0"), "C1": tp_list("t1p0", "t1p1"),
              "C2": tp_list("t2p0", "t2p1", "t2p2")}
    members = {"C1": ["t0", "t1"], "C2": ["t0", "t1", "t2"]}
    rr = run(get_assignor("roundrobin"), EX2, members, before)
    assert rr == {"C1": tp_list("t0p0", "t1p1"), "C2": tp_list("t1p0", "t2p0", "t2p1", "t2p2")}
    sticky = run(get_assignor("sticky"), EX2, members, before)
    assert sticky == {"C1": tp_list("t0p0", "t1p0", "t1p1"), "C2": tp_list("t2p0", "t2p1", "t2p2")}


def test_range_example():
    got = run(get_assignor("range"), {"t0": 3, "t1": 3}, {"C0": ["t0", "t1"], "C1": ["t0", "t1"]})
    assert got == {"C0": tp_list("t0p0", "t0p1", "t1p0", "t1p1"), "C1": tp_list("t0p2", "t1p2")}


def test_static_members_sort_by_instance_id():
    a = get_assignor("range")
    subs = {"zzz": Subscription(["t"], group_instance_id="a"),
            "aaa": Subscription(["t"], group_instance_id="b")}
    out = a.assign({"t": 2}, subs)
    assert out["zzz"].partitions == [("t", 0)] and out["aaa"].partitions == [("t", 1)]


def test_higher_generation_claim_wins_and_equal_claims_cancel():
    a = get_assignor("sticky")
    subs = {"A": Subscription(["t"], owned_partitions=[("t", 0)], generation_id=3),
            "B": Subscription(["t"], owned_partitions=[("t", 0)], generation_id=5)}
    assert a.assign({"t": 2}, subs)["B"].partitions == [("t", 0)]
    owners = __import__("clients.consumer.assignors.sticky", fromlist=["x"]).previous_owners(
        ["A", "B"], {"A": ([("t", 0)], 4), "B": ([("t", 0)], 4)})
    assert owners == {}


def test_unknown_topics_and_no_members():
    for name in NAMES:
        a = get_assignor(name)
        assert a.assign({}, {}) == {}
        got = run(a, {"t": 2}, {"m1": ["t", "missing"], "m2": ["t"]})
        assert sorted(tp for v in got.values() for tp in v) == [("t", 0), ("t", 1)]


# -- properties --------------------------------------------------------------------------------

topics_st = st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), st.integers(0, 9),
                            min_size=1, max_size=4)


def check_valid(ppt, members, got):
    flat = [tp for v in got.values() for tp in v]
    assert len(flat) == len(set(flat)), "a partition assigned twice"
    wanted = {(t, p) for ts in members.values() for t in ts if t in ppt for p in range(ppt[t])}
    assert set(flat) == wanted
    for m, tps in got.items():
        assert all(t in members[m] for t, _ in tps)


@settings(max_examples=80, deadline=None)
@given(topics_st, st.integers(1, 7), st.sampled_from(["roundrobin", "sticky", "cooperative-sticky"]))
def test_identical_subscriptions_are_balanced(ppt, n_members, name):
    members = {f"m{i}": sorted(ppt) for i in range(n_members)}
    got = run(get_assignor(name), ppt, members)
    check_valid(ppt, members, got)
    sizes = [len(v) for v in got.values()]
    assert max(sizes) - min(sizes) <= 1


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 30), st.integers(1, 7))
def test_range_balanced_on_one_topic(n_parts, n_members):
    members = {f"m{i}": ["t"] for i in range(n_members)}
    got = run(get_assignor("range"), {"t": n_parts}, members)
    check_valid({"t": n_parts}, members, got)
    sizes = [len(v) for v in got.values()]
    assert max(sizes) - min(sizes) <= 1


@settings(max_examples=80, deadline=None)
@given(topics_st, st.data())
def test_different_subscriptions_valid_and_sticky_balanced(ppt, data):
    n = data.draw(st.integers(1, 5))
    members = {f"m{i}": data.draw(st.lists(st.sampled_from(sorted(ppt)), min_size=1, unique=True))
               for i in range(n)}
    for name in NAMES:
        got = run(get_assignor(name), ppt, members)
        check_valid(ppt, members, got)
        if name == "sticky":
            # no partition could move to an eligible member holding two fewer
            for m, tps in got.items():
                for t, _ in tps:
                    for other, topics in members.items():
                        if t in topics:
                            assert len(got[m]) <= len(got[other]) + 1


def settle_cooperative(assignor, ppt, members, owned, generation):
    """Rebalance rounds until nothing is pending; checks no partition has two owners at once."""
    for round_no in range(3):
        got = run(assignor, ppt, members, owned, generation + round_no)
        owners = {}
        for m, tps in got.items():
            # the member still owns what it keeps; it revokes what is not in its assignment
            for tp in tps:
                assert tp not in owners
                owners[tp] = m
        for m, tps in owned.items():
            if m in members:
                for tp in set(tps) & set(got[m]):
                    assert owners[tp] == m
        revoked = any(set(owned.get(m, [])) - set(got[m]) for m in members)
        owned = got
        if not revoked and sum(len(v) for v in got.values()) == sum(
                ppt[t] for t in {t for ts in members.values() for t in ts if t in ppt}):
            return got
    raise AssertionError("cooperative rebalance did not settle in 3 rounds")


@settings(max_examples=60, deadline=None)
@given(topics_st, st.integers(2, 7), st.data(), st.sampled_from(["sticky", "cooperative-sticky"]))
def test_member_leaving_moves_only_its_partitions(ppt, n_members, data, name):
    assignor = get_assignor(name)
    members = {f"m{i}": sorted(ppt) for i in range(n_members)}
    before = run(assignor, ppt, members)
    if name == "cooperative-sticky":
        before = settle_cooperative(assignor, ppt, members, {}, 1)
    leaver = data.draw(st.sampled_from(sorted(members)))
    rest = {m: t for m, t in members.items() if m != leaver}
    owned = {m: tps for m, tps in before.items() if m != leaver}
    after = run(assignor, ppt, rest, owned, 2)
    check_valid(ppt, rest, after)
    for m, tps in owned.items():
        assert set(tps) <= set(after[m]), f"{m} lost partitions it owned"
    sizes = [len(v) for v in after.values()]
    assert max(sizes) - min(sizes) <= 1


@settings(max_examples=60, deadline=None)
@given(topics_st, st.integers(1, 6))
def test_cooperative_join_revokes_then_settles_balanced(ppt, n_members):
    assignor = get_assignor("cooperative-sticky")
    members = {f"m{i}": sorted(ppt) for i in range(n_members)}
    owned = settle_cooperative(assignor, ppt, members, {}, 1)
    members["new"] = sorted(ppt)
    settled = settle_cooperative(assignor, ppt, members, owned, 5)
    check_valid(ppt, members, settled)
    sizes = [len(v) for v in settled.values()]
    assert max(sizes) - min(sizes) <= 1
    moved = sum(len(set(owned[m]) - set(settled[m])) for m in owned)
    assert moved == len(settled["new"])         # only what the newcomer needed moved
