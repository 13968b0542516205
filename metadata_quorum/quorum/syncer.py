"""The Raft journal's fsyncs, off pysyncobj's thread (group commit that keeps the tick running).

pysyncobj runs its whole Raft node on one thread: ticks, every socket, every append. An fsync
there (1-30 ms on a loaded machine) stopped all of it: a leader could neither take the next
proposals nor send them, a follower could not read the next AppendEntries, so each round of
entries waited for the previous round's disk write. Here the fsync runs on a thread of its
own while the Raft thread goes on appending; whatever is written by the time a sync is handed
over is covered by it, and what arrives during it gathers for the next one.

The Raft thread owns all bookkeeping: it describes a sync as a `SyncJob` (what it covers: a
write sequence number, the file size, the file generation) and reads back finished jobs with
`finished()`; this thread only runs `disk.fsync` on a duplicate of the file descriptor (the
journal may close or replace its own meanwhile) and calls `wake` when one ends, so the Raft
thread's poll returns at once. Jobs run one at a time; jobs handed over while one runs are
covered by the newest of them (the fsync covers the whole file), so only that one runs.
"""

from __future__ import annotations

import collections
import logging
import os
import queue
import threading
from typing import Callable

log = logging.getLogger(__name__)


class SyncJob:
    __slots__ = ("seq", "size", "generation", "fd", "error")

    def __init__(self, seq: int, size: int, generation: int, fd: int):
        self.seq = seq                    # every journal write numbered up to this one
        self.size = size                  # the file's length then (the tests' power-loss record)
        self.generation = generation      # which file (a rewrite replaces it)
        self.fd = fd                      # a duplicate descriptor, closed once synced
        self.error: OSError | None = None


class SyncWorker:
    def __init__(self, fsync: Callable[[int], None], name: str = "raft-journal-sync"):
        self._fsync = fsync
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()    # None: stop
        self._done: collections.deque[SyncJob] = collections.deque()
        self.wake: Callable[[], None] = lambda: None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, job: SyncJob) -> None:
        self._jobs.put(job)

    def finished(self) -> list[SyncJob]:
        """Jobs synced (or failed: `error`) since the last call, in order."""
        done = []
        while self._done:
            done.append(self._done.popleft())
        return done

    def stop(self) -> None:
        self._jobs.put(None)
        if threading.current_thread() is not self._thread:
            self._thread.join(10)
        self._drain()

    def _drain(self) -> None:
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                return
            if job is not None:
                os.close(job.fd)

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            while job is not None:
                try:
                    newer = self._jobs.get_nowait()
                except queue.Empty:
                    break
                os.close(job.fd)            # the newer job's fsync covers this one's writes
                job = newer
            if job is None:
                return
            try:
                self._fsync(job.fd)
            except OSError as exc:
                job.error = exc
            finally:
                os.close(job.fd)
            self._done.append(job)
            try:
                self.wake()
            except Exception:  # noqa: BLE001 - the thread must survive a failed wake-up
                log.exception("waking the Raft thread after a journal sync failed")
