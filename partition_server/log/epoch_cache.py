"""Leader-epoch cache: epoch → start offset of that epoch in this log (KIP-101, KIP-279).

It answers OffsetForLeaderEpoch and the follower divergence check: for a requested epoch E, the
largest epoch ≤ E we know, and its end offset — the start offset of the next higher epoch, or the
log end offset when E is the latest. Persisted in `leader-epoch-checkpoint` (Kafka's text
format: version line, count line, one "epoch start_offset" line each), rewritten atomically
(temp file, fsync, rename, directory fsync) on every change. Two exceptions, both for brokers
hosting thousands of partitions, where two fsyncs per partition made a start take tens of
seconds:
- truncation from the end is not fsynced (as in Kafka since KAFKA-15046): the log truncation it
  follows is not fsynced either, and if it is lost the next open truncates again to the log end;
- `assign(..., fsync=False)`: the caller makes it durable, e.g. a broker becoming leader of many
  partitions writes every checkpoint, then syncs the file system once before serving them.
"""

from __future__ import annotations

import bisect
import os

UNDEFINED = (-1, -1)


class LeaderEpochCache:
    def __init__(self, path: str, deferred: bool = False):
        self.path = path
        self.epochs: list[int] = []
        self.start_offsets: list[int] = []
        # True while the log's directory does not exist yet (a lazily created log, see
        # partition_log.py): nothing to read, changes stay in memory until `write_deferred`
        self.deferred = deferred
        if not deferred:
            self._load()

    def _load(self) -> None:
        """Read the checkpoint; anything torn or inconsistent is ignored (the log then rebuilds
        the cache from the batches' partition leader epochs)."""
        try:
            with open(self.path) as f:
                lines = f.read().split("\n")
            version, count = int(lines[0]), int(lines[1])
            pairs = [tuple(map(int, line.split())) for line in lines[2:2 + count]]
            if version != 0 or len(pairs) != count or any(len(p) != 2 for p in pairs) \
                    or any(line.strip() for line in lines[2 + count:]):
                raise ValueError("inconsistent checkpoint")
            for (e1, s1), (e2, s2) in zip(pairs, pairs[1:]):
                if e2 <= e1 or s2 < s1:
                    raise ValueError("epochs or offsets not increasing")
        except (FileNotFoundError, ValueError, IndexError):
            return
        for epoch, start in pairs:
            self._assign(epoch, start)

    def write_deferred(self) -> None:
        """The directory exists now: write what was kept in memory (unsynced: if it is lost,
        the log rebuilds the cache from its batches' leader epochs on open)."""
        self.deferred = False
        if self.epochs:
            self._save(fsync=False)

    def _save(self, fsync: bool = True) -> None:
        if self.deferred:
            return
        body = "0\n%d\n%s" % (len(self.epochs), "".join(
            f"{e} {s}\n" for e, s in zip(self.epochs, self.start_offsets)))
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            f.write(body)
            f.flush()
            if fsync:
                os.fsync(f.fileno())
        os.replace(tmp, self.path)
        if not fsync:
            return
        fd = os.open(os.path.dirname(self.path) or ".", os.O_RDONLY)
        try:
            os.fsync(fd)          # the rename itself must survive a power loss
        finally:
            os.close(fd)

    def _assign(self, epoch: int, start_offset: int) -> bool:
        if epoch < 0:
            return False
        if self.epochs and epoch <= self.epochs[-1]:
            if epoch == self.epochs[-1]:
                return False
            return False        # an older epoch never moves the cache back
        if self.start_offsets and start_offset < self.start_offsets[-1]:
            # a new epoch cannot start before the previous one; drop what it overtakes
            i = bisect.bisect_left(self.start_offsets, start_offset)
            del self.epochs[i:], self.start_offsets[i:]
        self.epochs.append(epoch)
        self.start_offsets.append(start_offset)
        return True

    def assign(self, epoch: int, start_offset: int, fsync: bool = True) -> None:
        if self._assign(epoch, start_offset):
            self._save(fsync)

    @property
    def latest_epoch(self) -> int:
        return self.epochs[-1] if self.epochs else -1

    def epoch_for_offset(self, offset: int) -> int:
        i = bisect.bisect_right(self.start_offsets, offset) - 1
        return self.epochs[i] if i >= 0 else -1

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(largest known epoch ≤ `epoch`, its end offset). Below the earliest known epoch:
        (`epoch`, start of the earliest) — as Kafka's LeaderEpochFileCache — because a follower
        asking about an epoch we never had must truncate to where our history begins; UNDEFINED
        there would look like "no answer" and leave it diverged forever. UNDEFINED only for an
        empty cache or an undefined epoch."""
        if not self.epochs or epoch < 0:
            return UNDEFINED
        if epoch < self.epochs[0]:
            return epoch, self.start_offsets[0]
        i = bisect.bisect_right(self.epochs, epoch) - 1
        if i == len(self.epochs) - 1:
            return self.epochs[i], log_end_offset
        return self.epochs[i], self.start_offsets[i + 1]

    def truncate_from_end(self, end_offset: int) -> None:
        """The log was truncated to `end_offset`: forget epochs that start at or after it."""
        i = bisect.bisect_left(self.start_offsets, end_offset)
        if i < len(self.epochs):
            del self.epochs[i:], self.start_offsets[i:]
            self._save(fsync=False)         # redone by the next open if lost (module docstring)

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at `start_offset`: the epoch covering it starts there."""
        i = bisect.bisect_right(self.start_offsets, start_offset) - 1
        if i <= 0 and (i < 0 or self.start_offsets[0] >= start_offset):
            return
        del self.epochs[:i], self.start_offsets[:i]
        self.start_offsets[0] = start_offset
        self._save()

    def clear(self) -> None:
        self.epochs, self.start_offsets = [], []
        self._save()
