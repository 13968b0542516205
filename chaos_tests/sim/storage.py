"""Broker disks for the simulation: the real `PartitionLog` (segments, indexes, leader-epoch
checkpoint, recovery) in a scratch directory, plus a record of what was flushed.

Process faults on the disk, as `SimBroker.crash` uses them:
- SIGKILL: the process dies without closing its logs; what it wrote is in the page cache and
  survives. The next incarnation reopens the directory (the real recovery path: no
  clean-shutdown marker, so segments after the recovery point are scanned).
- power loss: as SIGKILL, and everything not flushed (fsync) is gone: the reopened log is cut
  back to the offset of its last flush (the epoch checkpoint, fsynced on every change, stays).

`DiskLog` keeps a shadow list of the value at every offset so the invariants can compare
replicas without decoding logs after every event.
"""

from __future__ import annotations

import os

from partition_server.log.partition_log import PartitionLog
from wire.records.batch import decode_batch, iter_batches


def _values(data) -> list[str]:
    out = []
    for h in iter_batches(data):
        out += [r.value.decode() for r in decode_batch(bytes(h.bytes())).records]
    return out


class DiskLog(PartitionLog):
    def __init__(self, directory: str, flushed: int):
        super().__init__(directory)
        self.flushed = flushed
        self.values: list[str] = []
        while len(self.values) < self.log_end_offset:       # one segment per read
            info = self.read(len(self.values), 1 << 40)
            got = _values(info.read_bytes())
            if not got:
                raise AssertionError(f"{directory}: cannot read offset {len(self.values)}")
            self.values += got[len(self.values) - info.first_offset:] \
                if info.first_offset < len(self.values) else got

    def append_as_leader(self, records, leader_epoch, now_ms, origin="client"):
        values = _values(records)
        info = super().append_as_leader(records, leader_epoch, now_ms, origin)
        self.values += values
        return info

    def append_as_follower(self, records, now_ms=0):
        start = self.log_end_offset
        info = super().append_as_follower(records, now_ms)
        if info is not None:
            if info.first_offset != start:
                # The real log does not refuse a gap; replication must never produce one.
                raise AssertionError(f"{self.directory}: follower append at {info.first_offset} "
                                     f"leaves a gap after log end offset {start}")
            self.values += _values(records)
        return info

    def truncate_to(self, offset):
        super().truncate_to(offset)
        del self.values[self.log_end_offset:]
        self.flushed = min(self.flushed, self.log_end_offset)

    def truncate_fully_and_start_at(self, offset):
        if offset != 0:
            raise AssertionError("the simulation never moves the log start offset")
        super().truncate_fully_and_start_at(offset)
        self.values.clear()
        self.flushed = 0

    def flush(self):
        super().flush()
        self.flushed = self.log_end_offset

    def delete(self) -> None:
        """The replica was removed (a reassignment moved it away): the directory is gone."""
        super().delete()
        self.values = []
        self.flushed = 0

    def abandon(self) -> None:
        """The process died: close file descriptors without flushing or marking a clean stop."""
        for seg in self.segments:
            if not getattr(seg, "closed", False):
                seg.abandon()
        self.closed = True


class Disk:
    """One broker's log directory: reopened by every incarnation."""

    def __init__(self, root: str):
        self.root = root
        self.open: dict = {}              # (topic, partition) → DiskLog of this incarnation
        self.flushed: dict = {}           # (topic, partition) → offset of the last flush
        self.hw_checkpoint: dict = {}     # replication-offset-checkpoint (written whole, fsynced)
        self._dead: dict = {}             # values of logs while the broker is down (unchanged)
        # KIP-966: the broker epoch under which these logs are known intact (-1 after a power
        # loss), what the next registration reports as PreviousBrokerEpoch
        self.intact_epoch = -1

    def open_log(self, topic: str, partition: int) -> DiskLog:
        key = (topic, partition)
        if key in self.open and self.open[key].closed:
            # deleted (the replica was moved away) and now assigned here again: a new, empty log
            del self.open[key]
            self.flushed.pop(key, None)
        if key not in self.open:
            path = os.path.join(self.root, f"{topic}-{partition}")
            self.open[key] = DiskLog(path, self.flushed.get(key, 0))
        return self.open[key]

    def crash(self, power_loss: bool) -> int:
        """Returns how many records a power loss cut off."""
        if power_loss:
            self.intact_epoch = -1
        lost = 0
        for key, plog in list(self.open.items()):
            if plog.closed:                 # deleted: nothing of it survives
                self.flushed.pop(key, None)
                self._dead.pop(key, None)
                continue
            self.flushed[key] = plog.flushed
            self._dead[key] = plog.values
            plog.abandon()
        self.open.clear()
        if power_loss:
            for key, flushed in self.flushed.items():
                plog = self.open_log(*key)
                lost += plog.log_end_offset - flushed
                plog.truncate_to(flushed)
        return lost

    def values(self, key) -> list | None:
        """The value at every offset of a log, whether or not the broker is up."""
        plog = self.open.get(key)
        return plog.values if plog is not None else self._dead.get(key)

    def keys(self):
        return set(self.open) | set(self._dead)
