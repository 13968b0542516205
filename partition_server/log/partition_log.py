"""A partition's log: an ordered list of segments in `<log dir>/<topic>-<partition>/`.

Files in the directory:
- `<base offset>.log/.index/.timeindex` — the segments (see `segment.py`);
- `leader-epoch-checkpoint` — the leader-epoch cache;
- `log-start-offset` — raised by DeleteRecords and retention;
- `recovery-point` — every offset below it was fsynced; recovery after a crash re-validates
  the segments from the one holding it onward;
- `.clean-shutdown` — written by `close()`, removed on open: present ⇒ skip the recovery scan;
- `<offset>.producer-snapshot` — producer state as of that offset (partition_server/txn/snapshot.py);
  any past the log end is deleted on truncation and after recovery (it covers records gone).

Appends go to the last (active) segment, rolled by size, age, or index size. The leader path
assigns offsets by patching each batch's base offset and partition leader epoch (outside the CRC);
with `message.timestamp.type=LogAppendTime` it also stamps the broker's time and recomputes the
CRC, as Kafka does. Reads return `FileRange`s of whole batches from one segment.
"""

from __future__ import annotations

import logging
import os
import shutil
import struct

from partition_server.log.config import NEVER, LogConfig
from partition_server.log.epoch_cache import LeaderEpochCache
from partition_server.log.file_cache import OpenFileCache
from partition_server.log.fsync import fsync_dir
from partition_server.log.record_validation import validate_records
from partition_server.log.results import AppendInfo, FetchDataInfo  # noqa: F401 (re-exported)
from partition_server.log.recovery import (CLEAN_SHUTDOWN, finish_interrupted_operations,
                                           open_segments)
from partition_server.log.retention import segments_past_retention
from partition_server.log.segment import CorruptSegmentError, FileRange, LogSegment
from partition_server.log.txn_index import AbortedTxn
from wire.errors import ErrorCode, KafkaError
from wire.records.batch import (CRC_START, TIMESTAMP_TYPE_MASK, RecordBatchHeader, decode_batch,
                                scan_valid_prefix, set_base_offset, set_partition_leader_epoch)
from wire.records.crc32c import crc32c

log = logging.getLogger(__name__)

CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
PRODUCER_SNAPSHOT_SUFFIX = ".producer-snapshot"

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3


def _error(code: ErrorCode, message: str) -> KafkaError:
    return KafkaError.from_code(code, message)


