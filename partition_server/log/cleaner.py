"""Log compaction (`cleanup.policy=compact`) as a resumable step function.

States and transitions (one `LogCleaner` per compacted log; the broker calls `clean_step(budget,
now_ms)` between events, so appends are never blocked for more than one budget of work):

    IDLE ──(closed segments hold ≥ min.cleanable.dirty.ratio dirty bytes)──▶ BUILD_MAP
    BUILD_MAP ──(map full, or reached the active segment)──▶ CLEAN
    CLEAN ──(one closed segment rewritten into <base>.log.cleaned)──▶ swap ──▶ CLEAN (next)
    CLEAN ──(last segment of the pass swapped)──▶ IDLE, first dirty offset := map end
    any ──(log truncated / segments deleted meanwhile: generation changed)──▶ IDLE (abort)

Like Kafka's cleaner: the offset map (key digest → latest offset) covers the dirty range
[first dirty offset, map end); a pass rewrites every closed segment below the map end, keeping a
record unless a later record with its key sits in the mapped range. The map is bounded by
`log.cleaner.dedupe.buffer.size`; when it fills, the pass stops there and the next pass maps the
rest (several passes). Offsets are preserved: a rewritten batch keeps its base offset, last
offset delta, producer fields, leader epoch and max timestamp, and holds only the surviving
records, so its base offset may precede its first record.

Simplifications, on purpose: transactional and control batches are copied verbatim and their
keys never supersede older records (aborted data must not delete committed data); a batch left
empty is dropped unless it carries a producer id (the empty batch keeps idempotence state
rebuildable); tombstones (null value) are removed once older than `delete.retention.ms` by their
record timestamp; segments are rewritten one to one (no merging of small segments).

Swap, crash-safe: write and fsync `<base>.log.cleaned`; rename it to `<base>.log.swap` (the commit
point, directory fsynced); delete the segment's index files; rename `.swap` over `.log`. On open
(`recovery.finish_interrupted_operations`) a `.cleaned` file is deleted and a `.swap` file is
completed, indexes being rebuilt from the batches.
"""

from __future__ import annotations

import hashlib
import logging
import os
import struct

from partition_server.log.fsync import fsync_dir
from partition_server.log.segment import CorruptSegmentError, LogSegment
from wire.errors import DecodeError
from wire.records import compression as codecs
from wire.records.batch import (BATCH_HEADER_SIZE, CRC_START, Compression, Record,
                                RecordBatchBuilder, RecordBatchHeader, TimestampType,
                                decode_records)
from wire.records.crc32c import crc32c

log = logging.getLogger(__name__)

# Python memory per map entry (dict slot + 16-byte digest object + int), used to turn the
# dedupe buffer size into a number of entries; Kafka's Java map charges 24 bytes.
MAP_ENTRY_BYTES = 150
DEFAULT_DEDUPE_BUFFER_BYTES = 128 * 1024 * 1024
CHECKPOINT = "cleaner-offset-checkpoint"

_rename = os.replace      # a seam for tests that simulate a crash in the middle of a swap

_HEADER_TAIL = struct.Struct(">iqq")     # last_offset_delta, base_timestamp, max_timestamp


def key_digest(key: bytes) -> bytes:
    return hashlib.blake2b(key, digest_size=16).digest()


