"""The controller's Raft journal, fsynced: pysyncobj's own FileJournal never syncs (an mmap it
flushes on close), so a power loss of a majority of controllers could lose committed metadata.

Files in the controller's metadata directory:

    raft.log        header, then records: u32 length, u32 crc32, u64 index, u64 term, command
    raft.log.meta   JSON: current term, voted-for, commit index, this directory's id, the
                    directory ids of peers (quorum/directory_ids.py); replaced atomically
    raft.dump       pysyncobj's snapshot, written by its Serializer (made durable below)

Ordering (what counts toward a commit is on disk first):
- `add` only writes (page cache) and numbers the write (`seq`, one per add or truncation);
  `start_sync` hands one fsync for every write so far to the journal's sync thread
  (quorum/syncer.py) and `collect_synced` moves `durable_seq` once it returned: group commit,
  with pysyncobj's thread appending, sending and receiving while the disk works. Raft never sees
  an entry as durable before that: the Raft port holds each outgoing ack and vote until the
  writes made before it was sent are durable, and the leader counts itself toward a commit only
  up to `durable_index()` (quorum/durable_port.py, RaftQuorum). So no majority can count an
  entry that is not on a majority of disks. `sync` is the blocking form (compaction, shutdown).
- Entries found in the file at start-up are fsynced once before anything else: a process that
  was killed (not a power loss) left them in the page cache, and a leader resending them would
  otherwise be acknowledged without a write of its own.
- Term and vote (`setCurrentTerm`) are written and fsynced (file and directory) before the call
  returns: pysyncobj sends the vote right after.
- The commit index is saved at most once a second, never beyond the durable entries, and is
  clamped to the journal on load.
- Truncation of a suffix happens only where a new entry differs from the one on disk (a
  follower overwritten by a new leader: an ftruncate, synced with the next `sync`), not where
  pysyncobj merely drops entries a leader is resending (`deleteEntriesFrom`); compaction (`deleteEntriesTo`, after pysyncobj wrote its snapshot) and
  `clear` (a snapshot installed from the leader) rewrite the kept entries into a new file,
  fsync it and rename it over, syncing the directory.
- A torn tail (power loss mid-write: short record or bad CRC) is cut off at load.

pysyncobj builds its journal with the module-level `createJournal(conf.journalFile)` inside
`SyncObj.__init__`; `install()` wraps that name so a journalFile that is a DurableJournal is
used as is (any other value goes to pysyncobj's own). It also makes the snapshot writer's rename
durable (fsync the file, rename, fsync the directory) — in the thread that writes snapshots
(snapshot_writer.py), and for a snapshot received from the leader, before pysyncobj drops the
entries the snapshot replaces.
"""

from __future__ import annotations

import bisect
import json
import logging
import os
import struct
import uuid
import zlib
from typing import Callable

from pysyncobj import journal as _pysyncobj_journal
from pysyncobj import serializer as _pysyncobj_serializer
from pysyncobj import syncobj as _pysyncobj_syncobj
from pysyncobj.pickle import to_bytes

from metadata_quorum.quorum.syncer import SyncJob, SyncWorker

log = logging.getLogger(__name__)

MAGIC = b"RAFTKA-RAFT-LOG\x00"
VERSION = 1
HEADER = MAGIC + struct.pack("<I", VERSION)
RECORD_HEAD = struct.Struct("<IIQQ")        # length of (index, term, command), crc32, index, term
MAX_RECORD_BYTES = 64 * 1024 * 1024         # far above any metadata entry: a length past it is torn


