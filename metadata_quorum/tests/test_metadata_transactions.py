"""Bounded Raft entries and metadata transactions (KIP-868), batched replay, Raft state resets.

A big operation becomes several Raft entries between a Begin and an End; replay shows nothing of
it before the End and drops it on an Abort. Replaying a batch at once equals replaying record by
record. pysyncobj replacing the state (dump load, snapshot install) reaches the listener.
"""

import pickle
import uuid

import msgpack
import pytest
from hypothesis import given, settings, strategies as st

from metadata_quorum import records as r
from metadata_quorum.image import MetadataImage
from metadata_quorum.quorum.raft import Committed, MetadataLog, Reset


def _brokers():
    return [r.RegisterBrokerRecord(b, f"i{b}", 10 + b, "127.0.0.1", 9092 + b, None, fenced=False)
            for b in range(3)]


def _topic(name: str, partitions: int, seed: int = 1):
    tid = uuid.UUID(int=seed)
    return [r.TopicRecord(name, tid)] + [
        r.PartitionRecord(tid, p, (p % 3, (p + 1) % 3, (p + 2) % 3), (p % 3, (p + 1) % 3, (p + 2) % 3),
                          p % 3) for p in range(partitions)]


def test_small_operations_stay_one_entry_without_markers():
    recs = _brokers()
    entries = r.encode_entries(recs)
    assert len(entries) == 1
    assert [type(x) for x in r.decode_batch(entries[0])] == [type(x) for x in recs]


def test_large_operations_are_bounded_entries_wrapped_in_a_transaction():
    recs = _topic("big", 10_000)
    entries = r.encode_entries(recs)
    assert len(entries) > 10
    assert all(len(e) <= r.MAX_ENTRY_BYTES for e in entries)
    decoded = [rec for e in entries for rec in r.decode_batch(e)]
    assert isinstance(decoded[0], r.BeginTransactionRecord)
    assert isinstance(decoded[-1], r.EndTransactionRecord)
    assert decoded[1:-1] == recs


def test_a_record_too_large_for_any_entry_is_refused():
    with pytest.raises(r.RecordTooLarge):
        r.encode_entries([r.ConfigRecord(2, "t", "x", "v" * (r.MAX_RECORD_BYTES + 1))])


def _replay_entries(img: MetadataImage, entries: list[bytes]):
    """Replay entry by entry as the Raft applier does; the images seen after each entry."""
    seen = []
    for e in entries:
        recs = r.decode_batch(e)
        img = img.apply_all(img.offset + 1, recs)
        seen.append(img)
    return img, seen


def test_no_image_shows_part_of_a_transaction():
    base = MetadataImage().apply_all(0, _brokers())
    entries = r.encode_entries(_topic("big", 5_000))
    final, seen = _replay_entries(base, entries)
    for img in seen[:-1]:
        assert "big" not in img.topics and img.in_transaction
        assert img.topics is base.topics                # nothing committed changed
    assert not final.in_transaction
    assert len(final.topics["big"].partitions) == 5_000
    assert final.offset == base.offset + sum(len(r.decode_batch(e)) for e in entries)


def test_abort_drops_the_open_transaction_and_a_stray_end_is_skipped():
    base = MetadataImage().apply_all(0, _brokers())
    entries = r.encode_entries(_topic("big", 5_000))
    half, _ = _replay_entries(base, entries[:3])
    assert half.in_transaction
    aborted = half.apply(half.offset + 1, r.AbortTransactionRecord("test"))
    assert not aborted.in_transaction and "big" not in aborted.topics
    stray = aborted.apply(aborted.offset + 1, r.EndTransactionRecord())
    assert stray.skipped == aborted.skipped + 1 and "big" not in stray.topics
    # a new transaction after the abort commits normally
    final, _ = _replay_entries(stray, entries)
    assert len(final.topics["big"].partitions) == 5_000


