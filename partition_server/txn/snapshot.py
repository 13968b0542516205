"""Producer-state snapshots: `<log dir>/<offset, 20 digits>.producer-snapshot` (msgpack).

A snapshot holds the whole `ProducerStateManager` (sequence windows, open transactions, recent
finished ones) as of `offset`, a batch boundary of the log. Opening a
partition loads the newest snapshot at or below the log end offset and replays only the batches
from there (Kafka's ProducerStateManager does the same), instead of the whole log.

Written every `SNAPSHOT_INTERVAL_S` for partitions that changed, and on clean shutdown — then
even an empty one when the replay it saves is long (`REPLAY_CHEAP_BYTES`): without it a log that
never saw an idempotent producer was read header by header from its start on every broker start,
a cost growing with the log (10,000 such logs made a start take tens of seconds). Written to a
temporary file, fsynced (at shutdown: by the broker's one file-system sync before the
clean-shutdown markers) and renamed, so a crash leaves the previous one. A snapshot past the
log end is worthless — the log lost or truncated what it covered — so the log deletes those on
truncation and after recovery (`partition_log.drop_producer_snapshots_after`), and loading
ignores them anyway.

Aborted transactions live in the segments' `.txnindex` files, not here: before a snapshot is
written the indexes are fsynced, so every abort below the snapshot's offset is durable there and
replaying from the snapshot re-adds (idempotently) the ones after it. Snapshots from before the
index carried an "aborted" list; loading one hands it to the index (with an unknown LSO).
"""

from __future__ import annotations

import logging
import os

import msgpack

from partition_server.log.partition_log import PRODUCER_SNAPSHOT_SUFFIX, drop_producer_snapshots_after
from partition_server.txn.producer_state import (CachedBatch, FinishedTxn, ProducerEntry,
                                                 ProducerStateManager, marker_of)

log = logging.getLogger(__name__)

VERSION = 1
KEEP = 2
SNAPSHOT_INTERVAL_S = 30.0
FINISHED_KEPT = 1000           # finished transactions kept (only truncation looks at them)
REPLAY_CHEAP_BYTES = 64 * 1024  # less log than this after the newest snapshot: replay it


def snapshot_offsets(directory: str) -> list[int]:
    out = []
    try:
        names = os.listdir(directory)
    except OSError:
        return out
    for n in names:
        stem = n[:-len(PRODUCER_SNAPSHOT_SUFFIX)]
        if n.endswith(PRODUCER_SNAPSHOT_SUFFIX) and stem.isdigit():
            out.append(int(stem))
    return sorted(out)


def _path(directory: str, offset: int) -> str:
    return os.path.join(directory, f"{offset:020d}{PRODUCER_SNAPSHOT_SUFFIX}")


def encode(state: ProducerStateManager, offset: int) -> bytes:
    return msgpack.packb({
        "v": VERSION, "offset": offset,
        "producers": [[pid, e.epoch, [[b.first_seq, b.last_seq, b.first_offset, b.last_offset]
                                      for b in e.batches], e.last_ms]
                      for pid, e in state.producers.items()],
        "ongoing": [[pid, first] for pid, first in state.ongoing.items()],
        "aborted": [],
        "committed": [[t.marker_offset, t.producer_id, t.first_offset, int(t.aborted)]
                      for t in list(state.finished)[-FINISHED_KEPT:]],
        "coordinator_epochs": [[pid, e] for pid, e in state.coordinator_epochs.items()],
    })


