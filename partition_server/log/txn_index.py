"""`<base offset>.txnindex`: the aborted transactions whose ABORT marker is in one segment.

A read_committed Fetch must tell the consumer which transactions in the returned range were
aborted (producer id and first offset), so it can skip their records. Kafka keeps that list per
segment, next to the offset and time indexes, and so do we: it is deleted with its segment by
retention, cut with it by truncation, and never held for the whole log in memory at once.

Each entry is fixed-size (version, producer id, first offset, last offset = the marker's offset,
last stable offset right after the abort). The last stable offset is what makes a lookup stop:
once an entry's LSO is at or past the end of the fetched range, every transaction that began
before that end had finished by then, so no later segment can hold an abort the fetch needs.

Entries are appended in marker order. Replaying the log after a restart appends them again;
an entry not past the last one is skipped, so replay is idempotent.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import struct

log = logging.getLogger(__name__)

VERSION = 0
ENTRY = struct.Struct(">hqqqq")         # version, producer id, first, last, last stable offset


@dataclasses.dataclass(frozen=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int                    # the ABORT marker
    last_stable_offset: int             # -1: unknown (an entry from a pre-index snapshot)


class TransactionIndex:
    def __init__(self, path: str):
        self.path = path
        self.entries: list[AbortedTxn] = []
        self.unflushed = False
        self._load()

    def _load(self) -> None:
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except (FileNotFoundError, NotADirectoryError):
            # nothing there; NotADirectoryError: its log directory is a file (a log dir that
            # failed at start: the replica is hosted offline, lazily, without its files)
            return
        whole = len(data) - len(data) % ENTRY.size
        for pos in range(0, whole, ENTRY.size):
            version, pid, first, last, lso = ENTRY.unpack_from(data, pos)
            if version != VERSION or (self.entries and last <= self.entries[-1].last_offset):
                log.warning("%s: bad entry at %d; keeping the %d before it", self.path, pos,
                            len(self.entries))
                whole = pos
                break
            self.entries.append(AbortedTxn(pid, first, last, lso))
        if whole != len(data):
            self._rewrite()             # a torn or bad tail from a crash

    def append(self, txn: AbortedTxn) -> None:
        if self.entries and txn.last_offset <= self.entries[-1].last_offset:
            return                      # replayed after a restart: already here
        self.entries.append(txn)
        with open(self.path, "ab") as f:
            f.write(ENTRY.pack(VERSION, txn.producer_id, txn.first_offset, txn.last_offset,
                               txn.last_stable_offset))
        self.unflushed = True

    def collect(self, start: int, upper: int) -> tuple[list[AbortedTxn], bool]:
        """Aborted transactions with data in [start, upper): marker at or after `start`, first
        offset below `upper`. The flag says the search is complete (no later segment needed)."""
        out = []
        for t in self.entries:
            if t.last_offset >= start and t.first_offset < upper:
                out.append(t)
            if t.last_stable_offset >= upper:
                return out, True
        return out, False

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or after `offset` (the log was cut there)."""
        keep = [t for t in self.entries if t.last_offset < offset]
        if len(keep) != len(self.entries):
            self.entries = keep
            self._rewrite()

    def _rewrite(self) -> None:
        if not self.entries:
            self.unlink()
            return
        tmp = self.path + ".tmp"
        with open(tmp, "wb") as f:
            for t in self.entries:
                f.write(ENTRY.pack(VERSION, t.producer_id, t.first_offset, t.last_offset,
                                   t.last_stable_offset))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        self.unflushed = False

    def flush(self, fsync: bool = True) -> None:
        if not (self.unflushed and fsync):
            return
        if os.path.exists(self.path):
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        self.unflushed = False

    def unlink(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        self.unflushed = False
