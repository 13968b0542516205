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

import collections
import dataclasses
import itertools
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

OFFSETS_TOPIC = "__consumer_offsets"          # coordinator.OFFSETS_TOPIC (which imports us)


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
    callable; who leads the others) and connections to those leaders.

    A refresh costs what changed, not groups × partitions: the (partition → groups) index of
    what to measure is kept, and only groups the coordinator `touch`ed (their offsets changed)
    are re-indexed; of the partitions led here, only those whose high watermark, role or
    hosting changed (the replica manager's `watchers`), those of touched groups and those with
    some lag (their lag in seconds moves with the clock) are measured again — the others' lag
    is 0 messages, 0 s, as before. A change of which groups we coordinate or a failed log
    directory rebuilds everything. Partitions led elsewhere (their high watermark is only known
    there: one ListOffsets per leader) are asked for when they change here (newly wanted, a
    group's offset moved, leadership moved away) and otherwise in turn, at most
    `remote_per_refresh` of them per refresh: with 10,000 such partitions a refresh no longer
    asks about all of them, each is re-read every ceil(n / remote_per_refresh) refreshes.
    The table is updated in place, only at the rows measured (no copy per refresh).
    """

    def __init__(self, groups: GroupCoordinator, replicas: ReplicaManager,
                 image: Callable[[], MetadataImage], peers: PeerConnections, interval_s: float,
                 remote_per_refresh: int = 1000):
        self.groups = groups
        self.remote_per_refresh = max(1, remote_per_refresh)
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
        self._ts_keys: dict[tuple[str, int], set] = {}      # partition → its _timestamps keys
        self.peers = peers
        self._wanted: dict[tuple[str, int], dict[str, int]] = {}    # partition → group → offset
        self._by_group: dict[str, set[tuple[str, int]]] = {}
        self._entries: dict[tuple[str, int], list[str]] = {}        # partition → groups in table
        self._lagging: set[tuple[str, int]] = set()     # led here, some group behind
        # wanted, not led here; in the order they are asked for (least recently first)
        self._remote: dict[tuple[str, int], None] = collections.OrderedDict()
        self._touched: set[str] = set()
        self._changed: set[tuple[str, int]] = set()
        replicas.watchers.append(self._changed)
        self._basis = None                              # (ownership, log dir failed)

    def touch(self, group_id: str) -> None:
        """The group's committed offsets changed (the coordinator calls this)."""
        self._touched.add(group_id)

    async def run(self) -> None:
        while True:
            await trio.sleep(self.interval_s)
            try:
                await self.refresh()
            except Exception:  # noqa: BLE001 - lag is advisory: log, keep the broker serving
                log.exception("consumer lag refresh failed")
                self._basis = None          # what it had drained is lost: start over

    def _index(self, gid: str) -> set[tuple[str, int]]:
        """Re-index one group; returns the partitions whose groups or offsets may differ."""
        old = self._by_group.pop(gid, set())
        for tp in old:
            users = self._wanted.get(tp)
            if users is not None:
                users.pop(gid, None)
                if not users:
                    del self._wanted[tp]
        parts = self.groups.offsets.get(gid) if self.groups.owns(gid) == ErrorCode.NONE else None
        if parts:
            self._by_group[gid] = set(parts)
            for tp, value in parts.items():
                self._wanted.setdefault(tp, {})[gid] = value[0]
        return old | set(parts or ())

    def _ownership(self):
        """Changes whenever the coordinator's `owns` may answer differently for some group:
        the `__consumer_offsets` partitions, which of them are led here, which are loaded."""
        image = self._image()
        topic = image.topics.get(OFFSETS_TOPIC) if image is not None else None
        if topic is None:
            return None
        led = frozenset(p for p in topic.partitions
                        if (h := self.replicas.get(OFFSETS_TOPIC, p)) is not None
                        and h.state.role is Role.LEADER)
        return len(topic.partitions), led, frozenset(self.groups.loaded)

    def _to_measure(self) -> set[tuple[str, int]]:
        basis = (self._ownership(), self.replicas.log_dir_failed)
        if basis != self._basis:                    # coordinated groups changed: start over
            self._basis = basis
            self._wanted, self._by_group, self._touched = {}, {}, set(self.groups.offsets)
            self._changed.update(self._entries, self._remote)
        touched, self._touched = self._touched, set()
        changed = set(self._changed)
        self._changed.clear()                       # the replica manager's watcher: in place
        for gid in touched:
            changed |= self._index(gid)
        return changed | self._lagging

    def _in_turn(self, measure: set) -> list[tuple[str, int]]:
        """The next `remote_per_refresh` partitions led elsewhere (not in `measure`, which
        are asked anyway), moved to the back of the turn."""
        turn = list(itertools.islice((tp for tp in self._remote if tp not in measure),
                                     self.remote_per_refresh))
        for tp in turn:
            self._remote.move_to_end(tp)
        return turn

    async def refresh(self) -> None:
        measure = self._to_measure()
        in_turn = self._in_turn(measure)
        gone = [(gid, *tp) for tp in itertools.chain(measure, in_turn)
                for gid in self._entries.pop(tp, ())]
        table: dict = {}                # the rows measured now, put into self.table at the end
        now = int(time.time() * 1000)
        self._used = {}
        remote: dict[int, list] = {}
        asked = []
        for tp in measure:
            self._lagging.discard(tp)
            self._remote.pop(tp, None)
            if tp in self._wanted and not self._measure_here(tp, table, now):
                self._remote[tp] = None
                asked.append(tp)
        for tp in itertools.chain(asked, in_turn):
            p = self._image().partition(*tp)
            if p is not None and p.leader >= 0:
                remote.setdefault(p.leader, []).append((*tp, list(self._wanted[tp].items())))
        for leader, items in remote.items():
            with trio.move_on_after(5):
                try:
                    await self._ask_leader(leader, items, table, now)
                except (ConnectionClosed, OSError, ValueError, DecodeError) as exc:
                    log.debug("lag: leader %d unreachable: %s", leader, exc)
                    await self.peers.drop(leader)
            for topic, partition, users in items:
                self._entries[(topic, partition)] = [g for g, _ in users
                                                     if (g, topic, partition) in table]
        # no await from here on: readers see the table before or after this refresh
        for key in gone:
            if key not in table:
                self.table.pop(key, None)
        self.table.update(table)
        self._keep_timestamps(itertools.chain(measure, in_turn))

    def _keep_timestamps(self, refreshed) -> None:
        """Of the partitions measured now, keep the timestamps this refresh used; the others'
        stay for their next turn."""
        for tp in refreshed:
            for key in self._ts_keys.pop(tp, ()):
                if key not in self._used:
                    del self._timestamps[key]
        for key, ts in self._used.items():
            self._timestamps[key] = ts
            self._ts_keys.setdefault(key[:2], set()).add(key)

    def _measure_here(self, tp: tuple[str, int], table: dict, now: int) -> bool:
        """Lag of every group at a partition led here; False when it is not led here."""
        topic, partition = tp
        hosted = self.replicas.get(topic, partition)
        if hosted is None or hosted.state.role is not Role.LEADER or hosted.offline:
            return False
        hw = hosted.state.high_watermark
        for gid, committed in self._wanted[tp].items():
            ts = None
            if 0 <= committed < hw:
                ts = self._cached(topic, partition, committed, lambda: timestamp_at(
                    hosted.log.read(committed, 1, min_one=True).read_bytes(), committed))
            lag = table[(gid, topic, partition)] = compute_lag(committed, hw, ts, now)
            if lag.messages:
                self._lagging.add(tp)
        self._entries[tp] = list(self._wanted[tp])
        return True

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