class LogCleaner:
    def __init__(self, log, dedupe_buffer_bytes: int = DEFAULT_DEDUPE_BUFFER_BYTES):
        self.log = log
        self.max_entries = max(1, dedupe_buffer_bytes // MAP_ENTRY_BYTES)
        self.state = "IDLE"
        self.passes = 0
        self.uncleanable: str | None = None
        self._reset()

    @property
    def first_dirty_offset(self) -> int:
        """Kept by the log (`cleaner-offset-checkpoint`), which lowers it on truncation."""
        return self.log.first_dirty_offset

    @first_dirty_offset.setter
    def first_dirty_offset(self, value: int) -> None:
        self.log.first_dirty_offset = value

    def _reset(self) -> None:
        self.state = "IDLE"
        self.offset_map: dict[bytes, int] = {}
        self.map_end = -1
        self._cursor = 0                  # next offset to map
        self._queue: list[LogSegment] = []
        self._out = None                  # (segment, file object, read position, changed)
        self._generation = self.log.generation

    # -- the step function ------------------------------------------------------------------------

    def clean_step(self, budget_bytes: int, now_ms: int) -> bool:
        """Do at most about `budget_bytes` of reading; returns True while work remains.

        A stored batch that fails its CRC or does not decode stops cleaning of this log for
        good (`uncleanable` says why, as Kafka marks such partitions): rewriting it would give
        corrupt data a fresh, valid CRC."""
        if self.uncleanable is not None:
            return False
        if self._generation != self.log.generation and self.state != "IDLE":
            self._abort()
        if self.state == "IDLE" and not self._start(now_ms):
            return False
        try:
            if self.state == "BUILD_MAP":
                self._build_map(budget_bytes)
            elif self.state == "CLEAN":
                self._clean(budget_bytes, now_ms)
        except (DecodeError, CorruptSegmentError) as exc:
            self._abort()
            self.uncleanable = str(exc)
            log.error("%s: compaction stopped: %s", self.log.directory, exc)
            return False
        return self.state != "IDLE"

    def run_until_idle(self, now_ms: int, budget_bytes: int = 1 << 20, max_steps: int = 100_000):
        """Drive passes to completion (tests, tools); bounded."""
        for _ in range(max_steps):
            if not self.clean_step(budget_bytes, now_ms):
                return
        raise RuntimeError("cleaner did not finish within max_steps")

    def dirty_ratio(self) -> float:
        closed = self.log.segments[:-1]
        total = sum(s.size for s in closed)
        if not total:
            return 0.0
        dirty = sum(s.size for s in closed if s.next_offset > self.first_dirty_offset)
        return dirty / total

    def _start(self, now_ms: int) -> bool:
        log = self.log
        if "compact" not in log.config.cleanup_policy or len(log.segments) < 2:
            return False
        self.first_dirty_offset = max(self.first_dirty_offset, log.log_start_offset)
        if self.first_dirty_offset >= log.active.base_offset:
            return False
        if self.dirty_ratio() < log.config.min_cleanable_dirty_ratio:
            return False
        self._reset()
        self._cursor = self.first_dirty_offset
        self.state = "BUILD_MAP"
        return True

    def _abort(self) -> None:
        if self._out is not None:
            seg, f = self._out[:2]
            f.close()
            _unlink(seg.path + ".cleaned")
        self._reset()

    # -- BUILD_MAP --------------------------------------------------------------------------------

    def _build_map(self, budget: int) -> None:
        log = self.log
        end = log.active.base_offset
        spent = 0
        while self._cursor < end and spent < budget:
            i = log._segment_index_for(self._cursor)
            seg = log.segments[i]
            if seg is log.active:
                break
            h = seg.translate_offset(self._cursor)
            if h is None:             # past this segment's last batch (a compacted tail)
                self._cursor = max(self._cursor, log.segments[i + 1].base_offset)
                continue
            data = _checked_read(seg, h)
            header = RecordBatchHeader(data)
            if not (header.is_control or header.is_transactional):
                if self.offset_map and len(self.offset_map) + header.records_count > self.max_entries:
                    break                  # full: this pass ends here, the next maps the rest
                for r in _records(data, header):
                    if r.key is not None:
                        self.offset_map[key_digest(r.key)] = r.offset
            self._cursor = header.next_offset
            spent += len(data)
        if self._cursor >= end or spent < budget:
            self._begin_clean()

    def _begin_clean(self) -> None:
        self.map_end = self._cursor
        self._queue = [s for s in self.log.segments[:-1] if s.base_offset < self.map_end]
        self.state = "CLEAN"

    # -- CLEAN ------------------------------------------------------------------------------------

    def _clean(self, budget: int, now_ms: int) -> None:
        if self._out is None:
            if not self._queue:
                self._finish_pass()
                return
            seg = self._queue.pop(0)
            self._out = (seg, open(seg.path + ".cleaned", "wb"), 0, False)
        seg, f, pos, changed = self._out
        spent = 0
        for h in seg.iter_headers(pos):
            if spent >= budget:
                break
            data = _checked_read(seg, h)
            kept = self._filter_batch(data, now_ms)
            if kept:
                f.write(kept)
            changed = changed or kept is not data
            pos = h.pos + h.size_in_bytes
            spent += len(data)
        else:
            pos = seg.size
        self._out = (seg, f, pos, changed)
        if pos >= seg.size:
            self._out = None
            if not changed:           # nothing to drop here: skip the rewrite and its fsyncs
                f.close()
                _unlink(seg.path + ".cleaned")
                return
            f.flush()
            os.fsync(f.fileno())
            f.close()
            self._swap(seg, now_ms)

    def _filter_batch(self, data: bytes, now_ms: int) -> bytes | None:
        h = RecordBatchHeader(data)
        if h.is_control or h.is_transactional or h.base_offset >= self.map_end:
            return data
        records = _records(data, h)
        keep = [r for r in records if self._survives(r, now_ms)]
        if len(keep) == len(records):
            return data
        if not keep:
            return _empty_batch(h) if h.producer_id >= 0 else None
        return _rebuild(h, keep)

    def _survives(self, r, now_ms: int) -> bool:
        if r.offset >= self.map_end or r.key is None:
            return True
        latest = self.offset_map.get(key_digest(r.key), -1)
        if latest > r.offset:
            return False
        if r.value is None:           # tombstone: kept for delete.retention.ms, then removed
            return now_ms - r.timestamp <= self.log.config.delete_retention_ms
        return True

    def _swap(self, seg: LogSegment, now_ms: int) -> None:
        """Replace `seg` by its cleaned copy, crash-safely (see the module docstring)."""
        directory = self.log.directory
        _rename(seg.path + ".cleaned", seg.path + ".swap")
        fsync_dir(directory)
        _unlink(seg.index.path)
        _unlink(seg.time_index.path)
        seg.detach()         # its open fd (if any) keeps the old inode for sends in progress
        _rename(seg.path + ".swap", seg.path)
        fsync_dir(directory)
        self.log._replace_cleaned_segment(seg, now_ms)

    def _finish_pass(self) -> None:
        self.first_dirty_offset = self.map_end
        self.log._write_offset_file(CHECKPOINT, self.first_dirty_offset)
        self.passes += 1
        self._reset()


# -- batch helpers ---------------------------------------------------------------------------------

def _checked_read(seg: LogSegment, h: RecordBatchHeader) -> bytes:
    data = seg.pread(h.size_in_bytes, h.pos)
    reason = RecordBatchHeader(data).invalid_reason()
    if reason is not None:
        raise CorruptSegmentError(f"{seg.path}: batch at position {h.pos}: {reason}")
    return data


def _records(data: bytes, h: RecordBatchHeader):
    """Records with their own timestamps (also under LogAppendTime, so a rebuild keeps them)."""
    body = memoryview(data)[BATCH_HEADER_SIZE:h.size_in_bytes]
    if h.compression != Compression.NONE:
        body = codecs.decompress(h.compression, body)
    return decode_records(body, h.records_count, h.base_offset, h.base_timestamp, None)


def _rebuild(h: RecordBatchHeader, keep) -> bytes:
    b = RecordBatchBuilder(base_offset=h.base_offset,
                           partition_leader_epoch=h.partition_leader_epoch,
                           compression=h.compression, producer_id=h.producer_id,
                           producer_epoch=h.producer_epoch, base_sequence=h.base_sequence,
                           base_timestamp=h.base_timestamp,
                           timestamp_type=TimestampType(h.timestamp_type))
    for r in keep:
        b.append_record(Record(r.offset - h.base_offset, r.timestamp - h.base_timestamp,
                               r.key, r.value, r.headers))
    return _restore_tail(bytearray(b.build()), h)


def _empty_batch(h: RecordBatchHeader) -> bytes:
    """A zero-record batch that keeps the producer fields and offsets (Kafka does the same)."""
    out = bytearray(h.bytes()[:BATCH_HEADER_SIZE])
    struct.pack_into(">i", out, 8, BATCH_HEADER_SIZE - 12)
    struct.pack_into(">h", out, 21, h.attributes & ~0x07)       # no body: no compression
    struct.pack_into(">i", out, 57, 0)
    return _restore_tail(out, h)


def _restore_tail(out: bytearray, h: RecordBatchHeader) -> bytes:
    """Keep the original last offset delta and max timestamp (producer state, time index)."""
    _HEADER_TAIL.pack_into(out, 23, h.last_offset_delta, h.base_timestamp, h.max_timestamp)
    struct.pack_into(">I", out, 17, crc32c(memoryview(out)[CRC_START:]))
    return bytes(out)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass

