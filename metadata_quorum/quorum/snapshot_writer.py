"""pysyncobj's snapshot (`raft.dump`) written by a thread of this process, not a forked child.

pysyncobj writes its snapshot in a child it forks, so the copy it pickles cannot change. Forking
a process that runs threads (trio's workers, the journal's syncer, pysyncobj's own) is unsafe:
the child has only the forking thread, and a lock another thread held at the fork stays locked
in it forever. A chaos campaign at 30,000 partitions met it: the child hung in the fork itself,
waiting for libfaketime's clock lock (the time-jump fault runs nodes under libfaketime), and
never wrote the snapshot. Worse, a child shares its parent's open files: when the controller was
SIGKILLed, the hung child still held its data directory's lock (and its listening sockets), and
the restarted controller exited at once, "a controller in another process is using this
directory". Any C library with a lock (an allocator, OpenSSL) can do the same without faketime.

Here a thread writes it. The copy is taken in pysyncobj's thread when the snapshot starts, at
the cost of copying the state's mutable containers (MetadataLog.tail, a list of encoded
records, is extended in place; the MetadataImage is immutable, copy-on-write, and the rest are
ints and bytes), so it is as consistent as the fork's. Pickling takes the GIL in turns with the
other threads; gzip releases it: a 32,000-partition state was written in 0.54 s, during which
another thread waited 64 ms at most (p99 16 ms), far inside an election timeout. Level 1 instead of gzip's 9: at 30,000 partitions the state
pickles to 17 MB, which level 9 took ~1 s to compress to 2.0 MB and level 1 0.06 s to 2.5 MB
(pysyncobj reads either). While it writes, the previous dump is not offered to followers that
need a snapshot (pysyncobj's rule while its child ran); it is after the rename. A snapshot
installed from the leader meanwhile is newer than ours: ours is then neither renamed over it nor
reported written (with the fork, a child finishing after the install put the older state back).
"""

from __future__ import annotations

import gzip
import logging
import threading

import pysyncobj.pickle as pysyncobj_pickle
from pysyncobj import serializer as _pysyncobj_serializer
from pysyncobj import syncobj as _pysyncobj_syncobj
from pysyncobj.config import SERIALIZER_STATE
from pysyncobj.serializer import Serializer

log = logging.getLogger(__name__)

GZIP_LEVEL = 1
_WRITING = -3           # pysyncobj's pid field while our thread writes (no transmissions)


def frozen(data):
    """`data` (pysyncobj's (state, entry, entry, cluster)) with every mutable container of the
    state copied one level deep: what the snapshot holds cannot change while it is written."""
    state, *rest = data
    if isinstance(state, list):                 # [SyncObj's fields, each consumer's fields]
        state = [_copied(fields) for fields in state]
    elif isinstance(state, dict):
        state = _copied(state)
    return (state, *rest)


def _copied(fields: dict) -> dict:
    return {k: (list(v) if isinstance(v, list) else dict(v) if isinstance(v, dict)
                else set(v) if isinstance(v, set) else v) for k, v in fields.items()}


class ThreadSerializer(Serializer):
    """pysyncobj's Serializer (same arguments, same file format) that never forks."""

    def __init__(self, fileName, transmissionBatchSize, tryUseFork, serializer, deserializer,
                 serializeChecker):
        super().__init__(fileName, transmissionBatchSize, False, serializer, deserializer,
                         serializeChecker)
        self._file = fileName
        self._custom = serializer is not None
        self._writer: threading.Thread | None = None
        self._ok = False
        # a snapshot installed from the leader while ours is written is newer than ours: ours
        # must not be renamed over it, nor reported written (pysyncobj would take its index)
        self._rename_lock = threading.Lock()
        self._superseded = False

    def serialize(self, data, id):
        if self._file is None or self._custom:
            return super().serialize(data, id)
        if self._writer is not None:
            return
        self._Serializer__currentID = id
        self._Serializer__pid = _WRITING
        self._ok = self._superseded = False
        self._writer = threading.Thread(target=self._write, args=(frozen(data),),
                                        name="raft-snapshot-writer", daemon=True)
        self._writer.start()

    def _write(self, data) -> None:
        tmp = self._file + ".tmp"
        try:
            with open(tmp, "wb") as f, gzip.GzipFile(fileobj=f, mode="wb",
                                                     compresslevel=GZIP_LEVEL) as g:
                pysyncobj_pickle.dump(data, g)
            with self._rename_lock:
                if self._superseded:
                    return
                _pysyncobj_serializer.atomicReplace(tmp, self._file)   # journal.durable_replace
                self._ok = True
        except Exception:
            log.exception("could not write the Raft snapshot %s", self._file)

    def setTransmissionData(self, data):
        """A chunk of the leader's snapshot; the last one renames it into place (pysyncobj's).
        A fork had the same race: a child finishing after the install put the older state
        back under the newer journal."""
        if data is None or not data[2] or self._writer is None:
            return super().setTransmissionData(data)
        with self._rename_lock:
            self._superseded = True
            return super().setTransmissionData(data)

    def checkSerializing(self):
        writer = self._writer
        if writer is None:
            return super().checkSerializing()
        if writer.is_alive():
            return SERIALIZER_STATE.SERIALIZING, self._Serializer__currentID
        self._writer = None
        self._Serializer__pid = 0
        if not self._ok or self._superseded:
            return SERIALIZER_STATE.FAILED, self._Serializer__currentID
        self._Serializer__transmissions = {}
        return SERIALIZER_STATE.SUCCESS, self._Serializer__currentID


def install() -> None:
    """pysyncobj's SyncObj builds its Serializer by this module-level name (idempotent)."""
    _pysyncobj_syncobj.Serializer = ThreadSerializer