class Disk:
    """The two calls durability rests on; tests pass a shim that records what was synced."""

    instant = False         # True: fsync costs nothing, so it is never handed to a thread

    def fsync(self, fd: int) -> None:
        # fdatasync: the data and what reading it back needs (the file's size after an append),
        # not timestamps, which nothing here reads; on this project's test disk (ext4 on
        # virtio) it costs the same as fsync, preallocated or not (bench/README.md)
        os.fdatasync(fd)

    def fsync_dir(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class NoSyncDisk(Disk):
    """`raftka.controller.raft.fsync=false`: benchmarks only (the cost of fsync side by side).
    Syncs complete at once, on the caller's thread (no sync thread to hand them to)."""

    instant = True

    def fsync(self, fd: int) -> None:
        pass

    def fsync_dir(self, path: str) -> None:
        pass


def durable_replace(src: str, dst: str, disk: Disk | None = None) -> None:
    """Rename `src` over `dst` so that after a power loss `dst` is the old or the whole new file."""
    disk = disk or Disk()
    fd = os.open(src, os.O_RDONLY)
    try:
        disk.fsync(fd)
    finally:
        os.close(fd)
    os.replace(src, dst)
    disk.fsync_dir(os.path.dirname(os.path.abspath(dst)))


def write_durably(path: str, data: bytes, disk: Disk) -> None:
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    durable_replace(tmp, path, disk)


def encode_entry(command, idx: int, term: int) -> bytes:
    body = struct.pack("<QQ", idx, term) + to_bytes(command)
    return struct.pack("<II", len(body), zlib.crc32(body)) + body


def read_entries(data: bytes) -> tuple[list, list[int], int]:
    """(entries, their file offsets, the length of the valid prefix) of a journal's bytes."""
    entries, offsets = [], []
    pos = len(HEADER)
    while pos + RECORD_HEAD.size <= len(data):
        length, crc = struct.unpack_from("<II", data, pos)
        end = pos + 8 + length
        if length < 16 or length > MAX_RECORD_BYTES or end > len(data):
            break
        body = data[pos + 8:end]
        if zlib.crc32(body) != crc:
            break
        idx, term = struct.unpack_from("<QQ", body)
        entries.append((bytes(body[16:]), idx, term))
        offsets.append(pos)
        pos = end
    return entries, offsets, pos


class DurableJournal(_pysyncobj_journal.Journal):
    """pysyncobj's Journal interface over an append-only, CRC-checked, fsynced file."""

    def __init__(self, path: str, disk: Disk | None = None,
                 on_synced: Callable[[str, int], None] | None = None):
        self.path = path
        self.meta_path = path + ".meta"
        self.disk = disk or Disk()
        self.on_synced = on_synced      # (path, durable length): the power-loss tests' record
        self.on_add: Callable[[bytes, int, int], None] | None = None   # durable_port's watch
        self.dir = os.path.dirname(os.path.abspath(path))
        fresh = not os.path.exists(path)
        self.meta = self._load_meta()
        if fresh or "directory_id" not in self.meta:
            # format time (KIP-853's directory id): a wiped or new directory is a new member;
            # so is one that lost its meta file, since it forgot its term and vote with it
            self.meta = {"directory_id": uuid.uuid4().hex, "peer_directories": {}}
            self._store_meta()
        # write numbering: every add or truncation is one write; what a sync covers is named by
        # the last write made before it was handed over (see the module's ordering rules)
        self._seq = 0
        self._durable_seq = 0
        self._submitted_seq = 0
        self._generation = 0                # a rewrite replaces the file: syncs of the old one
        self._truncations: list[tuple[int, int]] = []   # (seq, size) since the last durable
        self._worker: SyncWorker | None = None
        self.failed: OSError | None = None  # a failed fsync: nothing more ever counts as durable
        self._open(fresh)
        self._commit_index: int | None = None     # pysyncobj's latest, not stored yet

    # -- files ---------------------------------------------------------------------------------

    def _open(self, fresh: bool) -> None:
        if fresh:
            write_durably(self.path, HEADER, self.disk)
        with open(self.path, "rb") as f:
            data = f.read()
        if not data.startswith(HEADER):
            raise ValueError(f"{self.path}: not a raftka Raft journal (version {VERSION})")
        self._entries, self._offsets, valid = read_entries(data)
        self._entry_seq = [0] * len(self._entries)      # on disk: see the fsync below
        self._len = len(self._entries)
        self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND)
        if valid < len(data):
            log.warning("%s: cut a torn tail of %d bytes at %d (a write the power loss or crash "
                        "interrupted; never acknowledged)", self.path, len(data) - valid, valid)
            os.ftruncate(self._fd, valid)
        if not fresh:
            # what a killed process wrote may still be only in the page cache: make it durable
            # before any of it is acknowledged again (a leader's resend adds nothing to write)
            self.disk.fsync(self._fd)
        self._size = valid

    def _load_meta(self) -> dict:
        try:
            with open(self.meta_path, "rb") as f:
                return json.loads(f.read())
        except FileNotFoundError:
            return {}

    def _store_meta(self) -> None:
        write_durably(self.meta_path, json.dumps(self.meta, sort_keys=True).encode(), self.disk)

    def _rewrite(self, entries: list) -> None:
        """Replace the file by one holding exactly `entries`, durably."""
        tmp = self.path + ".rewrite"
        offsets, pos = [], len(HEADER)
        with open(tmp, "wb") as f:
            f.write(HEADER)
            for entry in entries:
                data = encode_entry(*entry)
                f.write(data)
                offsets.append(pos)
                pos += len(data)
        durable_replace(tmp, self.path, self.disk)
        os.close(self._fd)
        self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND)
        self._entries, self._offsets, self._size = list(entries), offsets, pos
        self._len = len(entries)
        # everything is durable in the new file; syncs still running cover the old one
        self._generation += 1
        self._seq += 1
        self._durable_seq = self._submitted_seq = self._seq
        self._entry_seq = [self._seq] * len(entries)
        self._truncations = []
        self._report_synced(self._size)

    def _report_synced(self, size: int) -> None:
        if self.on_synced is not None:
            self.on_synced(self.path, size)

    # -- durability ----------------------------------------------------------------------------

    @property
    def needs_sync(self) -> bool:
        """Writes made that are not known durable yet."""
        return self._seq > self._durable_seq

    @property
    def written_seq(self) -> int:
        return self._seq

    @property
    def durable_seq(self) -> int:
        return self._durable_seq

    def sync(self) -> None:
        """One fsync for everything added or truncated since the last one, on this thread."""
        if self.failed is not None:
            raise self.failed
        if self.needs_sync:
            self.disk.fsync(self._fd)
            self._made_durable(self._seq, self._size)

    def start_sync(self) -> None:
        """Hand one fsync covering every write so far to the sync thread (no-op when nothing
        is new or a sync covering it is already under way); `collect_synced` learns its end."""
        if self.failed is not None or self._seq <= self._submitted_seq:
            return
        if self.disk.instant:
            self.sync()
            return
        if self._worker is None:
            self._worker = SyncWorker(self.disk.fsync)
            self._worker.wake = lambda: self.on_sync_done()
        self._submitted_seq = self._seq
        self._worker.submit(SyncJob(self._seq, self._size, self._generation, os.dup(self._fd)))

    # called on the sync thread when a sync ended (RaftQuorum wakes pysyncobj's poll)
    on_sync_done: Callable[[], None] = staticmethod(lambda: None)

    def collect_synced(self) -> bool:
        """Take in the syncs that ended; True if more writes are now durable."""
        if self._worker is None:
            return False
        before = self._durable_seq
        for job in self._worker.finished():
            if job.error is not None:
                self._sync_failed(job.error)
            elif self.failed is None and job.generation == self._generation:
                size = min([job.size] + [at for seq, at in self._truncations if seq > job.seq])
                self._made_durable(job.seq, size)
        return self._durable_seq > before

    def _made_durable(self, seq: int, size: int) -> None:
        if seq <= self._durable_seq:
            return
        self._durable_seq = seq
        self._truncations = [t for t in self._truncations if t[0] > seq]
        self._report_synced(size)

    def _sync_failed(self, error: OSError) -> None:
        # after a failed fsync the kernel may have dropped the dirty pages and a retry would
        # "succeed" without them: nothing written since the last good sync may ever count
        if self.failed is None:
            self.failed = error
            log.critical("%s: fsync failed (%s): this controller no longer acknowledges or "
                         "counts Raft entries; check the disk and restart it", self.path, error)

    def durable_index(self) -> int:
        """The Raft index of the last entry (of those pysyncobj sees) known to be on disk; one
        below the first entry's when none is."""
        pos = bisect.bisect_right(self._entry_seq, self._durable_seq, 0, self._len)
        if pos:
            return self._entries[pos - 1][1]
        return self._entries[0][1] - 1 if self._entries else 0

    # -- pysyncobj's Journal -------------------------------------------------------------------

    def add(self, command, idx, term):
        entry = (to_bytes(command), idx, term)
        pos = self._len
        if pos < len(self._entries):
            if self._entries[pos] == entry:
                self._len += 1              # the entry a resend carries is already on disk
                return
            self._truncate_file(pos)        # a real conflict: the old suffix goes
        data = encode_entry(*entry)
        os.write(self._fd, data)
        self._seq += 1                      # after the write returned: a sync handed over
        self._entries.append(entry)         # from now on covers it
        self._entry_seq.append(self._seq)
        self._offsets.append(self._size)
        self._size += len(data)
        self._len += 1
        if self.on_add is not None:
            self.on_add(*entry)

    def _truncate_file(self, pos: int) -> None:
        self._size = self._offsets[pos]
        os.ftruncate(self._fd, self._size)
        self._seq += 1
        self._truncations.append((self._seq, self._size))
        del self._entries[pos:]
        del self._entry_seq[pos:]
        del self._offsets[pos:]

    def clear(self):
        # a snapshot from the leader replaces everything (pysyncobj adds its two entries next)
        self._rewrite([])

    def deleteEntriesFrom(self, entryFrom):
        """pysyncobj drops everything after a follower's prevLogIdx, even entries the leader is
        only resending (pipelined acks move its next index back): truncating those would take
        acknowledged entries off the disk until they are written again. Raft only truncates at
        a conflict, so the suffix stays on disk, hidden from pysyncobj; `add` re-adopts what
        comes back identical and truncates at the first entry that differs. A restart shows
        the hidden suffix again: extra entries a follower may hold, which a leader overwrites."""
        self._len = min(self._len, max(entryFrom, 0))

    def align_to_snapshot(self, before, last) -> bool:
        """Start the journal at the snapshot's last two entries (`before`, `last`: pysyncobj's
        dump holds them) when it still holds them further in, keeping every entry after them.

        pysyncobj loads its dump on the first tick and, unless the journal *begins* with those
        two entries, clears the journal down to them: everything after the snapshot is gone.
        The journal begins earlier whenever the process stopped between the snapshot writer's
        rename and pysyncobj dropping the covered entries (a tick later, or never: the writer
        can finish just before the process stops). That lost committed entries on a full
        restart under load (the metadata-scale test: two controllers' journals cut from 63 to
        53 entries, the third then truncating applied ones). Returns whether it rewrote."""
        if not self._len:
            return False
        pos = before[1] - self._entries[0][1]       # Raft indexes are consecutive in the file
        if pos <= 0 or pos + 1 >= self._len or self._entries[pos] != tuple(before) or \
                self._entries[pos + 1] != tuple(last):
            return False        # already aligned, not held, or another history: pysyncobj's call
        self.deleteEntriesTo(pos)
        log.info("%s: dropped %d entries the snapshot at index %d covers (its writer finished "
                 "after the last compaction step)", self.path, pos, last[1])
        return True

    def deleteEntriesTo(self, entryTo):
        # after pysyncobj's snapshot is on disk (durable_replace in its writer): drop what it covers
        self.sync()
        self._rewrite(self._entries[entryTo:self._len])

    def __iter__(self):
        return iter(self._entries[:self._len])

    def __getitem__(self, item):
        if isinstance(item, slice):
            return self._entries[slice(*item.indices(self._len))]
        if item < 0:
            item += self._len
        if not 0 <= item < self._len:
            raise IndexError(item)
        return self._entries[item]

    def __len__(self):
        return self._len

    def _destroy(self):
        if self._worker is not None:
            self._worker.stop()
        if self.failed is None:
            self.sync()
            self.onOneSecondTimer()
        os.close(self._fd)

    def flush(self):
        self.sync()

    def setRaftCommitIndex(self, raftCommitIndex):
        self._commit_index = raftCommitIndex        # stored by onOneSecondTimer

    def getRaftCommitIndex(self):
        stored = self.meta.get("commit_index", 1)
        return min(stored, self[-1][1]) if self._len else stored

    def setCurrentTerm(self, term, votedForNodeId):
        # Raft: term and vote on disk before any message reflecting them leaves this node
        self.meta["current_term"] = term
        self.meta["voted_for"] = votedForNodeId
        self._store_meta()

    def getCurrentTerm(self):
        return self.meta.get("current_term", 0)

    def getVotedForNodeId(self):
        return self.meta.get("voted_for")

    def onOneSecondTimer(self):
        """Store the commit index, never beyond the durable entries (the meta file is also
        rewritten with term and vote: it only ever holds a clamped index). No sync here: that
        would stop pysyncobj's thread once a second; the sync thread catches up on its own."""
        if self._commit_index is None:
            return
        target = min(self._commit_index, self.durable_index())
        if target != self.meta.get("commit_index"):
            self.meta["commit_index"] = target
            self._store_meta()

    # -- directory ids (quorum/directory_ids.py decides; stored here with term and vote) -------

    @property
    def directory_id(self) -> str:
        return self.meta["directory_id"]

    def peer_directories(self) -> dict[str, str]:
        return dict(self.meta.get("peer_directories", {}))

    def pin_peer_directory(self, address: str, directory_id: str) -> None:
        """Durably remember `address`'s directory id (before acting on a message from it)."""
        self.meta.setdefault("peer_directories", {})[address] = directory_id
        self._store_meta()