class PartitionLog:
    def __init__(self, directory: str, config: LogConfig | None = None, now_ms: int = 0,
                 files: OpenFileCache | None = None, lazy: bool = False):
        """`files`: the broker's bound on open segment files (file_cache.py); None shares a
        process-wide default. `lazy`: if the directory does not exist, create it and the first
        segment's file only on the first write (README.md, "Lazily created logs")."""
        self.directory = directory
        self.config = config or LogConfig()
        self.files = files
        self.materialized = not lazy or os.path.isdir(directory)
        if self.materialized:
            os.makedirs(directory, exist_ok=True)
        self.segments: list[LogSegment] = []
        self._append_time_floor: int | None = None     # see append_as_leader
        self.epoch_cache = LeaderEpochCache(os.path.join(directory, "leader-epoch-checkpoint"),
                                            deferred=not self.materialized)
        self.log_start_offset = self._read_offset_file("log-start-offset", 0)
        self.recovery_point = self._read_offset_file("recovery-point", 0)
        self.first_dirty_offset = self._read_offset_file(CLEANER_CHECKPOINT, 0)   # compaction
        self._last_flush_ms = now_ms
        self._graveyard: list[tuple[int, LogSegment]] = []
        self.generation = 0          # bumped when segments are removed; the cleaner aborts on it
        self.closed = False
        self.snapshot_offsets_at_open: list[int] | None = None
        self._open(now_ms)

    # -- opening and recovery ---------------------------------------------------------------------

    def _read_offset_file(self, name: str, default: int) -> int:
        if not self.materialized:
            return default
        try:
            with open(os.path.join(self.directory, name)) as f:
                return int(f.read().strip())
        except (FileNotFoundError, ValueError):
            return default

    def _write_offset_file(self, name: str, value: int, fsync: bool = True) -> None:
        path = os.path.join(self.directory, name)
        with open(path + ".tmp", "w") as f:
            f.write(str(value))
            f.flush()
            if fsync:
                os.fsync(f.fileno())
        os.replace(path + ".tmp", path)

    def _open(self, now_ms: int) -> None:
        if not self.materialized:        # a new, empty log: nothing on disk to open
            self.segments = [LogSegment(self.directory, 0, self.config.index_interval_bytes,
                                        self.files, lazy=True)]
            self.snapshot_offsets_at_open = []
            return
        # one directory listing serves the whole open (a broker opens thousands of logs at start)
        names = finish_interrupted_operations(self.directory)
        clean = CLEAN_SHUTDOWN in names
        self.segments = open_segments(self.directory, self.config.index_interval_bytes,
                                      self.recovery_point, clean, self.files, names)
        if clean:
            os.unlink(os.path.join(self.directory, CLEAN_SHUTDOWN))
        if not self.segments:
            self.segments.append(self._new_segment(self.log_start_offset))
        leo = self.log_end_offset
        # a crash may have cut the tail below a start offset raised by DeleteRecords
        self.log_start_offset = min(max(self.log_start_offset, self.segments[0].base_offset), leo)
        self.epoch_cache.truncate_from_end(leo)
        if not self.epoch_cache.epochs and leo > self.log_start_offset:
            self._rebuild_epoch_cache()
        self.recovery_point = min(self.recovery_point, leo) if not clean else leo
        # for the producer-state rebuild that follows (txn/snapshot.py), saving it a listing
        self.snapshot_offsets_at_open = drop_producer_snapshots_after(self.directory, leo, names)

    def _materialize(self) -> None:
        """A lazy log's first write: its directory, first segment's file, epochs so far."""
        if self.materialized:
            return
        os.makedirs(self.directory, exist_ok=True)
        self.active.create_file()
        self.materialized = True
        self.epoch_cache.write_deferred()

    def _new_segment(self, base_offset: int) -> LogSegment:
        return LogSegment(self.directory, base_offset, self.config.index_interval_bytes, self.files)

    def _rebuild_epoch_cache(self) -> None:
        for seg in self.segments:
            for h in seg.iter_headers(0):
                if h.partition_leader_epoch > self.epoch_cache.latest_epoch:
                    self.epoch_cache.assign(h.partition_leader_epoch, h.base_offset)

    # -- properties -------------------------------------------------------------------------------

    @property
    def active(self) -> LogSegment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self.active.next_offset

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    # -- appends ----------------------------------------------------------------------------------

    def _validate(self, records, leader: bool,
                  origin: str = "client") -> tuple[bytearray, list[RecordBatchHeader]]:
        # A Produce request's records are a writable view into the received frame (see
        # wire/connection.py): stamp offsets there instead of copying the batches once more.
        if isinstance(records, memoryview) and not records.readonly and records.contiguous:
            data = records.cast("B") if records.format != "B" else records
        else:
            data = bytearray(records)
        scan = scan_valid_prefix(data, check_offsets=not leader)
        if scan.reason is not None or not scan.headers:
            raise _error(ErrorCode.CORRUPT_MESSAGE, f"invalid record batch: {scan.reason or 'empty'}")
        for h in scan.headers:
            if h.size_in_bytes > self.config.max_message_bytes:
                raise _error(ErrorCode.MESSAGE_TOO_LARGE,
                             f"batch of {h.size_in_bytes} bytes exceeds max.message.bytes")
            if leader and (h.records_count <= 0 or h.records_count != h.last_offset_delta + 1):
                raise _error(ErrorCode.INVALID_RECORD, "record count does not match offset delta")
            if leader and h.is_control and origin != "coordinator":
                raise _error(ErrorCode.INVALID_RECORD, "clients may not write control batches")
        if len(data) > self.config.segment_bytes:
            raise _error(ErrorCode.RECORD_LIST_TOO_LARGE, "record set larger than segment.bytes")
        return data, scan.headers

    def append_as_leader(self, records, leader_epoch: int, now_ms: int,
                         origin: str = "client") -> AppendInfo:
        """Validate, stamp offsets and `leader_epoch`, append. `origin` is Kafka's AppendOrigin:
        "client" (Produce) may not write control batches, "coordinator" (transaction markers,
        group/txn coordinators) may."""
        data, headers = self._validate(records, leader=True, origin=origin)
        if origin == "client":          # the topic's per-record rules (KIP-467 record errors)
            validate_records(data, headers, self.config, self.directory, now_ms)
        offset = self.log_end_offset
        log_append = self.config.message_timestamp_type == "LogAppendTime"
        if log_append:
            # LogAppendTime never goes backwards within a partition, even when this broker's
            # wall clock is stepped back or it took over from a leader whose clock ran ahead
            # (fault F15): the stamp is at least the largest timestamp already in the log.
            if self._append_time_floor is None:
                # from the log (a new leader continues its predecessor's stamps), ignoring a
                # segment a day or more ahead: CreateTime records from the future written
                # before the topic switched to LogAppendTime must not pin every later stamp
                self._append_time_floor = max((seg.max_timestamp for seg in self.segments
                                               if seg.max_timestamp < now_ms + _DAY_MS),
                                              default=-1)
            now_ms = self._append_time_floor = max(now_ms, self._append_time_floor)
        n_records = 0
        for h in headers:
            set_base_offset(data, h.pos, offset)
            set_partition_leader_epoch(data, h.pos, leader_epoch)
            if log_append:
                _stamp_log_append_time(data, h.pos, now_ms)
            h.__init__(data, h.pos)          # re-read the patched header
            offset = h.next_offset
            n_records += h.records_count
        self._append(data, headers, now_ms)
        self.epoch_cache.assign(leader_epoch, headers[0].base_offset)
        return AppendInfo(headers[0].base_offset, headers[-1].last_offset,
                          max(h.max_timestamp for h in headers), now_ms if log_append else -1,
                          len(headers), n_records)

    def append_as_follower(self, records, now_ms: int = 0) -> AppendInfo | None:
        """Append batches that already carry their offsets (replication)."""
        if records is None or len(records) == 0:
            return None
        data, headers = self._validate(records, leader=False)
        if headers[0].base_offset < self.log_end_offset:
            raise _error(ErrorCode.OFFSET_OUT_OF_RANGE, f"follower append at {headers[0].base_offset}"
                         f" below log end offset {self.log_end_offset}")
        self._append(data, headers, now_ms)
        for h in headers:
            if h.partition_leader_epoch > self.epoch_cache.latest_epoch:
                self.epoch_cache.assign(h.partition_leader_epoch, h.base_offset)
        return AppendInfo(headers[0].base_offset, headers[-1].last_offset,
                          max(h.max_timestamp for h in headers), -1, len(headers),
                          sum(h.records_count for h in headers), headers)

    def _append(self, data: bytearray, headers: list[RecordBatchHeader], now_ms: int) -> None:
        self._materialize()
        self._maybe_roll(len(data), headers[0].base_offset, headers[-1].last_offset, now_ms)
        self.active.append(data, headers, now_ms)
        if self.active.unflushed_messages >= self.config.flush_messages:
            self._sync_appended()

    def _maybe_roll(self, incoming: int, next_base: int, last_offset: int, now_ms: int) -> None:
        seg = self.active
        if seg.size == 0:
            return
        too_big = seg.size + incoming > self.config.segment_bytes
        too_old = seg.created_ms is not None and now_ms - seg.created_ms >= self.config.segment_ms
        index_full = seg.index.size_in_bytes + 8 > self.config.segment_index_bytes
        # index entries hold offsets relative to the segment base in a u32 (Kafka rolls too)
        too_far = last_offset - seg.base_offset > 0x7FFFFFFF
        if too_big or too_old or index_full or too_far:
            self.roll(max(next_base, seg.next_offset))

    def roll(self, base_offset: int | None = None) -> LogSegment:
        old = self.active
        old.seal()
        new = self._new_segment(base_offset if base_offset is not None else old.next_offset)
        self.segments.append(new)
        fsync_dir(self.directory)        # the new file's name must survive a power loss too
        self.recovery_point = max(self.recovery_point, old.next_offset)
        self._write_offset_file("recovery-point", self.recovery_point)
        return new

    # -- reads ------------------------------------------------------------------------------------

    def read(self, from_offset: int, max_bytes: int, max_offset: int | None = None,
             min_one: bool = True) -> FetchDataInfo:
        leo = self.log_end_offset
        if from_offset < self.log_start_offset or from_offset > leo:
            raise _error(ErrorCode.OFFSET_OUT_OF_RANGE,
                         f"offset {from_offset} outside [{self.log_start_offset}, {leo}]")
        if from_offset == leo or (max_offset is not None and from_offset >= max_offset):
            return FetchDataInfo([], 0, from_offset, from_offset)
        i = self._segment_index_for(from_offset)
        for seg in self.segments[i:]:
            try:
                rng, next_offset = seg.read(from_offset, max_bytes, max_offset, min_one)
            except CorruptSegmentError as exc:
                raise _error(ErrorCode.CORRUPT_MESSAGE, str(exc)) from None
            if rng is not None:
                return FetchDataInfo([rng], rng.size, from_offset, next_offset)
            if max_offset is not None and seg.next_offset >= max_offset:
                break
        return FetchDataInfo([], 0, from_offset, from_offset)

    def _segment_index_for(self, offset: int) -> int:
        lo, hi = 0, len(self.segments) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.segments[mid].base_offset <= offset:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= `timestamp` (ListOffsets).

        Special targets: -1 latest → (log end offset, -1), -2 earliest → (log start offset, -1),
        -3 → the record with the largest timestamp. None when no record qualifies.
        """
        if timestamp == LATEST_TIMESTAMP:
            return self.log_end_offset, -1
        if timestamp == EARLIEST_TIMESTAMP:
            return self.log_start_offset, -1
        if timestamp == MAX_TIMESTAMP:
            seg = max(self.segments, key=lambda s: s.max_timestamp)
            if seg.max_timestamp < 0:
                return None
            return self._find_in_batch(seg, seg.offset_of_max_timestamp, seg.max_timestamp, exact=True)
        for seg in self.segments:
            if seg.max_timestamp < timestamp:
                continue
            start = seg.time_lookup(timestamp)
            for h in seg.iter_headers(seg.index_lookup(start)):
                if h.max_timestamp >= timestamp and h.last_offset >= self.log_start_offset:
                    return self._find_in_batch(seg, h.base_offset, timestamp, exact=False)
        return None

    def _find_in_batch(self, seg: LogSegment, batch_offset: int, timestamp: int, exact: bool):
        h = seg.translate_offset(batch_offset)
        data = seg.pread(h.size_in_bytes, h.pos)
        for rec in decode_batch(data).records:
            if rec.offset < self.log_start_offset:
                continue
            if (rec.timestamp == timestamp) if exact else (rec.timestamp >= timestamp):
                return rec.offset, rec.timestamp
        return None

    # -- epochs -----------------------------------------------------------------------------------

    def assign_epoch_start(self, epoch: int, start_offset: int, fsync: bool = True) -> None:
        """`fsync=False`: the caller syncs (the file system) before relying on it."""
        self.epoch_cache.assign(epoch, start_offset, fsync)

    def end_offset_for(self, epoch: int) -> tuple[int, int]:
        return self.epoch_cache.end_offset_for(epoch, self.log_end_offset)

    @property
    def latest_epoch(self) -> int:
        return self.epoch_cache.latest_epoch

    # -- aborted transactions (the segments' .txnindex) -------------------------------------------

    def add_aborted_txn(self, producer_id: int, first_offset: int, marker_offset: int,
                        last_stable_offset: int) -> None:
        """An ABORT marker at `marker_offset` closed the producer's transaction that began at
        `first_offset`: recorded in the index of the segment holding the marker."""
        if marker_offset < self.log_start_offset or marker_offset >= self.log_end_offset:
            return
        seg = self.segments[self._segment_index_for(marker_offset)]
        seg.txn_index.append(AbortedTxn(producer_id, first_offset, marker_offset,
                                        last_stable_offset))

    def collect_aborted_txns(self, start: int, upper: int) -> list[AbortedTxn]:
        """Aborted transactions with records in [start, upper), for a read_committed Fetch.
        Their markers are at or after `start`, possibly many segments later: search forward
        until an entry's last stable offset shows nothing earlier than `upper` was still open."""
        out: list[AbortedTxn] = []
        for seg in self.segments[self._segment_index_for(max(start, self.log_start_offset)):]:
            found, complete = seg.txn_index.collect(start, upper)
            out.extend(found)
            if complete:
                break
        return out

    def flush_txn_indexes(self) -> None:
        """fsync index entries not yet durable (before a producer-state snapshot says that
        everything below its offset is accounted for)."""
        for seg in self.segments:
            seg.txn_index.flush(fsync=True)

    # -- truncation and deletion ------------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Remove every record at `offset` or later (a diverged follower)."""
        if offset >= self.log_end_offset:
            # Nothing to cut, but an epoch entry may start at the log end: a leader that was
            # elected and failed before appending anything. Keep it and our answer for that epoch
            # disagrees with the real leader's forever (Kafka's UnifiedLog.truncateTo does this too).
            self.epoch_cache.truncate_from_end(self.log_end_offset)
            return
        if offset < self.log_start_offset:
            self.truncate_fully_and_start_at(offset)
            return
        self.generation += 1
        while len(self.segments) > 1 and self.active.base_offset >= offset:
            self._delete_segment(self.segments.pop(), now_ms=None)
        self.active.truncate_to(offset)
        drop_producer_snapshots_after(self.directory, self.log_end_offset)
        self.snapshot_offsets_at_open = None
        self.epoch_cache.truncate_from_end(self.log_end_offset)
        self._lower_first_dirty_offset(self.log_end_offset)
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        self._write_offset_file("recovery-point", self.recovery_point)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self._materialize()
        self.generation += 1
        for seg in self.segments:
            self._delete_segment(seg, now_ms=None)
        self.segments = [self._new_segment(offset)]
        drop_producer_snapshots_after(self.directory, -1)
        self.snapshot_offsets_at_open = None
        self.log_start_offset = offset
        self.recovery_point = offset
        self._lower_first_dirty_offset(offset)
        self.epoch_cache.clear()
        self._write_offset_file("log-start-offset", offset)
        self._write_offset_file("recovery-point", offset)

    def delete_records_before(self, offset: int, now_ms: int = 0) -> int:
        """Raise the log start offset to `offset` (DeleteRecords); returns the new start."""
        if offset > self.log_end_offset:
            raise _error(ErrorCode.OFFSET_OUT_OF_RANGE, f"offset {offset} beyond the log end")
        if offset > self.log_start_offset:
            self.log_start_offset = offset
            self._write_offset_file("log-start-offset", offset)
            while len(self.segments) > 1 and self.segments[1].base_offset <= offset:
                self.generation += 1
                self._delete_segment(self.segments.pop(0), now_ms)
            self.epoch_cache.truncate_from_start(offset)
        return self.log_start_offset

    def apply_retention(self, now_ms: int) -> int:
        """Delete closed segments past retention.ms / retention.bytes; returns how many."""
        deleted = segments_past_retention(self.segments, self.config, now_ms)
        if deleted:
            self.generation += 1
            doomed, self.segments = self.segments[:deleted], self.segments[deleted:]
            for seg in doomed:
                self._delete_segment(seg, now_ms)
            self.log_start_offset = max(self.log_start_offset, self.segments[0].base_offset)
            self._write_offset_file("log-start-offset", self.log_start_offset)
            self.epoch_cache.truncate_from_start(self.log_start_offset)
        self._reap(now_ms)
        return deleted

    def _lower_first_dirty_offset(self, offset: int) -> None:
        """Records rewritten after a truncation are new: the cleaner must look at them again."""
        if self.first_dirty_offset > offset:
            self.first_dirty_offset = offset
            self._write_offset_file(CLEANER_CHECKPOINT, offset)

    def _replace_cleaned_segment(self, old: LogSegment, now_ms: int) -> None:
        """The cleaner renamed a compacted copy over `old`'s file: reopen it in place."""
        old.detach()                  # before anything reopens the path (the copy now)
        new = self._new_segment(old.base_offset)
        new.recover()
        new.seal()
        new.next_offset = max(new.next_offset, old.next_offset)   # emptied tail keeps offsets
        self.segments[self.segments.index(old)] = new
        self._graveyard.append((now_ms + self.config.file_delete_delay_ms, old))

    def _delete_segment(self, seg: LogSegment, now_ms: int | None) -> None:
        seg.unlink()
        if now_ms is None:
            seg.close()
        else:
            self._graveyard.append((now_ms + self.config.file_delete_delay_ms, seg))

    def _reap(self, now_ms: int) -> None:
        keep = []
        for due, seg in self._graveyard:
            if now_ms >= due:
                seg.close()
            else:
                keep.append((due, seg))
        self._graveyard = keep

    # -- flushing and closing ---------------------------------------------------------------------

    def flush(self) -> None:
        """fsync everything appended so far (data and indexes) and checkpoint the recovery
        point, so a restart after a crash scans only what follows."""
        if not self.materialized:
            return                   # nothing was ever written
        for seg in self.segments:
            if seg.unflushed_messages or seg is self.active:
                seg.flush(fsync=True)
        self.recovery_point = self.log_end_offset
        self._write_offset_file("recovery-point", self.recovery_point)

    def _sync_appended(self) -> None:
        """flush.messages reached: fsync the data only. The recovery-point file is left stale
        on purpose (a lower value only makes recovery scan more, and skipping its rename and
        fsync keeps fsync-every-append at one fsync); indexes are rebuilt by that scan."""
        self.active.fsync()
        self.active.unflushed_messages = 0
        self.recovery_point = self.log_end_offset

    def maybe_flush(self, now_ms: int) -> None:
        """flush.ms: called periodically by the broker."""
        if self.config.flush_ms != NEVER and now_ms - self._last_flush_ms >= self.config.flush_ms:
            self._last_flush_ms = now_ms
            if self.active.unflushed_messages:
                self.flush()

    def close(self, sync: bool = True) -> None:
        """fsync, close every file and write the clean-shutdown marker; idempotent.

        `sync=False` writes everything out but fsyncs nothing and leaves the marker: a broker
        stopping with 10,000 logs syncs the file system once and then calls `mark_clean` on
        each (five fsyncs per log took longer than a stop may take)."""
        if self.closed:
            return
        self.closed = True
        if not self.materialized:
            # never written: nothing to keep (its epochs come again with the next image)
            self.active.close()
            return
        if sync:
            self.flush()
        else:
            for seg in self.segments:
                if seg.unflushed_messages or seg is self.active:
                    seg.flush(fsync=False)
            self.recovery_point = self.log_end_offset
            self._write_offset_file("recovery-point", self.recovery_point, fsync=False)
        for seg in self.segments:
            seg.close()
        for _, seg in self._graveyard:
            seg.close()
        self._graveyard = []
        if sync:
            self.mark_clean()

    def mark_clean(self) -> None:
        """The clean-shutdown marker: the next open trusts the files as they are. Only once
        everything written is durable (after close(), or close(sync=False) and a sync)."""
        if not self.materialized:
            return
        with open(os.path.join(self.directory, CLEAN_SHUTDOWN), "w"):
            pass

    def delete(self) -> None:
        self.generation += 1
        self.closed = True
        for seg in self.segments:
            seg.close()
        for _, seg in self._graveyard:
            seg.close()
        shutil.rmtree(self.directory, ignore_errors=True)


