"""A bounded set of open segment files (`raftka.log.max.open.files`), least recently used first out.

Why: a segment's `.log` used to stay open for the segment's whole life, so a broker's open files
grew with its partitions (30,000 replicas needed 30,000+ descriptors and the accept loop failed
with EMFILE past the process limit). Now at most `max_open` segment files are held by the cache;
a segment whose file was closed reopens it by path on its next read or append. Indexes are not
held open at all (read whole at load, appended with a short-lived open).

The one rule that keeps this safe: **a descriptor is closed only when nobody holds it.** Opening
gives a `SegmentFile`; the cache and the segment hold it, and so does anyone using its `fd` — a
method reading the segment (a local variable), a network send in progress (across awaits). When
the cache evicts a segment it drops its own and the segment's reference; the descriptor is closed
by `SegmentFile.__del__` once the last holder lets go (CPython frees it at once). So eviction can
never close a file under a reader, and an fd number is never reused while someone may still use
it. Open descriptors are therefore at most `max_open` plus those held by reads in progress.

States of one segment's file (`owner._file` is the `SegmentFile`, `owner in _lru` is "cached"):

    CLOSED ──acquire──▶ CACHED ──evicted (LRU) / release──▶ CLOSED
                          │
                          └──pin (segment unlinked or replaced by a cleaned copy)──▶ PINNED
    PINNED: out of the LRU, never evicted, kept until release (file.delete.delay.ms), because the
    path no longer names its data: reopening would fail or read the cleaned copy. A gone segment
    (`owner.gone`) without a file cannot be reopened: acquire raises `SegmentGoneError`.

Pinned files count against `max_open` too (the LRU shrinks for them), and at most half of it may
be pinned: retention deleting a segment of each of 30,000 partitions at once must not hold 30,000
files for a minute. Past that a removed segment's file is let go at once, so a send planned
before the removal and not yet started fails (its connection is closed; the client fetches again
and learns the new log start) — the same outcome as for a segment deleted while evicted.

Closing an fd without fsync loses nothing: written pages belong to the file, not the descriptor,
and a later fsync through a new descriptor writes them (Linux ≥ 4.16 also reports a writeback
error nobody has seen yet to the next fsync through any descriptor of the file).

Thread-safe (logs may be opened by several threads at start): every read or write of
`owner._file` and of the LRU happens under one lock.
"""

from __future__ import annotations

import collections
import os
import resource
import threading

MIN_OPEN = 16
# Without a configured bound (tools, tests, the simulation): a bound still, so nothing depends on
# having as many descriptors as segments.
DEFAULT_MAX_OPEN = 1024


class SegmentGoneError(OSError):
    """The segment was closed, deleted or replaced; its file cannot be reopened (a read planned
    before that happened: the connection sending it is closed, as for a truncated segment)."""


class SegmentFile:
    """One open descriptor of a segment file; closed when the last reference goes."""

    __slots__ = ("fd", "path")

    def __init__(self, path: str, fd: int):
        self.path = path
        self.fd = fd

    def __del__(self):
        fd, self.fd = self.fd, -1
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass


class OpenFileCache:
    def __init__(self, max_open: int = DEFAULT_MAX_OPEN):
        self.max_open = max(MIN_OPEN, max_open)
        self._lru: collections.OrderedDict = collections.OrderedDict()   # owner → None
        self._pinned: set = set()
        self._lock = threading.Lock()
        self.opens = 0              # files opened (first open or reopen after eviction)
        self.evictions = 0

    @property
    def cached(self) -> int:
        return len(self._lru)

    def acquire(self, owner, create: bool = False) -> SegmentFile:
        """`owner`'s open file (`owner.path`), opened if needed — the least recently used other
        file is then evicted when the cache is full. Hold the result while using its `fd`."""
        evicted = []
        with self._lock:
            f = owner._file
            if f is not None:
                if owner in self._lru:
                    self._lru.move_to_end(owner)
                return f
            if owner.gone:
                raise SegmentGoneError(f"{owner.path}: segment closed or deleted")
            flags = os.O_RDWR | (os.O_CREAT if create else 0)
            f = owner._file = SegmentFile(owner.path, os.open(owner.path, flags, 0o644))
            self.opens += 1
            self._lru[owner] = None
            while self._lru and len(self._lru) + len(self._pinned) > self.max_open:
                victim, _ = self._lru.popitem(last=False)
                evicted.append(victim._file)      # closed below, outside the lock, if unheld
                victim._file = None
                self.evictions += 1
        del evicted
        return f

    @property
    def pinned(self) -> int:
        return len(self._pinned)

    def pin(self, owner) -> None:
        """Keep `owner`'s file, if open (and pins are left), until `release`: its path no longer
        names its data, so it is never reopened."""
        with self._lock:
            self._lru.pop(owner, None)
            owner.gone = True
            f = None
            if owner._file is not None and owner not in self._pinned:
                if len(self._pinned) < self.max_open // 2:
                    self._pinned.add(owner)
                else:
                    f, owner._file = owner._file, None
        del f

    def release(self, owner) -> None:
        """`owner` is done (closed): drop the cache's and its hold (the fd closes once no read
        holds it); it is never reopened."""
        with self._lock:
            self._lru.pop(owner, None)
            self._pinned.discard(owner)
            f, owner._file = owner._file, None
            owner.gone = True
        del f


def default_max_open_files(configured: int) -> int:
    """`raftka.log.max.open.files`: the configured bound, or (0 = auto) half of this process's
    open-file limit: the other half is left for client and replica connections, index and
    checkpoint writes, and segment files held by sends in progress."""
    if configured > 0:
        return max(MIN_OPEN, configured)
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    return max(MIN_OPEN, soft // 2)


DEFAULT = OpenFileCache()
