"""AddRaftVoter / RemoveRaftVoter decisions (voter_control) and the voter set in the image."""

import pytest

from metadata_quorum import records as r
from metadata_quorum.controller import voter_control as vc
from metadata_quorum.image import MetadataImage, Voter
from wire.errors import ErrorCode

V = {i: Voter(i, f"127.0.0.1:{2000 + i}", "127.0.0.1", 1000 + i) for i in (1, 2, 3)}
NEW = Voter(4, "127.0.0.1:2004", "127.0.0.1", 1004)


def refused(fn, *args):
    with pytest.raises(vc.VoterRefused) as info:
        fn(*args)
    return info.value.error, info.value.message


def replay(*records) -> MetadataImage:
    image = MetadataImage()
    for offset, rec in enumerate(records):
        image = image.apply(offset, r.decode_record(r.encode_record(rec)))
    return image


def test_add_plan_records_pending_then_the_new_set():
    plan = vc.plan_add(V, (), NEW, {1, 2, 3})
    pending = replay(plan.pending)
    assert pending.voters == V and pending.voter_change == ("add", 4, NEW.raft_address,
                                                             NEW.host, NEW.port)
    done = replay(plan.pending, plan.done)
    assert done.voters == {**V, 4: NEW} and done.voter_change == ()
    aborted = replay(plan.pending, plan.aborted)
    assert aborted.voters == V and aborted.voter_change == ()


def test_one_change_at_a_time():
    change = vc.plan_add(V, (), NEW, {1, 2, 3}).pending.change
    code, message = refused(vc.plan_add, V, change, Voter(5, "h:5", "h", 5), {1, 2, 3})
    assert code == ErrorCode.REQUEST_TIMED_OUT and "adding controller 4" in message
    code, message = refused(vc.plan_remove, V, change, 2, {1, 2, 3})
    assert code == ErrorCode.REQUEST_TIMED_OUT and "one change at a time" in message


def test_add_refusals():
    assert refused(vc.plan_add, V, (), V[2], {1, 2, 3})[0] == ErrorCode.DUPLICATE_VOTER
    same_raft = Voter(9, V[1].raft_address, "127.0.0.1", 1009)
    assert refused(vc.plan_add, V, (), same_raft, {1, 2, 3})[0] == ErrorCode.DUPLICATE_VOTER
    same_listener = Voter(9, "127.0.0.1:2009", "127.0.0.1", V[3].port)
    assert refused(vc.plan_add, V, (), same_listener, {1, 2, 3})[0] == ErrorCode.DUPLICATE_VOTER
    for bad in (Voter(-1, "h:1", "h", 1), Voter(9, "", "h", 1), Voter(9, "h:1", "", 1),
                Voter(9, "h:1", "h", 0), Voter(9, "h:x", "h", 1), Voter(9, "h:70000", "h", 1)):
        assert refused(vc.plan_add, V, (), bad, {1, 2, 3})[0] == ErrorCode.INVALID_REQUEST, bad


def test_add_needs_a_reachable_majority_of_the_new_set():
    # 2 of 3 reachable: a 4-voter set needs 3 while the newcomer catches up
    code, message = refused(vc.plan_add, V, (), NEW, {1, 2})
    assert code == ErrorCode.INVALID_REQUEST and "remove the unreachable" in message
    # after removing the dead voter, 2 of 2 reachable: a 3-voter set needs 2
    two = {1: V[1], 2: V[2]}
    assert vc.plan_add(two, (), NEW, {1, 2}).done.voters[-1] == tuple(NEW)
    # a node id the leader reaches but that is not a voter does not count
    assert refused(vc.plan_add, V, (), NEW, {1, 2, 7})[0] == ErrorCode.INVALID_REQUEST


def test_remove_refusals():
    assert refused(vc.plan_remove, V, (), 7, {1, 2, 3})[0] == ErrorCode.VOTER_NOT_FOUND
    code, message = refused(vc.plan_remove, {1: V[1]}, (), 1, {1})
    assert code == ErrorCode.INVALID_REQUEST and "last voter" in message
    # voter 3 dead: removing live 1 leaves {2, 3} with only 2 reachable, below 2 of 2
    code, message = refused(vc.plan_remove, V, (), 1, {1, 2})
    assert code == ErrorCode.INVALID_REQUEST and "below a majority" in message
    # removing the dead one is the way out
    plan = vc.plan_remove(V, (), 3, {1, 2})
    assert replay(plan.pending, plan.done).voters == {1: V[1], 2: V[2]}
    # down to one voter is allowed (a majority of one)
    assert vc.plan_remove({1: V[1], 2: V[2]}, (), 2, {1}).done.voters == (tuple(V[1]),)


def test_resolve_follows_the_leaders_raft_membership():
    add = vc.plan_add(V, (), NEW, {1, 2, 3})
    members = {v.raft_address for v in V.values()}
    assert vc.resolve(add, members | {NEW.raft_address}) == (add.done, True)
    assert vc.resolve(add, members) == (add.aborted, False)
    rem = vc.plan_remove(V, (), 2, {1, 2, 3})
    assert vc.resolve(rem, members - {V[2].raft_address}) == (rem.done, True)
    assert vc.resolve(rem, members) == (rem.aborted, False)


def test_pending_plan_rebuilt_from_the_image_matches_the_original():
    for plan in (vc.plan_add(V, (), NEW, {1, 2, 3}), vc.plan_remove(V, (), 2, {1, 2, 3})):
        image = replay(plan.pending)
        again = vc.pending_plan(image.voters, image.voter_change)
        assert again == plan
    assert vc.pending_plan(V, ()) is None


def test_voters_survive_a_snapshot_and_stay_out_of_images_that_never_changed():
    plan = vc.plan_add(V, (), NEW, {1, 2, 3})
    image = replay(r.NoOpRecord(), plan.pending)
    again = MetadataImage.from_records(image.to_records(), image.offset)
    assert again.voters == image.voters and again.voter_change == image.voter_change
    assert again.same_state(image)
    assert MetadataImage().voters is None
    assert not any(isinstance(x, r.VotersRecord) for x in replay(r.NoOpRecord()).to_records())


def test_an_old_dump_without_the_voter_slots_loads_with_defaults():
    state = replay(r.NoOpRecord()).__getstate__()
    del state["voters"], state["voter_change"]
    image = MetadataImage.__new__(MetadataImage)
    image.__setstate__(state)
    assert image.voters is None and image.voter_change == ()


def test_a_one_voter_quorum_may_grow_to_two():
    """No set without the newcomer is a majority of two: the only way to grow, allowed (its
    commits wait until the second voter has caught up)."""
    one = {1: V[1]}
    assert vc.plan_add(one, (), NEW, {1}).done.voters == (tuple(V[1]), tuple(NEW))
    assert refused(vc.plan_add, one, (), NEW, set())[0] == ErrorCode.INVALID_REQUEST
