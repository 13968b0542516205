"""Sparse offset and time indexes of one segment.

`.index`: 8-byte entries (relative offset u32, file position u32), one per `index.interval.bytes`
of batches, pointing at a batch's start. `.timeindex`: 12-byte entries (timestamp i64, relative
offset u32) recording, at the same interval, the largest timestamp so far and the batch where it
was reached. Both are append-only files mirrored in memory; lookups are binary searches.

An index is a cache of the segment: `load` refuses a file whose size is not a multiple of the
entry size, whose entries are not strictly increasing, or that points past the segment's end, and
the segment then rebuilds it by scanning its batches.

In memory the entries are machine-word arrays, not lists of Python ints: a list entry is a
pointer plus an int object, 159 bytes per entry of the two indexes where the files hold 20, so a
1 GiB segment of small batches had 42 MB of indexes in RAM (measured) — 4 % of the data a broker
holds, every segment's loaded at start. As arrays: 28 bytes per entry (absolute offsets and
timestamps as int64, positions as uint32), 7.5 MB for that segment; and after a clean shutdown
they are read only when a segment is first used (`_Index`).
"""

from __future__ import annotations

import bisect
import logging
import operator
import os
import struct
import sys
from array import array

OFFSET_ENTRY = struct.Struct(">II")
TIME_ENTRY = struct.Struct(">qI")

log = logging.getLogger(__name__)


class CorruptIndexError(Exception):
    pass


class _Index:
    """What both indexes share: the file, appends not yet written, and loading at first use.

    After a clean shutdown a segment opens its indexes with `open_lazily`, which reads only the
    file's last entry (what the segment needs to know its end); the entries are read and checked
    when first used, as Kafka does since KIP-263. A broker then starts without reading every
    segment's indexes, and holds only those of segments read since. A file found corrupt at
    that first use is handed to `on_corrupt` (the segment rebuilds both indexes from its
    batches); until then the index is empty, which is always correct (a lookup then scans from
    the segment's start)."""

    ENTRY: struct.Struct

    def __init__(self, path: str, base_offset: int):
        self.path = path
        self.base_offset = base_offset
        self._pending = bytearray()
        self._bound: int | None = None      # while not loaded: what `load` checks against
        self._file_entries = 0              # while not loaded: entries in the file
        self.on_corrupt = None              # called when a lazy load finds the file corrupt
        self._clear()

    def _clear(self) -> None:
        raise NotImplementedError

    def load(self, bound: int) -> None:
        raise NotImplementedError

    @property
    def loaded(self) -> bool:
        return self._bound is None

    def reset(self) -> None:
        """Forget the entries in memory (the segment rebuilds them)."""
        self._bound = None
        self._clear()

    def _open_lazily(self, bound: int) -> tuple | None:
        """Note the file for a load at first use; returns its last entry as stored (None for an
        empty file). CorruptIndexError for a missing file or one of an impossible size."""
        try:
            size = os.stat(self.path).st_size
        except FileNotFoundError:
            raise CorruptIndexError(f"{self.path}: missing") from None
        width = self.ENTRY.size
        if size % width:
            raise CorruptIndexError(f"{self.path}: size {size} is not a multiple of {width}")
        last = None
        if size:
            with open(self.path, "rb") as f:
                f.seek(size - width)
                last = self.ENTRY.unpack(f.read(width))
        self._clear()
        self._bound, self._file_entries = bound, size // width
        return last

    def _ensure(self) -> None:
        if self._bound is None:
            return
        bound, self._bound = self._bound, None
        try:
            self.load(bound)
        except CorruptIndexError as exc:
            log.warning("%s; rebuilding the segment's indexes", exc)
            self._clear()
            if self.on_corrupt is not None:
                self.on_corrupt()

    @property
    def offsets(self) -> array:
        """Absolute offsets, one per entry (both indexes have them)."""
        self._ensure()
        return self._offsets

    @property
    def entries(self) -> int:
        return self._file_entries if self._bound is not None else len(self._offsets)

    @property
    def size_in_bytes(self) -> int:
        return self.entries * self.ENTRY.size

    def flush(self, fsync: bool = False) -> None:
        if self._pending:
            with open(self.path, "ab") as f:
                f.write(self._pending)
                if fsync:
                    os.fsync(f.fileno())
            self._pending = bytearray()
        elif fsync and os.path.exists(self.path):
            _fsync_path(self.path)


