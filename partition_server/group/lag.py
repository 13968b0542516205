"""Broker-side consumer lag: for every group this broker coordinates and every partition it has
committed offsets for, how far the group is behind, in messages (high watermark − committed
offset) and in seconds (now − the timestamp of the next unconsumed record, i.e. the record at the
committed offset; 0 when nothing is unconsumed).

The timestamp is the record's own: its log-append time on topics with
`message.timestamp.type=LogAppendTime`, else the producer's create time.

Partitions led here are read locally; for the others the monitor asks their leader with
ListOffsets (latest → high watermark) and a one-batch Fetch at the committed offset, like a
client would. A refresh runs every `raftka.group.lag.interval.ms`; the table it leaves is what the
metrics endpoint (`partition_server/metrics.py`) exposes.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import TYPE_CHECKING, Callable

import trio

from common.connection import ConnectionClosed
from partition_server.replication.partition import Role
from wire.errors import DecodeError, ErrorCode
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS
from wire.records.batch import decode_batch, iter_batches

if TYPE_CHECKING:
    from metadata_quorum.image import MetadataImage
    from partition_server.group.coordinator import GroupCoordinator
    from partition_server.peers import PeerConnections
    from partition_server.replica_manager import ReplicaManager

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class PartitionLag:
    committed: int
    high_watermark: int
    messages: int
    seconds: float


def compute_lag(committed: int, high_watermark: int, next_timestamp_ms: int | None,
                now_ms: int) -> PartitionLag:
    """Pure: lag from a committed offset, the partition's high watermark and the timestamp of the
    record at the committed offset (None if unknown or nothing is unconsumed)."""
    messages = max(0, high_watermark - committed)
    if messages == 0 or next_timestamp_ms is None or next_timestamp_ms < 0:
        return PartitionLag(committed, high_watermark, messages, 0.0)
    return PartitionLag(committed, high_watermark, messages,
                        max(0.0, (now_ms - next_timestamp_ms) / 1000))


def timestamp_at(data: bytes, offset: int) -> int | None:
    """The timestamp of the first record at or after `offset` in a run of record batches."""
    for h in iter_batches(data):
        if h.next_offset <= offset:
            continue
        try:
            batch = decode_batch(h.bytes())
        except (DecodeError, ValueError):
            return None
        for rec in batch.records:
            if rec.offset >= offset:
                return rec.timestamp
    return None


class LagMonitor:
    """Given what it reads, not the broker: the group coordinator (committed offsets, which
    groups we coordinate), the replica manager (partitions we lead), the metadata image (a
    callable; who leads the others) and connections to those leaders."""

    def __init__(self, groups: GroupCoordinator, replicas: ReplicaManager,
                 image: Callable[[], MetadataImage], peers: PeerConnections, interval_s: float):
        self.groups = groups
        self.replicas = replicas
        self._image = image
        self.interval_s = interval_s
        self.table: dict[tuple[str, str, int], PartitionLag] = {}
        # (topic, partition, committed offset) → timestamp of the record there. A committed
        # record (below the high watermark) does not change, so an idle group costs one
        # ListOffsets per leader per refresh, not a Fetch per partition; entries not used by a
        # refresh are dropped.
        self._timestamps: dict[tuple[str, int, int], int | None] = {}
        self._used: dict[tuple[str, int, int], int | None] = {}
        self.peers = peers

    async def run(self) -> None:
        while True:
            await trio.sleep(self.interval_s)
            try:
                await self.refresh()
            except Exception:  # noqa: BLE001 - lag is advisory: log, keep the broker serving
                log.exception("consumer lag refresh failed")

    async def refresh(self) -> None:
        groups = self.groups
        wanted: dict[tuple[str, int], list[tuple[str, int]]] = {}
        for gid, parts in list(groups.offsets.items()):
            if groups.owns(gid) != ErrorCode.NONE:
                continue
            for (topic, partition), value in parts.items():
                wanted.setdefault((topic, partition), []).append((gid, value[0]))
        table = {}
        now = int(time.time() * 1000)
        self._used = {}
        remote: dict[int, list] = {}
        for (topic, partition), users in wanted.items():
            hosted = self.replicas.get(topic, partition)
            if hosted is not None and hosted.state.role is Role.LEADER and not hosted.offline:
                hw = hosted.state.high_watermark
                for gid, committed in users:
                    ts = None
                    if 0 <= committed < hw:
                        ts = self._cached(topic, partition, committed, lambda: timestamp_at(
                            hosted.log.read(committed, 1, min_one=True).read_bytes(), committed))
                    table[(gid, topic, partition)] = compute_lag(committed, hw, ts, now)
                continue
            p = self._image().partition(topic, partition)
            if p is not None and p.leader >= 0:
                remote.setdefault(p.leader, []).append((topic, partition, users))
        for leader, items in remote.items():
            with trio.move_on_after(5):
                try:
                    await self._ask_leader(leader, items, table, now)
                except (ConnectionClosed, OSError, ValueError, DecodeError) as exc:
                    log.debug("lag: leader %d unreachable: %s", leader, exc)
                    await self.peers.drop(leader)
        self.table = table
        self._timestamps = self._used

    def _cached(self, topic: str, partition: int, committed: int, lookup):
        key = (topic, partition, committed)
        if key in self._timestamps:
            ts = self._timestamps[key]
        else:
            ts = lookup()
        self._used[key] = ts
        return ts

    async def _ask_leader(self, leader: int, items: list, table: dict, now: int) -> None:
        conn = await self.peers.get(leader)
        lo = REQUESTS[ApiKey.LIST_OFFSETS]
        by_topic: dict[str, list[int]] = {}
        for topic, partition, _ in items:
            by_topic.setdefault(topic, []).append(partition)
        resp = await conn.request(lo(replica_id=-1, isolation_level=0, topics=[
            lo.ListOffsetsTopic(name=t, partitions=[lo.ListOffsetsPartition(
                partition_index=p, current_leader_epoch=-1, timestamp=-1) for p in ps])
            for t, ps in by_topic.items()]), 5)
        hws = {(t.name, p.partition_index): p.offset for t in resp.topics for p in t.partitions
               if p.error_code == 0}
        fr = REQUESTS[ApiKey.FETCH]
        for topic, partition, users in items:
            hw = hws.get((topic, partition))
            if hw is None:
                continue
            for gid, committed in users:
                ts = None
                key = (topic, partition, committed)
                if 0 <= committed < hw and key in self._timestamps:
                    ts = self._used[key] = self._timestamps[key]
                elif 0 <= committed < hw:
                    got = await conn.request(fr(
                        replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
                        isolation_level=0, topics=[fr.FetchTopic(topic=topic, partitions=[
                            fr.FetchPartition(partition=partition, current_leader_epoch=-1,
                                              fetch_offset=committed, log_start_offset=-1,
                                              partition_max_bytes=1)])]), 12)
                    for t in got.responses:
                        for pd in t.partitions:
                            if pd.error_code == 0 and pd.records:
                                ts = timestamp_at(bytes(pd.records), committed)
                    if ts is not None:
                        self._used[key] = ts
                table[(gid, topic, partition)] = compute_lag(committed, hw, ts, now)
