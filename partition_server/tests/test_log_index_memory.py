"""Segment indexes in memory: machine words, not Python ints (partition_server/log/index.py).

A broker loads every segment's indexes at start and keeps them: as lists of ints they took 159
bytes per entry (42 MB for a 1 GiB segment, 4 % of the data held), as arrays 28. Counted with
tracemalloc (exact, not timed). Also: what a load reads back, and what it refuses."""

from __future__ import annotations

import tracemalloc

import pytest

from partition_server.log.index import (OFFSET_ENTRY, TIME_ENTRY, CorruptIndexError,
                                        OffsetIndex, TimeIndex)

N = 50_000
BASE = 10**9


def _files(tmp_path, n=N, offsets=None, timestamps=None):
    rel = offsets or [i * 40 for i in range(1, n + 1)]
    ts = timestamps or [1_795_000_000_000 + 3 * i for i in range(1, n + 1)]
    (tmp_path / "x.index").write_bytes(b"".join(OFFSET_ENTRY.pack(r, 4096 * (i + 1))
                                                for i, r in enumerate(rel)))
    (tmp_path / "x.timeindex").write_bytes(b"".join(TIME_ENTRY.pack(t, r)
                                                    for t, r in zip(ts, rel)))


def test_loaded_indexes_take_under_32_bytes_per_entry(tmp_path):
    _files(tmp_path)
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        oi = OffsetIndex(str(tmp_path / "x.index"), BASE)
        oi.load(1 << 40)
        ti = TimeIndex(str(tmp_path / "x.timeindex"), BASE)
        ti.load(1 << 62)
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    held = sum(d.size_diff for d in after.compare_to(before, "filename"))
    assert held / N < 32, f"{held / N:.0f} bytes per entry"
    assert oi.entries == N and oi.lookup(BASE + 40 * 7 + 5) == 4096 * 7
    assert ti.lookup(1_795_000_000_000 + 3 * 10) == BASE + 40 * 9


def test_what_a_load_reads_back(tmp_path):
    stamps = [-5, 0, 1_795_000_000_000, (1 << 63) - 1]
    _files(tmp_path, 4, offsets=[1, 2, 3, 3], timestamps=stamps)
    ti = TimeIndex(str(tmp_path / "x.timeindex"), BASE)
    ti.load(BASE + 4)
    assert list(ti.timestamps) == stamps and list(ti.offsets) == [BASE + 1, BASE + 2, BASE + 3,
                                                                  BASE + 3]
    _files(tmp_path, 3, offsets=[1, 2, 9])
    oi = OffsetIndex(str(tmp_path / "x.index"), BASE)
    oi.load(4096 * 3 + 1)
    assert list(oi.offsets) == [BASE + 1, BASE + 2, BASE + 9]
    assert list(oi.positions) == [4096, 8192, 12288]
    oi.append(BASE + 10, 20000)
    oi.truncate_to_position(12288)
    assert list(oi.offsets) == [BASE + 1, BASE + 2]


@pytest.mark.parametrize("offsets, timestamps, size, next_offset", [
    ([1, 1, 3], None, 1 << 40, 1 << 62),          # offsets not increasing
    ([1, 2, 3], None, 4096 * 3, 1 << 62),         # a position at the segment's end
    ([1, 2, 3], [5, 5, 6], 1 << 40, 1 << 62),     # timestamps not increasing
    ([1, 2, 3], None, 1 << 40, BASE + 3),         # a time entry at the next offset
])
def test_a_load_refuses_inconsistent_entries(tmp_path, offsets, timestamps, size, next_offset):
    _files(tmp_path, 3, offsets=offsets, timestamps=timestamps)
    with pytest.raises(CorruptIndexError):
        OffsetIndex(str(tmp_path / "x.index"), BASE).load(size)
        TimeIndex(str(tmp_path / "x.timeindex"), BASE).load(next_offset)


# -- loading at first use (KIP-263) ---------------------------------------------------------------

def _written_log(path, batches=400):
    from partition_server.log import LogConfig, PartitionLog
    from wire.records.batch import build_batch
    cfg = LogConfig(segment_bytes=6_000, index_interval_bytes=256)
    plog = PartitionLog(str(path), cfg)
    for n in range(batches):
        plog.append_as_leader(build_batch([(None, str(n).encode() * 20, [], 1_700_000_000_000 + n)]),
                              1, 0)
    plog.close()
    return cfg


def _read_all(plog) -> list[int]:
    from wire.records.batch import decode_batch, iter_batches
    got, offset = [], 0
    while offset < plog.log_end_offset:
        data = plog.read(offset, 1 << 20).read_bytes()
        for h in iter_batches(data):
            got += [int(r.value[:len(r.value) // 20]) for r in decode_batch(h.bytes()).records]
            offset = h.next_offset
    return got


def test_a_clean_reopen_reads_no_index_until_a_segment_is_used(tmp_path):
    from partition_server.log import PartitionLog
    cfg = _written_log(tmp_path / "t-0")
    plog = PartitionLog(str(tmp_path / "t-0"), cfg)
    try:
        old = plog.segments[:-1]
        assert len(old) >= 5
        assert not any(s.index.loaded or s.time_index.loaded for s in old)
        assert all(s.index.entries > 0 for s in old)       # known from the file's size
        assert plog.log_end_offset == 400
        # a read of the middle loads that segment's indexes only
        middle = old[len(old) // 2]
        data = plog.read(middle.base_offset + 1, 100).read_bytes()
        assert data and middle.index.loaded
        assert sum(s.index.loaded for s in old) == 1
        # a time lookup in another one loads that one's
        first = old[0]
        assert plog.offset_for_timestamp(1_700_000_000_000 + 3)[0] == 3
        assert first.time_index.loaded
        assert _read_all(plog) == list(range(400))
    finally:
        plog.close()


def test_an_index_corrupt_in_the_middle_is_rebuilt_at_first_use(tmp_path):
    """Its last entry is sound (what the open reads), an earlier one is not: found at the first
    lookup, both indexes are rebuilt from the batches and written back."""
    from partition_server.log import PartitionLog
    cfg = _written_log(tmp_path / "t-0")
    victim = sorted(p for p in (tmp_path / "t-0").iterdir() if p.suffix == ".index")[1]
    data = bytearray(victim.read_bytes())
    assert len(data) >= 24
    data[8:16] = data[0:8]                     # entry 1 repeats entry 0: not increasing
    victim.write_bytes(bytes(data))
    plog = PartitionLog(str(tmp_path / "t-0"), cfg)
    try:
        seg = next(s for s in plog.segments if s.index.path == str(victim))
        assert not seg.index.loaded
        assert _read_all(plog) == list(range(400))
        assert seg.index.loaded and seg.index.entries > 1
        rebuilt = victim.read_bytes()
        assert rebuilt[8:16] != rebuilt[0:8] and len(rebuilt) % 8 == 0
        offsets = list(seg.index.offsets)
        assert offsets == sorted(set(offsets))
    finally:
        plog.close()
