"""Transactional offset commits (TxnOffsetCommit, KIP-98/KIP-447) on the group coordinator.

The offsets are appended to the group's `__consumer_offsets` partition as a *transactional*
batch of the producer (key `[4, group, topic, partition]`, value `[offset, leader_epoch,
metadata, commit_ms]`, msgpack), which the group coordinator's replay ignores. They take effect
only when the transaction commits: before the COMMIT marker is appended to that partition
(`markers.append_marker_locally`), `materialize` stores them as ordinary committed offsets
through the group coordinator. A retried marker materializes again (same offsets: idempotent),
so a crash between the two loses nothing; an ABORT marker simply drops them.

Pending offsets are kept in memory; a new leader of the partition (coordinator failover) finds
them again by reading the producer's open transaction from its first offset (the producer state
knows it) to the log end.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import msgpack

from partition_server.coordinator_append import coordinator_error, wait_committed
from partition_server.group.coordinator import OFFSETS_TOPIC
from wire.errors import DecodeError, ErrorCode
from wire.records.batch import build_batch, decode_batch, iter_batches

if TYPE_CHECKING:
    from partition_server.group.coordinator import GroupCoordinator
    from partition_server.purgatory import Purgatory
    from partition_server.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

TXN_OFFSET_KEY = 4


class TxnOffsetStore:
    """Given the group coordinator (which partition holds a group; where offsets become
    committed ones), the replica manager and the purgatory (append, wait for the commit)."""

    def __init__(self, groups: GroupCoordinator, replicas: ReplicaManager, purgatory: Purgatory):
        self.groups = groups
        self.replicas = replicas
        self.purgatory = purgatory
        # (offsets partition, producer id) → {group: {(topic, partition): (offset, epoch, meta)}}
        self.pending: dict[tuple[int, int], dict[str, dict]] = {}

    async def commit(self, group_id: str, producer_id: int, producer_epoch: int,
                     entries: list[tuple], timeout_s: float = 5.0) -> ErrorCode:
        """entries: [(topic, partition, offset, leader_epoch, metadata)]."""
        if not entries:
            return ErrorCode.NONE
        pid_part = self.groups.partition_of(group_id)
        ts = int(time.time() * 1000)
        batch = build_batch(
            [(msgpack.packb([TXN_OFFSET_KEY, group_id, t, p]), msgpack.packb([o, e, m, ts]), [], ts)
             for t, p, o, e, m in entries],
            producer_id=producer_id, producer_epoch=producer_epoch, is_transactional=True)
        res = self.replicas.append_as_coordinator(OFFSETS_TOPIC, pid_part, batch, ts)
        if res.error != ErrorCode.NONE:
            return coordinator_error(res.error)
        err = await wait_committed(self.replicas, self.purgatory, OFFSETS_TOPIC, pid_part,
                                   res.last_offset, timeout_s)
        if err != ErrorCode.NONE:
            return err
        table = self.pending.setdefault((pid_part, producer_id), {}).setdefault(group_id, {})
        for t, p, o, e, m in entries:
            table[(t, p)] = (o, e, m)
        return ErrorCode.NONE

    def has_pending(self, group_id: str, topic: str, partition: int) -> bool:
        """KIP-447: a pending transactional commit for this partition (OffsetFetch with
        require_stable answers UNSTABLE_OFFSET_COMMIT meanwhile)."""
        pid_part = self.groups.partition_of(group_id)
        return any(pp == pid_part and (topic, partition) in groups.get(group_id, {})
                   for (pp, _), groups in self.pending.items())

    def _recover(self, partition: int, producer_id: int) -> dict[str, dict]:
        """Read the producer's open transaction on this partition back from the log."""
        hosted = self.replicas.get(OFFSETS_TOPIC, partition)
        out: dict[str, dict] = {}
        if hosted is None or producer_id not in hosted.producers.ongoing:
            return out
        plog = hosted.log
        offset = max(hosted.producers.ongoing[producer_id], plog.log_start_offset)
        while offset < plog.log_end_offset:
            data = plog.read(offset, 8 << 20).read_bytes()
            if not data:
                break
            for h in iter_batches(data):
                offset = h.next_offset
                if h.producer_id != producer_id or h.is_control or not h.is_transactional:
                    continue
                try:
                    for rec in decode_batch(h.bytes()).records:
                        k = msgpack.unpackb(rec.key)
                        if k[0] != TXN_OFFSET_KEY:
                            continue
                        o, e, m, _ = msgpack.unpackb(rec.value)
                        out.setdefault(k[1], {})[(k[2], k[3])] = (o, e, m)
                except (DecodeError, ValueError, TypeError, IndexError,
                        msgpack.UnpackException):
                    log.warning("skipping an unreadable transactional offset commit")
        return out

    async def materialize(self, partition: int, producer_id: int, timeout_s: float) -> ErrorCode:
        pending = self.pending.get((partition, producer_id))
        if pending is None:
            pending = self._recover(partition, producer_id)
        for group_id, table in pending.items():
            entries = [(t, p, o, e, m) for (t, p), (o, e, m) in table.items()]
            err = await self.groups.store_offsets(group_id, entries, timeout_s)
            if err != ErrorCode.NONE:
                return err
        return ErrorCode.NONE

    def forget(self, partition: int, producer_id: int) -> None:
        self.pending.pop((partition, producer_id), None)
