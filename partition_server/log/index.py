"""Sparse offset and time indexes of one segment.

`.index`: 8-byte entries (relative offset u32, file position u32), one per `index.interval.bytes`
of batches, pointing at a batch's start. `.timeindex`: 12-byte entries (timestamp i64, relative
offset u32) recording, at the same interval, the largest timestamp so far and the batch where it
was reached. Both are append-only files mirrored in memory; lookups are binary searches.

An index is a cache of the segment: `load` refuses a file whose size is not a multiple of the
entry size, whose entries are not strictly increasing, or that points past the segment's end, and
the segment then rebuilds it by scanning its batches.
"""

from __future__ import annotations

import bisect
import os
import struct

OFFSET_ENTRY = struct.Struct(">II")
TIME_ENTRY = struct.Struct(">qI")


class CorruptIndexError(Exception):
    pass


class OffsetIndex:
    def __init__(self, path: str, base_offset: int):
        self.path = path
        self.base_offset = base_offset
        self.offsets: list[int] = []      # absolute offsets
        self.positions: list[int] = []
        self._pending = bytearray()

    @property
    def entries(self) -> int:
        return len(self.offsets)

    @property
    def size_in_bytes(self) -> int:
        return len(self.offsets) * OFFSET_ENTRY.size

    def load(self, segment_size: int) -> None:
        data = _read(self.path)
        if len(data) % OFFSET_ENTRY.size:
            raise CorruptIndexError(f"{self.path}: size {len(data)} is not a multiple of 8")
        last_off, last_pos = -1, -1
        for rel, pos in OFFSET_ENTRY.iter_unpack(data):
            if rel <= last_off or pos <= last_pos or pos >= segment_size:
                raise CorruptIndexError(f"{self.path}: entries not increasing or past the log")
            self.offsets.append(self.base_offset + rel)
            self.positions.append(pos)
            last_off, last_pos = rel, pos

    def append(self, offset: int, position: int) -> None:
        if self.offsets and (offset <= self.offsets[-1] or position <= self.positions[-1]):
            return
        self.offsets.append(offset)
        self.positions.append(position)
        self._pending += OFFSET_ENTRY.pack(offset - self.base_offset, position)

    def entry_for(self, offset: int) -> int:
        """Index of the last entry at or before `offset`, -1 if none."""
        return bisect.bisect_right(self.offsets, offset) - 1

    def lookup(self, offset: int) -> int:
        """File position of the last indexed batch starting at or before `offset` (0 if none)."""
        i = self.entry_for(offset)
        return self.positions[i] if i >= 0 else 0

    def flush(self, fsync: bool = False) -> None:
        if self._pending:
            with open(self.path, "ab") as f:
                f.write(self._pending)
                if fsync:
                    os.fsync(f.fileno())
            self._pending = bytearray()
        elif fsync and os.path.exists(self.path):
            _fsync_path(self.path)

    def truncate_to_position(self, position: int) -> None:
        """Drop entries at or past `position` (after the segment was truncated there)."""
        i = bisect.bisect_left(self.positions, position)
        del self.offsets[i:], self.positions[i:]
        self.rewrite()

    def rewrite(self) -> None:
        data = b"".join(OFFSET_ENTRY.pack(o - self.base_offset, p)
                        for o, p in zip(self.offsets, self.positions))
        _atomic_write(self.path, data)
        self._pending = bytearray()


class TimeIndex:
    def __init__(self, path: str, base_offset: int):
        self.path = path
        self.base_offset = base_offset
        self.timestamps: list[int] = []
        self.offsets: list[int] = []
        self._pending = bytearray()

    def load(self, next_offset: int) -> None:
        data = _read(self.path)
        if len(data) % TIME_ENTRY.size:
            raise CorruptIndexError(f"{self.path}: size {len(data)} is not a multiple of 12")
        last_ts, last_off = None, -1
        for ts, rel in TIME_ENTRY.iter_unpack(data):
            off = self.base_offset + rel
            if (last_ts is not None and ts <= last_ts) or off < last_off or off >= next_offset:
                raise CorruptIndexError(f"{self.path}: entries not increasing or past the log")
            self.timestamps.append(ts)
            self.offsets.append(off)
            last_ts, last_off = ts, off

    def maybe_append(self, max_timestamp: int, offset: int) -> None:
        if self.timestamps and max_timestamp <= self.timestamps[-1]:
            return
        self.timestamps.append(max_timestamp)
        self.offsets.append(offset)
        self._pending += TIME_ENTRY.pack(max_timestamp, offset - self.base_offset)

    def lookup(self, timestamp: int) -> int:
        """An offset at or before the first batch with a timestamp >= `timestamp`."""
        i = bisect.bisect_left(self.timestamps, timestamp) - 1
        return self.offsets[i] if i >= 0 else self.base_offset

    def flush(self, fsync: bool = False) -> None:
        if self._pending:
            with open(self.path, "ab") as f:
                f.write(self._pending)
                if fsync:
                    os.fsync(f.fileno())
            self._pending = bytearray()

    def truncate_to_offset(self, next_offset: int) -> None:
        i = bisect.bisect_left(self.offsets, next_offset)
        del self.timestamps[i:], self.offsets[i:]
        data = b"".join(TIME_ENTRY.pack(t, o - self.base_offset)
                        for t, o in zip(self.timestamps, self.offsets))
        _atomic_write(self.path, data)
        self._pending = bytearray()

    def clear(self) -> None:
        self.timestamps, self.offsets = [], []
        _atomic_write(self.path, b"")
        self._pending = bytearray()


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
