"""The controller's Raft journal, fsynced: pysyncobj's own FileJournal never syncs (an mmap it
flushes on close), so a power loss of a majority of controllers could lose committed metadata.

Files in the controller's metadata directory:

    raft.log        header, then records: u32 length, u32 crc32, u64 index, u64 term, command
    raft.log.meta   JSON: current term, voted-for, commit index, this directory's id, the
                    directory ids of peers (quorum/directory_ids.py); replaced atomically
    raft.dump       pysyncobj's snapshot, written by its Serializer (made durable below)

Ordering (what counts toward a commit is on disk first):
- `add` only writes (page cache) and marks the journal dirty; `sync` fsyncs once for every
  entry added since the last one: group commit. Raft never sees an entry as durable before
  `sync`: the Raft port holds outgoing acks and votes while the journal is dirty and sends them
  after the next `sync` (RaftQuorum syncs at the start of every pysyncobj tick and right before
  it waits for the network), and the leader counts itself toward a commit only at the start of
  a tick, after that sync (quorum/durable_port.py). So no majority can count an entry that is
  not on a majority of disks.
- Term and vote (`setCurrentTerm`) are written and fsynced (file and directory) before the call
  returns: pysyncobj sends the vote right after.
- The commit index is saved at most once a second, after the entries it covers are synced, and
  is clamped to the journal on load.
- Truncation of a suffix happens only where a new entry differs from the one on disk (a
  follower overwritten by a new leader: an ftruncate, synced with the next `sync`), not where
  pysyncobj merely drops entries a leader is resending (`deleteEntriesFrom`); compaction (`deleteEntriesTo`, after pysyncobj wrote its snapshot) and
  `clear` (a snapshot installed from the leader) rewrite the kept entries into a new file,
  fsync it and rename it over, syncing the directory.
- A torn tail (power loss mid-write: short record or bad CRC) is cut off at load.

pysyncobj builds its journal with the module-level `createJournal(conf.journalFile)` inside
`SyncObj.__init__`; `install()` wraps that name so a journalFile that is a DurableJournal is
used as is (any other value goes to pysyncobj's own). It also makes the snapshot writer's rename
durable (fsync the file, rename, fsync the directory) — in the forked child that writes
snapshots, and for a snapshot received from the leader, before pysyncobj drops the entries the
snapshot replaces.
"""

from __future__ import annotations

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

log = logging.getLogger(__name__)

MAGIC = b"RAFTKA-RAFT-LOG\x00"
VERSION = 1
HEADER = MAGIC + struct.pack("<I", VERSION)
RECORD_HEAD = struct.Struct("<IIQQ")        # length of (index, term, command), crc32, index, term
MAX_RECORD_BYTES = 64 * 1024 * 1024         # far above any metadata entry: a length past it is torn


class Disk:
    """The two calls durability rests on; tests pass a shim that records what was synced."""

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
    """`raftka.controller.raft.fsync=false`: benchmarks only (the cost of fsync side by side)."""

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
        self._open(fresh)
        self._dirty = False
        self._meta_dirty = False

    # -- files ---------------------------------------------------------------------------------

    def _open(self, fresh: bool) -> None:
        if fresh:
            write_durably(self.path, HEADER, self.disk)
        with open(self.path, "rb") as f:
            data = f.read()
        if not data.startswith(HEADER):
            raise ValueError(f"{self.path}: not a raftka Raft journal (version {VERSION})")
        self._entries, self._offsets, valid = read_entries(data)
        self._len = len(self._entries)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        if valid < len(data):
            log.warning("%s: cut a torn tail of %d bytes at %d (a write the power loss or crash "
                        "interrupted; never acknowledged)", self.path, len(data) - valid, valid)
            os.ftruncate(self._fd, valid)
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
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        self._entries, self._offsets, self._size = list(entries), offsets, pos
        self._len = len(entries)
        self._dirty = False
        self._report_synced()

    def _report_synced(self) -> None:
        if self.on_synced is not None:
            self.on_synced(self.path, self._size)

    # -- durability ----------------------------------------------------------------------------

    @property
    def needs_sync(self) -> bool:
        return self._dirty

    def sync(self) -> None:
        """One fsync for everything added or truncated since the last one."""
        if self._dirty:
            self.disk.fsync(self._fd)
            self._dirty = False
            self._report_synced()

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
        self._entries.append(entry)
        self._offsets.append(self._size)
        self._size += len(data)
        self._len += 1
        self._dirty = True
        if self.on_add is not None:
            self.on_add(*entry)

    def _truncate_file(self, pos: int) -> None:
        self._size = self._offsets[pos]
        os.ftruncate(self._fd, self._size)
        del self._entries[pos:]
        del self._offsets[pos:]
        self._dirty = True

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
        self.sync()
        if self._meta_dirty:
            self._store_meta()
        os.close(self._fd)

    def flush(self):
        self.sync()

    def setRaftCommitIndex(self, raftCommitIndex):
        if self.meta.get("commit_index") != raftCommitIndex:
            self.meta["commit_index"] = raftCommitIndex
            self._meta_dirty = True

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
        if self._meta_dirty:
            self.sync()        # the stored commit index never covers entries not on disk
            self._meta_dirty = False
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
    # the snapshot writer (serialize, in a forked child) and a snapshot received from the leader
    # (setTransmissionData) both end in this rename; pysyncobj's is a bare os.rename
    _pysyncobj_serializer.atomicReplace = durable_replace
    _installed = True
