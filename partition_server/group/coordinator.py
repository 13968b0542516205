"""The group coordinator's edge (trio): ownership, offset storage, delayed Join/Sync answers.

- Group → partition of `__consumer_offsets` by Kafka's rule (`abs(java hashCode) % partitions`);
  the leader of that partition is the group's coordinator. Other brokers answer NOT_COORDINATOR;
  while a newly led partition is replayed, COORDINATOR_LOAD_IN_PROGRESS.
- Committed offsets are records in that partition, appended with acks=all semantics (the commit
  is answered once the high watermark passes it), so a new coordinator rebuilds them by replay.
  Key `[1, group, topic, partition]`, value `[offset, leader_epoch, metadata, commit_ms]` (msgpack;
  a null value deletes). Group *membership* is not persisted yet: after a coordinator failover,
  members get UNKNOWN_MEMBER_ID / ILLEGAL_GENERATION and rejoin (committed offsets are kept).
- `__consumer_offsets` is created on the first FindCoordinator for a group
  (`offsets.topic.num.partitions`, replication min(`offsets.topic.replication.factor`, brokers),
  `cleanup.policy=compact`).
"""

from __future__ import annotations

import logging
import time

import msgpack
import trio

from partition_server.group.state import GroupConfig, GroupCoordinatorState
from partition_server.replication.partition import Role
from wire.errors import ErrorCode
from wire.messages.index_generated import REQUESTS
from wire.records.batch import build_batch, decode_batch, iter_batches

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
OFFSET_KEY = 1


def java_string_hash(s: str) -> int:
    h = 0
    for ch in s.encode("utf-16-be").decode("utf-16-be"):
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(group_id: str, partitions: int) -> int:
    return (java_string_hash(group_id) & 0x7FFFFFFF) % partitions


def now_ms() -> int:
    return int(time.time() * 1000)


