"""Compaction: latest value per key, offsets preserved, bounded map, tombstones, crash-safe swap."""

import os

import pytest

from partition_server.log import LogCleaner, LogConfig, PartitionLog
from partition_server.log import cleaner as cleaner_mod
from wire.records.batch import build_batch, decode_batch, iter_batches

T0 = 1_700_000_000_000


def make(tmp_path, **cfg):
    cfg.setdefault("cleanup_policy", ("compact",))
    cfg.setdefault("segment_bytes", 600)
    cfg.setdefault("min_cleanable_dirty_ratio", 0.0)
    return PartitionLog(str(tmp_path / "c-0"), LogConfig(**cfg))


def all_records(plog):
    out, offset = [], plog.log_start_offset
    while offset < plog.log_end_offset:
        info = plog.read(offset, 1 << 20)
        if not info.size:
            break
        for h in iter_batches(info.read_bytes()):
            assert h.is_valid()
            out += [r for r in decode_batch(h.bytes()).records if r.offset >= offset]
            offset = h.next_offset
    return out


def write_updates(plog, rounds, keys, ts=T0, epoch=1):
    expected = {}
    for rnd in range(rounds):
        recs = [(b"k%d" % k, b"v%d-%d" % (k, rnd), [], ts + rnd) for k in range(keys)]
        info = plog.append_as_leader(build_batch(recs), epoch, ts)
        for k in range(keys):
            expected[b"k%d" % k] = (info.first_offset + k, b"v%d-%d" % (k, rnd))
    return expected


def check_compacted(plog, expected, active_base):
    recs = all_records(plog)
    offsets = [r.offset for r in recs]
    assert offsets == sorted(set(offsets))                       # strictly increasing
    latest = {}
    for r in recs:
        latest[r.key] = (r.offset, r.value)
    assert latest == expected                                    # the latest value per key
    closed = [r for r in recs if r.offset < active_base]
    assert len({r.key for r in closed}) == len(closed)            # no duplicates below active


def test_compaction_keeps_latest_value_per_key_and_offsets(tmp_path):
    plog = make(tmp_path)
    expected = write_updates(plog, rounds=30, keys=4)
    leo, before = plog.log_end_offset, plog.size_in_bytes
    cleaner = LogCleaner(plog)
    cleaner.run_until_idle(T0)
    assert cleaner.passes == 1 and plog.log_end_offset == leo
    assert plog.size_in_bytes < before / 2
    check_compacted(plog, expected, plog.active.base_offset)
    plog.close()
    again = make(tmp_path)                                       # survives a reopen
    check_compacted(again, expected, again.active.base_offset)
    assert again.append_as_leader(build_batch([(b"k0", b"new", [], T0)]), 1, T0).first_offset == leo


def test_bounded_map_cleans_in_several_passes(tmp_path):
    plog = make(tmp_path)
    expected = write_updates(plog, rounds=12, keys=6)
    cleaner = LogCleaner(plog, dedupe_buffer_bytes=cleaner_mod.MAP_ENTRY_BYTES * 8)
    assert cleaner.max_entries == 8
    for _ in range(20):
        cleaner.run_until_idle(T0)
        if cleaner.first_dirty_offset >= plog.active.base_offset:
            break
    assert cleaner.passes > 1
    check_compacted(plog, expected, plog.active.base_offset)


def test_tombstones_removed_after_delete_retention(tmp_path):
    plog = make(tmp_path, delete_retention_ms=1000)
    write_updates(plog, rounds=5, keys=3)
    plog.append_as_leader(build_batch([(b"k1", None, [], T0 + 10)]), 1, T0)
    expected = write_updates(plog, rounds=0, keys=3)
    for _ in range(8):
        plog.append_as_leader(build_batch([(b"other", b"x", [], T0 + 20)]), 1, T0)
    plog.roll()
    cleaner = LogCleaner(plog)
    cleaner.run_until_idle(T0 + 500)
    keys = {r.key: r.value for r in all_records(plog)}
    assert keys[b"k1"] is None and b"k0" in keys                 # tombstone still visible
    cleaner.first_dirty_offset = 0                               # force a second look
    cleaner.run_until_idle(T0 + 5000)
    keys = {r.key: r.value for r in all_records(plog)}
    assert b"k1" not in keys and keys[b"k0"] == b"v0-4" and keys[b"other"] == b"x"
    assert expected == {}


def test_step_function_interleaves_with_appends(tmp_path):
    plog = make(tmp_path)
    expected = write_updates(plog, rounds=20, keys=3)
    cleaner = LogCleaner(plog)
    steps = 0
    while cleaner.clean_step(budget_bytes=100, now_ms=T0):      # tiny budget: many steps
        steps += 1
        if steps < 40:                                           # appends while it works
            expected.update(write_updates(plog, rounds=1, keys=3, ts=T0 + 100 + steps))
        assert steps < 10_000
    assert steps > 5
    check_compacted(plog, expected, cleaner.first_dirty_offset)