def drop_producer_snapshots_after(directory: str, offset: int,
                                  names: list[str] | None = None) -> list[int]:
    """Delete producer-state snapshots taken past `offset` (their records are gone); returns
    the offsets of those kept, sorted (`names`: the directory's listing, if just taken)."""
    if names is None:
        try:
            names = os.listdir(directory)
        except OSError:
            return []
    kept = []
    for name in names:
        stem = name[:-len(PRODUCER_SNAPSHOT_SUFFIX)]
        if name.endswith(PRODUCER_SNAPSHOT_SUFFIX) and stem.isdigit():
            if int(stem) > offset:
                os.unlink(os.path.join(directory, name))
            else:
                kept.append(int(stem))
    return sorted(kept)


_DAY_MS = 86_400_000
_ATTR = struct.Struct(">h")
_TS = struct.Struct(">q")


def _stamp_log_append_time(data: bytearray, pos: int, now_ms: int) -> None:
    """LogAppendTime: set the timestamp-type bit and max timestamp, then recompute the CRC."""
    attrs, = _ATTR.unpack_from(data, pos + 21)
    _ATTR.pack_into(data, pos + 21, attrs | TIMESTAMP_TYPE_MASK)
    _TS.pack_into(data, pos + 35, now_ms)
    size = struct.unpack_from(">i", data, pos + 8)[0] + 12
    struct.pack_into(">I", data, pos + 17, crc32c(memoryview(data)[pos + CRC_START:pos + size]))


__all__ = ["PartitionLog", "AppendInfo", "FetchDataInfo", "FileRange", "LogConfig"]