def test_a_snapshot_inside_a_transaction_resumes_it():
    base = MetadataImage().apply_all(0, _brokers())
    entries = r.encode_entries(_topic("big", 5_000))
    half, _ = _replay_entries(base, entries[:2])
    snap = [r.decode_record(r.encode_record(x)) for x in half.to_records()]
    resumed = MetadataImage.from_records(snap, half.offset)
    assert resumed.in_transaction and resumed.same_state(half)
    done, _ = _replay_entries(resumed, entries[2:])
    direct, _ = _replay_entries(base, entries)
    assert done.same_state(direct) and len(done.topics["big"].partitions) == 5_000


def test_an_image_pickled_before_the_pending_slot_existed_loads():
    img = MetadataImage().apply_all(0, _brokers() + _topic("a", 3))
    state = img.__getstate__()
    del state["pending"]
    old = MetadataImage.__new__(MetadataImage)
    old.__setstate__(state)
    assert old.pending is None and old.same_state(img)
    assert pickle.loads(pickle.dumps(img)).same_state(img)


_ids = [uuid.UUID(int=i) for i in range(1, 4)]
_record = st.one_of(
    st.builds(r.TopicRecord, st.sampled_from(["a", "b", "c"]), st.sampled_from(_ids)),
    st.builds(r.PartitionRecord, st.sampled_from(_ids), st.integers(0, 3), st.just((0, 1)),
              st.just((0, 1)), st.integers(0, 1)),
    st.builds(r.PartitionChangeRecord, st.sampled_from(_ids), st.integers(0, 3),
              isr=st.sampled_from([None, (0,), (0, 1)]), leader=st.sampled_from([None, 0, 1])),
    st.builds(r.RemoveTopicRecord, st.sampled_from(_ids)),
    st.builds(r.ConfigRecord, st.just(2), st.sampled_from(["a", "b"]), st.sampled_from(["x", "y"]),
              st.sampled_from([None, "1"])),
    st.builds(r.FenceBrokerRecord, st.integers(0, 2), st.just(10)),
    st.builds(r.UnfenceBrokerRecord, st.integers(0, 2), st.integers(10, 12)),
    st.builds(r.ClientQuotaRecord, st.just((("user", "u"),)), st.just("producer_byte_rate"),
              st.sampled_from([None, 1.0])),
    st.just(r.BeginTransactionRecord()), st.just(r.EndTransactionRecord()),
    st.just(r.AbortTransactionRecord()),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_record, max_size=40), st.integers(1, 10))
def test_batched_replay_equals_record_by_record(records, cut):
    base = MetadataImage().apply_all(0, _brokers())
    one_by_one = base
    for i, rec in enumerate(records):
        one_by_one = one_by_one.apply(base.offset + 1 + i, rec)
    batched = base.apply_all(base.offset + 1, records[:cut]).apply_all(
        base.offset + 1 + len(records[:cut]), records[cut:])
    assert batched.same_state(one_by_one)
    assert batched.offset == one_by_one.offset and batched.skipped == one_by_one.skipped
    # the base image is never changed by either
    assert base.same_state(MetadataImage().apply_all(0, _brokers()))


def test_metadata_log_reports_a_state_reset_to_its_listener():
    """pysyncobj installs a dump or snapshot through `_deserialize`, replaying nothing: the
    listener must hear of it, or it serves stale state and sees the next entry as a gap."""
    source = MetadataLog()
    events = []
    source.subscribe(events.append)
    for recs in (_brokers(), _topic("a", 4)):
        source.apply.__wrapped__(source, msgpack.packb([r.encode_record(x) for x in recs],
                                                       use_bin_type=True))
    assert [type(e) for e in events] == [Committed, Committed]
    assert events[1].first == 3 and events[1].image.topics["a"]

    restarted = MetadataLog()
    seen = []
    state = restarted.subscribe(seen.append)
    assert state.next_offset == 0
    restarted._deserialize(source._serialize())
    assert len(seen) == 1 and isinstance(seen[0], Reset)
    assert seen[0].next_offset == source.next_offset == 8
    assert seen[0].image.same_state(source.image) and seen[0].tail == source.tail