def test_transactional_batches_kept_and_producer_batches_leave_empty_batch(tmp_path):
    plog = make(tmp_path)
    plog.append_as_leader(build_batch([(b"t", b"txn", [], T0)], producer_id=7, producer_epoch=0,
                                      base_sequence=0, is_transactional=True), 1, T0)
    plog.append_as_leader(build_batch([(b"p", b"old", [], T0)], producer_id=9, producer_epoch=0,
                                      base_sequence=0), 1, T0)
    write_updates(plog, rounds=10, keys=2)
    plog.append_as_leader(build_batch([(b"t", b"later", [], T0), (b"p", b"new", [], T0)]), 1, T0)
    plog.roll()
    LogCleaner(plog).run_until_idle(T0)
    recs = all_records(plog)
    assert [r.value for r in recs if r.key == b"t"] == [b"txn", b"later"]   # txn kept verbatim
    assert [r.value for r in recs if r.key == b"p"] == [b"new"]
    data = b"".join(plog.read(o, 1 << 20).read_bytes() for o in [0])
    first = [h for h in iter_batches(data)][:2]
    assert first[0].is_transactional and first[1].producer_id == 9
    assert first[1].records_count == 0 and first[1].last_offset == 1 and first[1].is_valid()


def test_truncation_during_a_pass_aborts_it(tmp_path):
    plog = make(tmp_path)
    write_updates(plog, rounds=20, keys=3)
    cleaner = LogCleaner(plog)
    while cleaner.state != "CLEAN" or cleaner._out is None:
        assert cleaner.clean_step(50, T0)
    plog.truncate_to(10)
    assert not cleaner.clean_step(50, T0) or cleaner.state == "BUILD_MAP"
    assert not [n for n in os.listdir(plog.directory) if n.endswith(".cleaned")]


@pytest.mark.parametrize("fail_on", [1, 2])
def test_crash_in_the_middle_of_a_swap(tmp_path, monkeypatch, fail_on):
    """fail_on=1: killed before .cleaned became .swap (old data stays); 2: killed after the
    commit point (.swap exists, indexes deleted): reopening completes the swap."""
    plog = make(tmp_path)
    expected = write_updates(plog, rounds=20, keys=3)
    original = [(r.offset, r.key, r.value) for r in all_records(plog)]
    calls = []

    def crashing_rename(src, dst):
        calls.append(src)
        if len(calls) == fail_on:
            raise KeyboardInterrupt("simulated kill")
        os.replace(src, dst)

    monkeypatch.setattr(cleaner_mod, "_rename", crashing_rename)
    with pytest.raises(KeyboardInterrupt):
        LogCleaner(plog).run_until_idle(T0)
    for seg in plog.segments:
        seg.abandon()                                         # no flush, no marker
    monkeypatch.setattr(cleaner_mod, "_rename", os.replace)
    again = make(tmp_path)
    names = os.listdir(again.directory)
    assert not [n for n in names if n.endswith((".cleaned", ".swap"))]
    recs = all_records(again)
    if fail_on == 1:
        assert [(r.offset, r.key, r.value) for r in recs] == original
    else:
        assert len(recs) < len(original)
        assert [r.offset for r in recs] == sorted({r.offset for r in recs})
    cleaner = LogCleaner(again)
    cleaner.run_until_idle(T0)
    check_compacted(again, expected, again.active.base_offset)


def test_corrupt_stored_batch_stops_cleaning_instead_of_laundering_it(tmp_path):
    plog = make(tmp_path)
    write_updates(plog, rounds=20, keys=3)
    seg = plog.segments[1]
    h = next(seg.iter_headers(0))
    os.pwrite(seg.fd, b"\xee", h.pos + h.size_in_bytes - 2)
    before = open(seg.path, "rb").read()
    cleaner = LogCleaner(plog)
    cleaner.run_until_idle(T0)
    assert cleaner.uncleanable and "CRC" in cleaner.uncleanable
    assert open(plog.segments[1].path, "rb").read() == before
    assert not cleaner.clean_step(1 << 20, T0)


def test_follower_gap_larger_than_relative_offset_range_rolls(tmp_path):
    plog = make(tmp_path, cleanup_policy=("delete",))
    plog.append_as_follower(build_batch([(b"a", b"1", [], T0)], base_offset=0))
    far = 1 << 32
    plog.append_as_follower(build_batch([(b"a", b"2", [], T0)], base_offset=far))
    assert plog.active.base_offset == far and plog.log_end_offset == far + 1
    assert decode_batch(plog.read(far, 100).read_bytes()).records[0].value == b"2"


def test_truncation_lowers_the_first_dirty_offset(tmp_path):
    plog = make(tmp_path)
    write_updates(plog, rounds=20, keys=3)
    cleaner = LogCleaner(plog)
    cleaner.run_until_idle(T0)
    cleaned_to = cleaner.first_dirty_offset
    assert cleaned_to > 20
    plog.truncate_to(12)                                         # a diverged follower
    assert cleaner.first_dirty_offset == plog.log_end_offset <= 12
    expected = write_updates(plog, rounds=20, keys=3, ts=T0 + 50, epoch=2)
    plog.roll()
    cleaner.run_until_idle(T0)
    check_compacted(plog, expected, plog.active.base_offset)
    again = make(tmp_path)                                       # the checkpoint persisted
    assert again.first_dirty_offset == cleaner.first_dirty_offset