class GroupCoordinator:
    def __init__(self, broker):
        self.broker = broker
        self.state = GroupCoordinatorState(GroupConfig(
            initial_rebalance_delay_ms=broker.config["group.initial.rebalance.delay.ms"]))
        self.offsets: dict[str, dict[tuple[str, int], tuple]] = {}
        self.loaded: set[int] = set()
        self.waiters: dict[tuple, tuple[trio.Event, list]] = {}
        self._creating = False
        self._last_logged: dict[str, tuple] = {}

    # -- ownership --------------------------------------------------------------------------------

    def num_partitions(self) -> int:
        topic = self.broker.image.topics.get(OFFSETS_TOPIC)
        return len(topic.partitions) if topic else self.broker.config["offsets.topic.num.partitions"]

    def partition_of(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions())

    def owns(self, group_id: str) -> ErrorCode:
        if OFFSETS_TOPIC not in self.broker.image.topics:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        p = self.partition_of(group_id)
        hosted = self.broker.replicas.get(OFFSETS_TOPIC, p)
        if hosted is None or hosted.state.role is not Role.LEADER:
            return ErrorCode.NOT_COORDINATOR
        if p not in self.loaded:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return ErrorCode.NONE

    async def find(self, key: str):
        """(error, node_id, host, port) of the coordinator for group `key`."""
        image = self.broker.image
        if OFFSETS_TOPIC not in image.topics:
            await self._create_offsets_topic()
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1
        p = image.partition(OFFSETS_TOPIC, self.partition_of(key))
        b = image.brokers.get(p.leader) if p else None
        if b is None or b.fenced:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1
        return ErrorCode.NONE, b.broker_id, b.host, b.port

    async def _create_offsets_topic(self) -> None:
        if self._creating:
            return
        self._creating = True
        try:
            live = sum(1 for b in self.broker.image.brokers.values() if not b.fenced)
            cls = REQUESTS[19]
            req = cls(topics=[cls.CreatableTopic(
                name=OFFSETS_TOPIC, num_partitions=self.broker.config["offsets.topic.num.partitions"],
                replication_factor=max(1, min(self.broker.config["offsets.topic.replication.factor"], live)),
                configs=[cls.CreatableTopicConfig(name="cleanup.policy", value="compact")])],
                timeout_ms=10000)
            try:
                await self.broker.client.call_active(req, timeout_s=10, version=7,
                                                     error_of=lambda r: r.topics[0].error_code)
            except Exception as exc:  # noqa: BLE001 - the client will ask again
                log.info("creating %s failed: %s", OFFSETS_TOPIC, exc)
        finally:
            self._creating = False

    def on_image(self) -> None:
        """Load offsets of newly led partitions; forget groups of partitions we stopped leading."""
        topic = self.broker.image.topics.get(OFFSETS_TOPIC)
        if topic is None:
            return
        for pid in topic.partitions:
            hosted = self.broker.replicas.get(OFFSETS_TOPIC, pid)
            leading = hosted is not None and hosted.state.role is Role.LEADER
            if leading and pid not in self.loaded:
                self._load(pid, hosted)
            elif not leading and pid in self.loaded:
                self._unload(pid)

    def _load(self, pid: int, hosted) -> None:
        plog = hosted.log
        offset = plog.log_start_offset
        n = 0
        while offset < plog.log_end_offset:
            data = plog.read(offset, 8 << 20).read_bytes()
            if not data:
                break
            for h in iter_batches(data):
                for rec in decode_batch(h.bytes()).records:
                    self._apply_record(rec.key, rec.value)
                    n += 1
                offset = h.next_offset
        self.loaded.add(pid)
        log.info("loaded %d offset records from %s-%d", n, OFFSETS_TOPIC, pid)

    def _unload(self, pid: int) -> None:
        self.loaded.discard(pid)
        for group_id in [g for g in list(self.state.groups) if self.partition_of(g) == pid]:
            del self.state.groups[group_id]
        for group_id in [g for g in list(self.offsets) if self.partition_of(g) == pid]:
            del self.offsets[group_id]
        for key, (event, box) in list(self.waiters.items()):
            if self.partition_of(key[1]) == pid:
                box.append(ErrorCode.NOT_COORDINATOR)
                event.set()

    def _apply_record(self, key: bytes, value: bytes | None) -> None:
        try:
            k = msgpack.unpackb(key)
            if k[0] != OFFSET_KEY:
                return
            _, group, topic, partition = k
            offsets = self.offsets.setdefault(group, {})
            if value is None:
                offsets.pop((topic, partition), None)
            else:
                offsets[(topic, partition)] = tuple(msgpack.unpackb(value))
        except (ValueError, TypeError, msgpack.UnpackException):
            log.warning("skipping an unreadable %s record", OFFSETS_TOPIC)

    # -- delayed answers --------------------------------------------------------------------------

    def deliver(self, effects: list) -> None:
        from partition_server.group.state import JoinResult
        for e in effects:
            kind = "join" if isinstance(e, JoinResult) else "sync"
            for key in [k for k in self.waiters if k[0] == kind and k[2] == e.member_id]:
                event, box = self.waiters.pop(key)
                box.append(e)
                event.set()

    async def wait_for(self, kind: str, group_id: str, member_id: str, timeout_s: float):
        event, box = trio.Event(), []
        self.waiters[(kind, group_id, member_id)] = (event, box)
        with trio.move_on_after(timeout_s):
            await event.wait()
        self.waiters.pop((kind, group_id, member_id), None)
        return box[0] if box else None

    async def tick_loop(self) -> None:
        while True:
            await trio.sleep(0.1)
            self.deliver(self.state.tick(now_ms()))
            self._log_transitions()

    def _log_transitions(self) -> None:
        """One INFO line per group state change: the operator's view of rebalances."""
        seen = {}
        for gid, g in self.state.groups.items():
            now = (g.state.value, g.generation_id, len(g.members))
            seen[gid] = now
            if self._last_logged.get(gid) != now:
                log.info("group %s: %s, generation %d, %d member(s)%s", gid, *now,
                         f", protocol {g.protocol_name}" if g.protocol_name else "")
        self._last_logged = seen

    # -- offsets ----------------------------------------------------------------------------------

    async def store_offsets(self, group_id: str, entries: list[tuple], timeout_s: float = 5.0):
        """entries: [(topic, partition, offset, leader_epoch, metadata)] → ErrorCode."""
        pid = self.partition_of(group_id)
        ts = now_ms()
        records = [(msgpack.packb([OFFSET_KEY, group_id, t, p]),
                    msgpack.packb([o, e, m, ts]), [], ts) for t, p, o, e, m in entries]
        if not records:
            return ErrorCode.NONE
        res = self.broker.replicas.append_records(OFFSETS_TOPIC, pid, build_batch(records), -1, ts)
        if res.error != ErrorCode.NONE:
            return ErrorCode.NOT_COORDINATOR if res.error in (
                ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR) else res.error
        key = (OFFSETS_TOPIC, pid)
        self.broker.purgatory.notify(key)

        def done():
            return self.broker.replicas.produce_completion(OFFSETS_TOPIC, pid, res.last_offset) is not None
        await self.broker.purgatory.wait_until([key], done, timeout_s)
        outcome = self.broker.replicas.produce_completion(OFFSETS_TOPIC, pid, res.last_offset)
        if outcome is None:
            return ErrorCode.REQUEST_TIMED_OUT
        if outcome == ErrorCode.NONE:
            offsets = self.offsets.setdefault(group_id, {})
            for t, p, o, e, m in entries:
                offsets[(t, p)] = (o, e, m, ts)
            return ErrorCode.NONE
        return ErrorCode.COORDINATOR_NOT_AVAILABLE if outcome in (
            ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.NOT_ENOUGH_REPLICAS) else outcome

    def committed(self, group_id: str, topic: str, partition: int):
        return self.offsets.get(group_id, {}).get((topic, partition))
