"""One log segment: `<base offset>.log` with its `.index`, `.timeindex` and `.txnindex`.

Batches are appended verbatim. The segment knows its size, next offset and largest timestamp,
opens its `.log` through the broker's bounded `OpenFileCache` (file_cache.py: a segment of an
idle partition may have its file closed and reopened on the next use), hands out reads as
`FileRange`s (for `os.sendfile`) and rebuilds its indexes from the batches when they are missing
or corrupt. Recovery (`recover`) re-validates every batch (length,
magic, CRC, increasing offsets) and truncates at the first bad one, so what remains is always a
prefix of what was appended.
"""

from __future__ import annotations

import bisect
import dataclasses
import logging
import os
import time

from common.request_metrics import Histogram
from partition_server.log import file_cache
from partition_server.log.file_cache import OpenFileCache, SegmentFile
from partition_server.log.index import CorruptIndexError, OffsetIndex, TimeIndex
from partition_server.log.txn_index import TransactionIndex
from wire.records.batch import (BATCH_HEADER_SIZE, LOG_OVERHEAD, RecordBatchHeader,
                                scan_valid_prefix)

log = logging.getLogger(__name__)
# fsyncs of segment data, process-wide (Kafka's LogFlushRateAndTimeMs; a process hosts one
# broker). Also called from log-opening threads: a rare lost increment is acceptable there.
FLUSHES = Histogram()

READ_CHUNK = 4096
HEADER_READ = 128
# Batches appended last whose places a read finds without touching the file (`_tail`): a
# follower, or a consumer at the end of the log, fetches what was just appended, and over many
# partitions the index pread plus header preads per fetched partition were ~10 % of a broker's
# CPU while producing over 1,000 partitions (bench/README.md).
TAIL_BATCHES = 64


def _last_offset(entry: tuple[int, int, int, int]) -> int:
    return entry[1]


class CorruptSegmentError(Exception):
    """A stored batch failed its CRC or structure check; the log maps it to CORRUPT_MESSAGE."""


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


@dataclasses.dataclass(frozen=True)
class FileRange:
    """`size` bytes of a segment at `position`: sent with os.sendfile, or read with pread.

    It names the segment, not a descriptor: the file may be closed (evicted) and reopened between
    the read that planned the range and the send. A sender holds `open_file()`'s result while it
    uses the fd; a segment deleted or replaced meanwhile raises `SegmentGoneError` (an OSError)
    unless its file was still open then (kept for `file.delete.delay.ms`)."""
    segment: "LogSegment"
    position: int
    size: int

    def open_file(self) -> SegmentFile:
        return self.segment.open_file()

    def read(self) -> bytes:
        f = self.open_file()
        return os.pread(f.fd, self.size, self.position)


