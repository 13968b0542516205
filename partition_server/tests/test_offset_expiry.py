"""The offsets expiry looks only at due or changed groups (group/offset_expiry.py) and expires
exactly what the full scan (`state.expired_offsets` over every group, as the coordinator did
before) expires, whatever the sequence of commits, deletions, membership and checks."""

import types

from hypothesis import given, settings
from hypothesis import strategies as st

from partition_server.group.offset_expiry import OffsetExpiry
from partition_server.group.state import expired_offsets

RETENTION = 1000


def group(members):
    return types.SimpleNamespace(members={"m": 1} if members else {})


def test_a_quiet_group_is_not_looked_at_until_due():
    exp = OffsetExpiry(RETENTION)
    offsets = {"g": {("t", p): (5, 0, "", 100) for p in range(1000)}}
    exp.touch("g")
    gone, looked = exp.expired(500, offsets, {}, {})
    assert gone == {} and looked == {"g"}
    exp.file(looked, offsets, {}, {})
    for now in (600, 900, 1099):
        gone, looked = exp.expired(now, offsets, {}, {})
        assert gone == {} and looked == set()               # nothing walked
        exp.file(looked, offsets, {}, {})
    gone, looked = exp.expired(1100, offsets, {}, {})
    assert looked == {"g"} and len(gone["g"]) == 1000


def test_the_oldest_offset_of_a_group_sets_its_moment():
    exp = OffsetExpiry(RETENTION)
    offsets = {"g": {("t", 0): (5, 0, "", 500), ("t", 1): (5, 0, "", 900)}}
    exp.touch("g")
    assert exp.expired(1000, offsets, {}, {})[0] == {}
    exp.file({"g"}, offsets, {}, {})
    gone, looked = exp.expired(1500, offsets, {}, {})
    assert gone == {"g": [("t", 0)]}
    del offsets["g"][("t", 0)]
    exp.file(looked, offsets, {}, {})
    assert exp.expired(1899, offsets, {}, {}) == ({}, set())
    assert exp.expired(1900, offsets, {}, {})[0] == {"g": [("t", 1)]}


def test_groups_with_members_are_checked_without_walking_and_expire_once_empty():
    exp = OffsetExpiry(RETENTION)
    offsets = {"g": {("t", 0): (5, 0, "", 0)}}
    groups = {"g": group(True)}
    exp.touch("g")
    for now in (2000, 3000):
        gone, looked = exp.expired(now, offsets, groups, {})
        assert gone == {} and looked == {"g"}
        exp.file(looked, offsets, groups, {})
    groups["g"] = group(False)                    # members left: no touch needed
    gone, _ = exp.expired(4000, offsets, groups, {"g": 3500})
    assert gone == {}
    exp.file({"g"}, offsets, groups, {"g": 3500})
    assert exp.expired(4500, offsets, groups, {"g": 3500})[0] == {"g": [("t", 0)]}


ops = st.lists(st.one_of(
    st.tuples(st.just("commit"), st.integers(0, 3), st.integers(0, 3), st.integers(0, 1500)),
    st.tuples(st.just("delete"), st.integers(0, 3), st.integers(0, 3)),
    st.tuples(st.just("members"), st.integers(0, 3), st.booleans()),
    st.tuples(st.just("forget"), st.integers(0, 3)),
    st.tuples(st.just("empty_since"), st.integers(0, 3), st.integers(0, 1500)),
    st.tuples(st.just("disown"), st.integers(0, 3)),
    st.tuples(st.just("check"), st.integers(0, 900))), max_size=60)


@settings(max_examples=300, deadline=None)
@given(ops)
def test_random_sequences_expire_like_the_full_scan(steps):
    exp = OffsetExpiry(RETENTION)
    offsets, groups, empty_since, disowned, now = {}, {}, {}, set(), 1500
    for op in steps:
        gid = f"g{op[1]}"
        if op[0] == "commit":          # a commit now, or a loaded one from the past
            offsets.setdefault(gid, {})[("t", op[2])] = (1, 0, "", now - op[3])
            exp.touch(gid)
        elif op[0] == "delete" and ("t", op[2]) in offsets.get(gid, {}):
            del offsets[gid][("t", op[2])]
            if not offsets[gid]:
                del offsets[gid]
            exp.touch(gid)
        elif op[0] == "members":       # membership changes are not signalled
            groups[gid] = group(op[2])
        elif op[0] == "forget":
            groups.pop(gid, None)
        elif op[0] == "empty_since":
            empty_since[gid] = now - op[2]
            exp.touch(gid)
        elif op[0] == "disown":        # the coordinator skips groups it does not own
            disowned ^= {gid}
        elif op[0] == "check":
            now += op[1]
            want = expired_offsets(offsets, groups, now, RETENTION, empty_since)
            gone, looked = exp.expired(now, offsets, groups, empty_since)
            assert {g: sorted(p) for g, p in gone.items()} == \
                {g: sorted(p) for g, p in want.items()}
            for g, parts in gone.items():
                if g in disowned:
                    continue
                for tp in parts:
                    del offsets[g][tp]
                if not offsets[g]:
                    del offsets[g]
                exp.touch(g)
            exp.file(looked, offsets, groups, empty_since)
    assert exp.heap_size() <= 2 * 4 + 64