def decode(data: bytes) -> tuple[int, ProducerStateManager, list]:
    """(offset, state, aborted transactions of a pre-index snapshot as (marker, pid, first))."""
    d = msgpack.unpackb(data)
    if d.get("v") != VERSION:
        raise ValueError(f"unknown producer snapshot version {d.get('v')}")
    state = ProducerStateManager()
    for pid, epoch, batches, *rest in d["producers"]:
        entry = ProducerEntry(epoch, last_ms=rest[0] if rest else -1)
        entry.batches.extend(CachedBatch(*b) for b in batches)
        state.producers[pid] = entry
    state.ongoing = {pid: first for pid, first in d["ongoing"]}
    legacy_aborted = [(m, pid, first) for m, pid, first in d.get("aborted", [])]
    state.finished.extend(FinishedTxn(m, pid, first, bool(rest[0]) if rest else False)
                          for m, pid, first, *rest in d["committed"])
    state.coordinator_epochs = {pid: e for pid, e in d.get("coordinator_epochs", [])}
    return d["offset"], state, legacy_aborted


def write_snapshot(directory: str, state: ProducerStateManager, offset: int,
                   fsync: bool = True) -> None:
    path = _path(directory, offset)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(encode(state, offset))
        f.flush()
        if fsync:
            os.fsync(f.fileno())
    os.replace(tmp, path)
    for old in snapshot_offsets(directory)[:-KEEP]:
        try:
            os.unlink(_path(directory, old))
        except OSError:
            pass


def load_latest(directory: str, log_end_offset: int, offsets: list[int] | None = None
                ) -> tuple[int, ProducerStateManager, list] | None:
    """The newest readable snapshot at or below the log end offset (`offsets`: the snapshots
    in the directory, when the caller just listed it)."""
    if offsets is None:
        drop_producer_snapshots_after(directory, log_end_offset)
        offsets = snapshot_offsets(directory)
    for offset in reversed([o for o in offsets if o <= log_end_offset]):
        try:
            with open(_path(directory, offset), "rb") as f:
                got_offset, state, legacy = decode(f.read())
            if got_offset == offset:
                return offset, state, legacy
        except (OSError, ValueError, TypeError, KeyError, msgpack.UnpackException) as exc:
            log.warning("%s: ignoring producer snapshot %d: %s", directory, offset, exc)
    return None


def rebuild(plog) -> ProducerStateManager:
    """Producer state of a log: the newest snapshot plus the batches after it (or everything)."""
    listed, plog.snapshot_offsets_at_open = plog.snapshot_offsets_at_open, None
    found = load_latest(plog.directory, plog.log_end_offset, listed)
    start, state, legacy = found if found is not None else (0, ProducerStateManager(), [])
    for marker, pid, first in legacy:
        plog.add_aborted_txn(pid, first, marker, -1)
    state.on_abort = plog.add_aborted_txn
    for seg in plog.segments:
        if seg.next_offset <= start:
            continue
        pos = seg.index_lookup(start) if seg.base_offset < start else 0
        for h in seg.iter_headers(pos):
            if h.producer_id < 0 or h.last_offset < start:
                continue
            marker = None
            if h.is_control:
                marker = marker_of(seg.pread(h.size_in_bytes, h.pos))
            state.observe(h, marker)
    return state


def maybe_snapshot(hosted, last: dict, closing: bool = False, fsync: bool = True) -> None:
    """Snapshot a partition whose log moved since its last snapshot (`last`: key → offset).
    `closing` (the log is being closed): also when there is no producer state but replaying
    the log since the newest snapshot would be long. `fsync=False`: the caller syncs."""
    plog = hosted.log
    key = (hosted.topic, hosted.partition)
    offset = plog.log_end_offset
    if last.get(key) == offset or plog.closed or hosted.offline:
        return
    if not hosted.producers.producers and not hosted.producers.ongoing and not (
            closing and _replay_bytes(plog) > REPLAY_CHEAP_BYTES):
        last[key] = offset
        return                       # nothing to remember: replay is free
    plog.flush_txn_indexes()
    write_snapshot(plog.directory, hosted.producers, offset, fsync=fsync)
    last[key] = offset


def _replay_bytes(plog) -> int:
    """At most how many log bytes a start would replay after the newest snapshot."""
    offsets = snapshot_offsets(plog.directory)
    newest = offsets[-1] if offsets else -1
    if newest == plog.log_end_offset:
        return 0
    return sum(seg.size for seg in plog.segments if seg.next_offset > newest)