class LogSegment:
    def __init__(self, directory: str, base_offset: int, index_interval_bytes: int = 4096,
                 files: OpenFileCache | None = None, lazy: bool = False):
        """`lazy`: an empty segment whose file is not created yet (`create_file` does it)."""
        self.directory = directory
        self.base_offset = base_offset
        stem = os.path.join(directory, segment_name(base_offset))
        self.path = stem + ".log"
        self.index = OffsetIndex(stem + ".index", base_offset)
        self.time_index = TimeIndex(stem + ".timeindex", base_offset)
        # an index opened lazily (load_trusted) and found corrupt at first use: rebuild both
        self.index.on_corrupt = self.time_index.on_corrupt = self.rebuild_indexes
        self.txn_index = TransactionIndex(stem + ".txnindex")   # aborted transactions
        self.index_interval_bytes = index_interval_bytes
        self.files = files if files is not None else file_cache.DEFAULT
        self._file: SegmentFile | None = None      # owned by `files` (under its lock)
        self.gone = False             # closed, deleted or replaced: never reopen by path
        self.size = 0 if lazy else os.fstat(self.files.acquire(self, create=True).fd).st_size
        if self.size == 0 and not lazy:
            self.txn_index.truncate_to(base_offset)     # a leftover of a deleted namesake
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = base_offset
        self.first_batch_timestamp: int | None = None
        self.created_ms: int | None = None
        self._bytes_since_index = 0
        self.unflushed_messages = 0
        self.closed = False
        self.detached = False         # replaced by a cleaned copy: close() only drops the fd
        self.unlinked = False         # files removed: close() must not write indexes back
        # Bytes [0, verified_position) passed a CRC check in this process (recovery scan or
        # append validation, or a read); reads verify anything beyond it once. See README.
        self.verified_position = 0
        self.appended_from = self.size   # bytes from here on were appended (validated) by us
        # (base offset, last offset, position, size) of the last batches appended, contiguous
        # and ending at `size`; emptied by anything else that changes the file
        self._tail: list[tuple[int, int, int, int]] = []

    # -- the file ---------------------------------------------------------------------------------

    def create_file(self) -> None:
        """Create the file of a `lazy` segment (its directory exists now)."""
        self.files.acquire(self, create=True)

    def open_file(self) -> SegmentFile:
        """The `.log`'s open file (reopened if it was evicted): hold it while using its fd."""
        return self.files.acquire(self)

    @property
    def fd(self) -> int:
        """For tests and tools only: valid until the next call into any log (an eviction may
        close it). Log code holds `open_file()` instead."""
        return self.open_file().fd

    def pread(self, size: int, position: int) -> bytes:
        f = self.open_file()
        return os.pread(f.fd, size, position)

    def fsync(self) -> None:
        f = self.open_file()
        started = time.perf_counter()
        os.fsync(f.fd)
        FLUSHES.observe_seconds(time.perf_counter() - started)

    # -- opening ----------------------------------------------------------------------------------

    def load_trusted(self) -> None:
        """After a clean shutdown: take the indexes as written, reading only their last entries
        (the rest when first used, index.py); read only the batches after the last entry."""
        if self.size == 0 and not (os.path.exists(self.index.path)
                                   or os.path.exists(self.time_index.path)):
            return      # empty, never indexed: nothing to rebuild (most of 30,000 partitions)
        try:
            last = self.index.open_lazily(self.size)
            last_time = self.time_index.open_lazily(1 << 62)
        except CorruptIndexError as exc:
            log.warning("%s; rebuilding from %s", exc, self.path)
            self.recover()
            return
        start = 0
        if last is not None:
            start = last[1]
            if not self._starts_batch(last[0], start):
                self.rebuild_indexes()          # also finds max_timestamp from the batches
                start, last_time = self.index.lookup(1 << 62), None
        last_h = None
        for h in self.iter_headers(start):
            last_h = h
            if self.first_batch_timestamp is None:
                self.first_batch_timestamp = h.max_timestamp
        if last_h is not None:
            self.next_offset = last_h.next_offset
        if last_time is not None:
            self.max_timestamp, self.offset_of_max_timestamp = last_time
        if last_h is not None and last_h.max_timestamp > self.max_timestamp:
            self.max_timestamp, self.offset_of_max_timestamp = last_h.max_timestamp, \
                last_h.base_offset

    def recover(self, expected_base: int | None = None) -> int:
        """Re-validate every batch, rebuild both indexes, truncate a bad tail; returns bytes cut."""
        self._tail = []
        self.index.reset()
        self.time_index.reset()
        self.max_timestamp, self.offset_of_max_timestamp = -1, self.base_offset
        self.next_offset = self.base_offset
        self._bytes_since_index = 0
        pos = 0
        expected = self.base_offset if expected_base is None else expected_base
        reason = None
        f = self.open_file()
        while pos < self.size:
            head = os.pread(f.fd, BATCH_HEADER_SIZE, pos)
            if len(head) < BATCH_HEADER_SIZE:
                reason = "torn batch header"
                break
            h = RecordBatchHeader(head)
            if h.batch_length < BATCH_HEADER_SIZE - LOG_OVERHEAD or pos + h.size_in_bytes > self.size:
                reason = "torn or oversized batch"
                break
            whole = RecordBatchHeader(os.pread(f.fd, h.size_in_bytes, pos))
            bad = whole.invalid_reason()
            if bad is None and whole.base_offset < expected:
                bad = f"offset {whole.base_offset} below {expected}"
            if bad is not None:
                reason = bad
                break
            self._track(whole, pos)
            expected = whole.next_offset
            pos += whole.size_in_bytes
        cut = self.size - pos
        if cut:
            log.warning("%s: truncating %d bytes at position %d (%s)", self.path, cut, pos, reason)
            os.ftruncate(f.fd, pos)
            self.size = pos
        self.index.rewrite()
        self.time_index.truncate_to_offset(1 << 62)
        self.txn_index.truncate_to(self.next_offset)    # aborts whose marker did not survive
        self.verified_position = self.size
        return cut

    def rebuild_indexes(self) -> None:
        """Rebuild both indexes from batch headers, without truncating (a trusted segment whose
        index proved wrong); CRCs are left to the read-time check."""
        log.warning("%s: index inconsistent with the log; rebuilding", self.path)
        self.index.reset()
        self.time_index.reset()
        self.max_timestamp, self.offset_of_max_timestamp = -1, self.base_offset
        self.first_batch_timestamp = None
        self._bytes_since_index = 0
        for h in self.iter_headers(0):
            self._track(h, h.pos)
        self.index.rewrite()
        if self.max_timestamp >= 0:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        self.time_index.truncate_to_offset(1 << 62)

    def index_lookup(self, offset: int) -> int:
        """`index.lookup`, checked: the entry must point at a batch starting at its offset."""
        i = self.index.entry_for(offset)
        if i < 0:
            return 0
        pos = self.index.positions[i]
        if not self._starts_batch(self.index.offsets[i], pos):
            self.rebuild_indexes()
            return self.index.lookup(offset)
        return pos

    def _starts_batch(self, offset: int, pos: int) -> bool:
        """Whether a v2 batch with base offset `offset` starts at `pos` (an index entry's check)."""
        head = self.pread(17, pos)
        return len(head) >= 17 and int.from_bytes(head[:8], "big", signed=True) == offset \
            and head[16] == 2

    def time_lookup(self, timestamp: int) -> int:
        """`time_index.lookup`, checked: the entry's batch must carry the entry's timestamp."""
        ti = self.time_index
        i = bisect.bisect_left(ti.timestamps, timestamp) - 1
        if i < 0:
            return self.base_offset
        h = self.translate_offset(ti.offsets[i])
        if h is None or h.base_offset != ti.offsets[i] or h.max_timestamp != ti.timestamps[i]:
            self.rebuild_indexes()
            return ti.lookup(timestamp)
        return ti.offsets[i]

    # -- appending --------------------------------------------------------------------------------

    def _track(self, h: RecordBatchHeader, position: int) -> None:
        """Update indexes and bounds for a batch now at `position`."""
        if self._bytes_since_index >= self.index_interval_bytes or not self.index.entries and position == 0:
            self.index.append(h.base_offset, position)
            self._bytes_since_index = 0
            if self.max_timestamp >= 0:
                self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        self._bytes_since_index += h.size_in_bytes
        if h.max_timestamp > self.max_timestamp:
            self.max_timestamp, self.offset_of_max_timestamp = h.max_timestamp, h.base_offset
        if self.first_batch_timestamp is None:
            self.first_batch_timestamp = h.max_timestamp
        self.next_offset = h.next_offset

    def append(self, data, headers: list[RecordBatchHeader], now_ms: int) -> int:
        """Write `data` (whole batches, offsets already final) at the end; returns its position."""
        position = self.size
        view = memoryview(data)
        written = 0
        f = self.open_file()
        while written < len(view):
            written += os.pwrite(f.fd, view[written:], position + written)
        tail = self._tail
        if tail and tail[-1][2] + tail[-1][3] != position:
            tail.clear()                  # not contiguous (cannot happen: appends go at the end)
        for h in headers:
            self._track(h, position + h.pos)
            self.unflushed_messages += h.records_count
            tail.append((h.base_offset, h.last_offset, position + h.pos, h.size_in_bytes))
        if len(tail) > 2 * TAIL_BATCHES:
            del tail[:-TAIL_BATCHES]
        if self.verified_position == position:
            self.verified_position = position + len(view)     # validated by the appender
        self.size += len(view)
        if self.created_ms is None:
            self.created_ms = now_ms
        return position

    # -- reading ----------------------------------------------------------------------------------

    def iter_headers(self, position: int = 0):
        """Headers of the batches from `position` (a batch start) to the end.

        Reads only headers, never whole large batches, so a fetch served by sendfile does not
        copy its bytes into user space after all: small batches come several per 4 KiB read,
        batches larger than that cost one 128-byte read each."""
        chunk_size = READ_CHUNK
        f = self.open_file() if position + BATCH_HEADER_SIZE <= self.size else None
        while position + BATCH_HEADER_SIZE <= self.size:
            chunk = os.pread(f.fd, min(chunk_size, self.size - position), position)
            offset_in_chunk = 0
            while offset_in_chunk + BATCH_HEADER_SIZE <= len(chunk):
                h = RecordBatchHeader(chunk, offset_in_chunk)
                if h.batch_length < BATCH_HEADER_SIZE - LOG_OVERHEAD:
                    return
                h.pos = position + offset_in_chunk       # file position of this batch
                yield h
                offset_in_chunk += h.size_in_bytes
            if offset_in_chunk == 0:
                return                                   # cannot happen for a sound file
            chunk_size = HEADER_READ if offset_in_chunk > READ_CHUNK else READ_CHUNK
            position += offset_in_chunk

    def translate_offset(self, offset: int):
        """The first batch whose last offset is >= `offset`, or None."""
        for h in self.iter_headers(self.index_lookup(offset)):
            if h.last_offset >= offset:
                return h
        return None

    def read(self, offset: int, max_bytes: int, max_offset: int | None, min_one: bool):
        """Whole batches from the one holding `offset`: (FileRange | None, next offset after
        the last batch returned)."""
        tail = self._tail
        if tail and offset >= tail[0][0] and tail[-1][2] + tail[-1][3] == self.size:
            # every batch before the tail ends below `offset`: the tail alone answers
            i = bisect.bisect_left(tail, offset, key=_last_offset)
            batches = ((last, pos, size) for _, last, pos, size in tail[i:])
        else:
            batches = ((h.last_offset, h.pos, h.size_in_bytes)
                       for h in self.iter_headers(self.index_lookup(offset)))
        start = None
        size = 0
        next_offset = offset
        for last_offset, pos, batch_size in batches:
            if last_offset < offset:
                continue
            if max_offset is not None and last_offset >= max_offset:
                break
            if start is None:
                start = pos
            if size + batch_size > max_bytes and not (min_one and size == 0):
                break
            size += batch_size
            next_offset = last_offset + 1
            if size >= max_bytes:
                break
        if start is None or size == 0:
            return None, offset
        if start + size > self.verified_position and start < self.appended_from:
            self._verify(start, size)
        return FileRange(self, start, size), next_offset

    def _verify(self, start: int, size: int) -> None:
        """CRC-check batches about to be served that no check in this process has covered."""
        data = self.pread(size, start)
        scan = scan_valid_prefix(data, check_offsets=True)
        if scan.reason is not None:
            raise CorruptSegmentError(
                f"{self.path}: corrupt batch at position {start + scan.valid_bytes}: {scan.reason}")
        if start <= self.verified_position:
            self.verified_position = start + size

    # -- truncation, flushing, closing ------------------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Remove every batch holding an offset >= `offset`; returns bytes removed."""
        self._tail = []
        h = self.translate_offset(offset)
        if h is None:
            # nothing stored at or past `offset` (a compacted tail): only the end moves back
            self.next_offset = min(self.next_offset, max(offset, self.base_offset))
            return 0
        cut_at = h.pos
        removed = self.size - cut_at
        f = self.open_file()
        os.ftruncate(f.fd, cut_at)
        self.size = cut_at
        self.index.truncate_to_position(cut_at)
        self.verified_position = min(self.verified_position, cut_at)
        self.appended_from = min(self.appended_from, cut_at)
        self.time_index.truncate_to_offset(h.base_offset)
        self.txn_index.truncate_to(h.base_offset)
        self.next_offset = h.base_offset
        self._recompute_bounds()
        return removed

    def _recompute_bounds(self) -> None:
        self.max_timestamp, self.offset_of_max_timestamp = -1, self.base_offset
        self.first_batch_timestamp = None
        for h in self.iter_headers(0):
            if self.first_batch_timestamp is None:
                self.first_batch_timestamp = h.max_timestamp
            if h.max_timestamp > self.max_timestamp:
                self.max_timestamp, self.offset_of_max_timestamp = h.max_timestamp, h.base_offset
        self._bytes_since_index = self.size - (self.index.positions[-1] if self.index.entries else 0)

    def flush(self, fsync: bool) -> None:
        if fsync:
            self.fsync()
        self.index.flush(fsync)
        self.time_index.flush(fsync)
        self.txn_index.flush(fsync)
        self.unflushed_messages = 0

    def seal(self) -> None:
        """The segment stops being active: record its final max timestamp and fsync it."""
        if self.max_timestamp >= 0:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        self.flush(fsync=True)

    def close(self) -> None:
        """Write pending index entries and let go of the file (closed once no send holds it)."""
        if self.closed:
            return
        self.closed = True
        if not (self.detached or self.unlinked):    # a removed segment's indexes stay removed
            self.index.flush()
            if self.max_timestamp >= 0:
                self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self.time_index.flush()
            self.txn_index.flush()
        self.files.release(self)

    def abandon(self) -> None:
        """A crash, for tests and the simulation: drop the file without writing anything."""
        self.closed = True
        self.files.release(self)

    def detach(self) -> None:
        """A cleaned copy was renamed over our file: keep the open fd (if any) for sends in
        progress, never reopen the path (it names the copy now); close() only drops the fd."""
        self.detached = True
        self.files.pin(self)

    def unlink(self) -> None:
        """Remove the files; an open fd stays open so in-flight sendfiles finish (close later)."""
        self.files.pin(self)
        self.unlinked = True
        for path in (self.path, self.index.path, self.time_index.path, self.txn_index.path):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