def import_pysyncobj_journal(old_path: str, journal: DurableJournal) -> int:
    """A metadata directory from before this journal: copy pysyncobj's own (unsynced) journal
    and its term and vote into `journal`, durably, then set the old one aside. Returns the
    number of entries copied (0: nothing to import)."""
    if len(journal) or not os.path.exists(old_path):
        return 0
    old = _pysyncobj_journal.FileJournal(old_path)
    for command, idx, term in [old[i] for i in range(len(old))]:
        journal.add(command, idx, term)
    journal.setRaftCommitIndex(old.getRaftCommitIndex())
    journal.setCurrentTerm(old.getCurrentTerm(), old.getVotedForNodeId())   # syncs the meta
    journal.sync()
    count = len(old)
    old._destroy()
    os.replace(old_path, old_path + ".imported")
    log.warning("imported %d Raft entries from pysyncobj's journal %s (kept as %s.imported)",
                count, old_path, old_path)
    return count


_installed = False


def install() -> None:
    """Route pysyncobj's journal and snapshot renames through this module (idempotent)."""
    global _installed
    if _installed:
        return
    original = _pysyncobj_syncobj.createJournal

    def create_journal(journal_file=None):
        if isinstance(journal_file, DurableJournal):
            return journal_file
        return original(journal_file)

    _pysyncobj_syncobj.createJournal = create_journal
    # the snapshot writer (snapshot_writer.py's thread) and a snapshot received from the leader
    # (setTransmissionData) both end in this rename; pysyncobj's is a bare os.rename
    _pysyncobj_serializer.atomicReplace = durable_replace
    _installed = True