class OffsetIndex(_Index):
    ENTRY = OFFSET_ENTRY

    def _clear(self) -> None:
        self._offsets = array("q")         # absolute offsets
        self._positions = array("I")       # file positions (a segment is < 4 GiB)

    @property
    def positions(self) -> array:
        self._ensure()
        return self._positions

    def open_lazily(self, segment_size: int) -> tuple[int, int] | None:
        """(offset, position) of the last entry, read alone; the rest at first use."""
        last = self._open_lazily(segment_size)
        if last is None:
            return None
        if last[1] >= segment_size:
            raise CorruptIndexError(f"{self.path}: last entry past the log")
        return self.base_offset + last[0], last[1]

    def load(self, segment_size: int) -> None:
        data = _read(self.path)
        if len(data) % OFFSET_ENTRY.size:
            raise CorruptIndexError(f"{self.path}: size {len(data)} is not a multiple of 8")
        words = array("I")          # (relative offset, position) pairs, big-endian on disk
        words.frombytes(data)
        if sys.byteorder == "little":
            words.byteswap()
        rel, positions = words[0::2], words[1::2]
        # checked with C loops (map): many segments' indexes may be read at once
        if not (all(map(operator.lt, rel, rel[1:]))
                and all(map(operator.lt, positions, positions[1:]))
                and (not positions or positions[-1] < segment_size)):
            raise CorruptIndexError(f"{self.path}: entries not increasing or past the log")
        self._offsets = array("q", map(self.base_offset.__add__, rel))
        self._positions = positions
        self._bound = None

    def append(self, offset: int, position: int) -> None:
        offsets, positions = self.offsets, self.positions
        if offsets and (offset <= offsets[-1] or position <= positions[-1]):
            return
        offsets.append(offset)
        positions.append(position)
        self._pending += OFFSET_ENTRY.pack(offset - self.base_offset, position)

    def entry_for(self, offset: int) -> int:
        """Index of the last entry at or before `offset`, -1 if none."""
        return bisect.bisect_right(self.offsets, offset) - 1

    def lookup(self, offset: int) -> int:
        """File position of the last indexed batch starting at or before `offset` (0 if none)."""
        i = self.entry_for(offset)
        return self._positions[i] if i >= 0 else 0

    def truncate_to_position(self, position: int) -> None:
        """Drop entries at or past `position` (after the segment was truncated there)."""
        i = bisect.bisect_left(self.positions, position)
        del self._offsets[i:], self._positions[i:]
        self.rewrite()

    def rewrite(self) -> None:
        data = b"".join(OFFSET_ENTRY.pack(o - self.base_offset, p)
                        for o, p in zip(self.offsets, self.positions))
        _atomic_write(self.path, data)
        self._pending = bytearray()


class TimeIndex(_Index):
    ENTRY = TIME_ENTRY

    def _clear(self) -> None:
        self._timestamps = array("q")
        self._offsets = array("q")

    @property
    def timestamps(self) -> array:
        self._ensure()
        return self._timestamps

    def open_lazily(self, next_offset: int) -> tuple[int, int] | None:
        """(timestamp, offset) of the last entry, read alone; the rest at first use."""
        last = self._open_lazily(next_offset)
        if last is None:
            return None
        if self.base_offset + last[1] >= next_offset:
            raise CorruptIndexError(f"{self.path}: last entry past the log")
        return last[0], self.base_offset + last[1]

    def load(self, next_offset: int) -> None:
        data = _read(self.path)
        if len(data) % TIME_ENTRY.size:
            raise CorruptIndexError(f"{self.path}: size {len(data)} is not a multiple of 12")
        timestamps, rel = _time_entries(data)
        offsets = array("q", map(self.base_offset.__add__, rel))
        if not (all(map(operator.lt, timestamps, timestamps[1:]))
                and all(map(operator.le, offsets, offsets[1:]))
                and (not offsets or offsets[-1] < next_offset)):
            raise CorruptIndexError(f"{self.path}: entries not increasing or past the log")
        self._timestamps, self._offsets = timestamps, offsets
        self._bound = None

    def maybe_append(self, max_timestamp: int, offset: int) -> None:
        timestamps = self.timestamps
        if timestamps and max_timestamp <= timestamps[-1]:
            return
        timestamps.append(max_timestamp)
        self._offsets.append(offset)
        self._pending += TIME_ENTRY.pack(max_timestamp, offset - self.base_offset)

    def lookup(self, timestamp: int) -> int:
        """An offset at or before the first batch with a timestamp >= `timestamp`."""
        i = bisect.bisect_left(self.timestamps, timestamp) - 1
        return self._offsets[i] if i >= 0 else self.base_offset

    def truncate_to_offset(self, next_offset: int) -> None:
        i = bisect.bisect_left(self.offsets, next_offset)
        del self._timestamps[i:], self._offsets[i:]
        data = b"".join(TIME_ENTRY.pack(t, o - self.base_offset)
                        for t, o in zip(self._timestamps, self._offsets))
        _atomic_write(self.path, data)
        self._pending = bytearray()

    def clear(self) -> None:
        self.reset()
        _atomic_write(self.path, b"")
        self._pending = bytearray()


def _time_entries(data: bytes) -> tuple[array, array]:
    """(timestamps, relative offsets) of `.timeindex` bytes (big-endian int64 + uint32 per
    entry), with C loops only: one tuple per entry was 4x slower for a 1 GiB segment."""
    if sys.byteorder != "little":
        entries = list(TIME_ENTRY.iter_unpack(data))
        return (array("q", map(operator.itemgetter(0), entries)),
                array("I", map(operator.itemgetter(1), entries)))
    words = array("I")
    words.frombytes(data)
    words.byteswap()                       # each entry: timestamp high, low, relative offset
    pairs = array("I", bytes(8 * (len(words) // 3)))
    pairs[0::2], pairs[1::2] = words[1::3], words[0::3]     # little-endian int64: low, high
    timestamps = array("q")
    timestamps.frombytes(pairs.tobytes())
    return timestamps, words[2::3]


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise CorruptIndexError(f"{path}: missing") from None


def _fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _atomic_write(path: str, data: bytes) -> None:
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
