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
