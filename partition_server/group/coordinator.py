"""The group coordinator's edge (trio): ownership, offset storage, delayed Join/Sync answers.

- Group → partition of `__consumer_offsets` by Kafka's rule (`abs(java hashCode) % partitions`);
  the leader of that partition is the group's coordinator. Other brokers answer NOT_COORDINATOR;
  while a newly led partition is replayed, COORDINATOR_LOAD_IN_PROGRESS.
- Committed offsets are records in that partition, appended with acks=all semantics (the commit
  is answered once the high watermark passes it), so a new coordinator rebuilds them by replay.
  Key `[1, group, topic, partition]`, value `[offset, leader_epoch, metadata, commit_ms]` (msgpack;
  a null value deletes).
- Group membership is persisted too, once per settled generation (Stable or Empty): key
  `[2, group]`, value `[protocol_type, generation, protocol, leader, members, state_ms]` (see
  `group_record`). A new coordinator restores the group in that generation, so members keep
  heartbeating through a failover without a rebalance; a member that doesn't heartbeat the new
  coordinator within its session timeout is expired as usual. A record written just before a
  crash may be lost (it is not waited for): members of a newer generation then get
  ILLEGAL_GENERATION and rejoin — never two owners of a partition in one generation.
- KIP-848 groups are persisted whenever their state changes: key `[3, group]`, value from
  `consumer_group_record` (group epoch, assignment epoch, members with epochs and assignments).
  A member whose epoch is behind a lost record is fenced (FENCED_MEMBER_EPOCH) and rejoins.
- Offsets of a group without members expire `offsets.retention.minutes` after it emptied
  (tombstones are written, and an Empty group left with no offsets is deleted). DeleteGroups and
  OffsetDelete write tombstones and answer once they are committed.
- `__consumer_offsets` is created on the first FindCoordinator for a group
  (`offsets.topic.num.partitions`, replication min(`offsets.topic.replication.factor`, brokers),
  `cleanup.policy=compact`).

Collaborators, given at construction (so the coordinator is built and tested without a broker):
the broker config, the replica manager (its `__consumer_offsets` partitions), the purgatory
(commit waits), the current metadata image (a callable: the broker replaces its image as
metadata arrives), the call to the active controller (creating the offsets topic) and the
connections to other brokers (the lag monitor's).
"""

from __future__ import annotations

import functools
import logging
import time
from typing import TYPE_CHECKING, Awaitable, Callable

import msgpack
import trio

from common.clock import steady_ms
from partition_server.coordinator_append import (coordinator_error, store_error,
                                                  wait_committed)
from partition_server.coordinator_load import CoordinatorLoads
from partition_server.group.consumer_group import (ConsumerGroupCoordinatorState,
                                                   consumer_group_record, restore_consumer_group)
from partition_server.group.lag import LagMonitor
from partition_server.group.offset_expiry import OffsetExpiry
from partition_server.group.replay import (CONSUMER_GROUP_KEY, GROUP_KEY, OFFSET_KEY,
                                           LoadedOffsets)
from partition_server.group.state import (GroupConfig, GroupCoordinatorState, GroupState,
                                          StoreGroup, group_record, restore_group,
                                          subscribed_topics)
from partition_server.replication.partition import Role
from wire.errors import ErrorCode
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS
from wire.records.batch import build_batch

if TYPE_CHECKING:
    from metadata_quorum.image import MetadataImage
    from partition_server.config import BrokerConfig
    from partition_server.peers import PeerConnections
    from partition_server.purgatory import Purgatory
    from partition_server.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"

GROUP_STORE_TIMEOUT_S = 5.0    # Kafka's offsets.commit.timeout.ms
IDLE_TICK_S = 1.0              # the tick loop's longest wait without groups (see _ticks)


@functools.lru_cache(maxsize=4096)
def java_string_hash(s: str) -> int:
    """Java's String.hashCode (the coordinator partition of a group or transactional id):
    remembered, as every transactional request and KIP-890 verification asks it (1 % of the
    coordinator's CPU in the transactions benchmark)."""
    h = 0
    for ch in s.encode("utf-16-be").decode("utf-16-be"):
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(group_id: str, partitions: int) -> int:
    return (java_string_hash(group_id) & 0x7FFFFFFF) % partitions


def now_ms() -> int:
    """Wall clock: commit and record timestamps (offsets expire by them)."""
    return int(time.time() * 1000)


class GroupCoordinator:
    def __init__(self, config: BrokerConfig, replicas: ReplicaManager, purgatory: Purgatory,
                 image: Callable[[], MetadataImage], call_controller: Callable[..., Awaitable],
                 peers: PeerConnections):
        self.config = cfg = config
        self.replicas = replicas
        self.purgatory = purgatory
        self._image = image
        self._call_controller = call_controller     # ControllerClient.call_active
        self.state = GroupCoordinatorState(GroupConfig(
            min_session_timeout_ms=cfg["group.min.session.timeout.ms"],
            max_session_timeout_ms=cfg["group.max.session.timeout.ms"],
            initial_rebalance_delay_ms=cfg["group.initial.rebalance.delay.ms"]))
        # KIP-848 groups live beside classic ones; a group id is one or the other
        self.lag = LagMonitor(self, replicas, image, peers,
                              cfg["raftka.group.lag.interval.ms"] / 1000)
        self.consumer = ConsumerGroupCoordinatorState(
            cfg["group.consumer.session.timeout.ms"], cfg["group.consumer.heartbeat.interval.ms"])
        # `raftka.offsets.retention.ms` (not a Kafka name) overrides the minutes, for tests and
        # for operators who want a finer setting.
        self.retention_ms = cfg["raftka.offsets.retention.ms"] or \
            cfg["offsets.retention.minutes"] * 60_000
        self.retention_check_ms = cfg["offsets.retention.check.interval.ms"]
        # which groups an expiry check looks at: touched ones, due ones (offset_expiry.py)
        self.expiry = OffsetExpiry(self.retention_ms)
        self._persisted: dict[str, list] = {}        # group → last group record written/loaded
        self._persisted_at: dict[tuple, int] = {}    # ("consumer", group) → offset it went to
        self._empty_since: dict[str, int] = {}       # group → when it last became Empty
        self.offsets: dict[str, dict[tuple[str, int], tuple]] = {}
        self.loaded: set[int] = set()
        self.loads = CoordinatorLoads(OFFSETS_TOPIC, replicas)    # replays under way
        self.waiters: dict[tuple, tuple[trio.Event, list]] = {}
        self._creating = False
        self._last_logged: dict[tuple, tuple] = {}    # (kind, group) → what was last logged
        self._dirty: set[str] = set()                 # changed classic groups to persist/log
        self._dirty_consumer: set[str] = set()        # changed KIP-848 groups
        self._wake = trio.Event()                      # see _ticks

    # -- ownership --------------------------------------------------------------------------------

    def num_partitions(self) -> int:
        topic = self._image().topics.get(OFFSETS_TOPIC)
        return len(topic.partitions) if topic else self.config["offsets.topic.num.partitions"]

    def partition_of(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions())

    def owns(self, group_id: str) -> ErrorCode:
        if OFFSETS_TOPIC not in self._image().topics:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        p = self.partition_of(group_id)
        hosted = self.replicas.get(OFFSETS_TOPIC, p)
        if hosted is None or hosted.state.role is not Role.LEADER:
            return ErrorCode.NOT_COORDINATOR
        if p not in self.loaded:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return ErrorCode.NONE

    async def find(self, key: str):
        """(error, node_id, host, port) of the coordinator for group `key`."""
        image = self._image()
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
            live = sum(1 for b in self._image().brokers.values() if not b.fenced)
            cls = REQUESTS[ApiKey.CREATE_TOPICS]
            req = cls(topics=[cls.CreatableTopic(
                name=OFFSETS_TOPIC, num_partitions=self.config["offsets.topic.num.partitions"],
                replication_factor=max(1, min(self.config["offsets.topic.replication.factor"], live)),
                configs=[cls.CreatableTopicConfig(name="cleanup.policy", value="compact"),
                         cls.CreatableTopicConfig(
                             name="segment.bytes",
                             value=str(self.config["offsets.topic.segment.bytes"]))])],
                timeout_ms=10000)
            try:
                await self._call_controller(req, timeout_s=10, version=7,
                                            error_of=lambda r: r.topics[0].error_code)
            except Exception as exc:  # noqa: BLE001 - the client will ask again
                log.info("creating %s failed: %s", OFFSETS_TOPIC, exc)
        finally:
            self._creating = False

    def on_image(self) -> None:
        """Load offsets of newly led partitions (coordinator_load.py: in slices, answering
        COORDINATOR_LOAD_IN_PROGRESS meanwhile); forget groups of partitions we stopped leading."""
        for pid, hosted in self.loads.partitions(self._image()):
            if hosted is None:
                if pid in self.loaded:
                    self._unload(pid)
            elif pid not in self.loaded and not self.loads.loading(pid, hosted):
                acc = LoadedOffsets()
                self.loads.start(pid, hosted, acc.apply,
                                 lambda replay, acc=acc: self._install(replay, acc))

    def _install(self, replay, acc: LoadedOffsets) -> None:
        """A replay reached the log's end: its groups and offsets become the coordinator's."""
        pid = replay.pid
        now = steady_ms()            # member sessions restart from now (see common/clock)
        for gid, table in acc.offsets.items():
            if table:
                self.offsets[gid] = table
            self._touch(gid)
        for gid, value in acc.groups.items():
            if value is None:
                continue
            try:
                self.state.restored(restore_group(gid, value[:5], now), now)
            except (ValueError, TypeError):
                log.warning("skipping an unreadable group record for %s", gid)
                continue
            self._persisted[gid] = value[:5]
            if not value[4]:
                self._empty_since[gid] = value[5]
                self._touch(gid)
        for gid, value in acc.consumer_groups.items():
            if value is None:
                continue
            try:
                self.consumer.restored(restore_consumer_group(gid, value, now), now)
            except (ValueError, TypeError):
                log.warning("skipping an unreadable consumer group record for %s", gid)
                continue
            self._persisted[("consumer", gid)] = value
        self.loaded.add(pid)
        self.wake()
        log.info("loaded %d records (%d groups) from %s-%d", replay.records,
                 sum(v is not None for v in acc.groups.values()) +
                 sum(v is not None for v in acc.consumer_groups.values()), OFFSETS_TOPIC, pid)

    def _unload(self, pid: int) -> None:
        self.loaded.discard(pid)
        for table in (self.state.groups, self.consumer.groups, self.offsets, self._persisted,
                      self._empty_since, self._persisted_at, self._last_logged):
            for key in list(table):
                group_id = key[1] if isinstance(key, tuple) else key
                if self.partition_of(group_id) == pid:
                    del table[key]
        for key, (event, box) in list(self.waiters.items()):
            if self.partition_of(key[1]) == pid:
                box.append(ErrorCode.NOT_COORDINATOR)
                event.set()

    # -- delayed answers --------------------------------------------------------------------------

    def deliver(self, effects: list) -> None:
        from partition_server.group.state import JoinResult
        self.wake()                     # handlers deliver after each change, a first join too
        for e in effects:
            if isinstance(e, StoreGroup):
                self._nursery.start_soon(self._store_group, e.group_id, e.generation_id)
                continue
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
        async with trio.open_nursery() as nursery:
            self._nursery = nursery               # generation stores run here (see deliver)
            nursery.start_soon(self.loads.run)
            await self._ticks()

    def wake(self) -> None:
        self._wake.set()                # a group may have appeared: see _ticks

    async def _ticks(self) -> None:
        """Every 100 ms while there are groups: due timers, then the groups changed since the
        last tick are logged and persisted (the offsets expiry every
        offsets.retention.check.interval.ms). Without groups it waits for `wake` (a join, a
        KIP-848 heartbeat, groups loaded) or IDLE_TICK_S: ten wake-ups a second of every idle
        broker were a visible share of an idle cluster's CPU (issue #23)."""
        next_expiry = now_ms() + self.retention_check_ms
        while True:
            if not (self.state.groups or self.consumer.groups or self._dirty or
                    self._dirty_consumer or self.state.changed or self.consumer.changed):
                self._wake = trio.Event()
                with trio.move_on_after(IDLE_TICK_S):
                    await self._wake.wait()
            await trio.sleep(0.1)
            now = steady_ms()            # sessions: a wall-clock jump must not expire them all
            self.deliver(self.state.tick(now))
            for gid, mid, why in self.consumer.tick(now, self.topics_snapshot()):
                log.info("group %s: member %s removed (%s)", gid, mid, why)
            self._dirty |= self.state.take_changed()
            self._dirty_consumer |= self.consumer.take_changed()
            self._log_transitions()
            self._persist_groups(now)
            wall = now_ms()
            if wall >= next_expiry or next_expiry - wall > 2 * self.retention_check_ms:
                next_expiry = wall + self.retention_check_ms
                self._expire_offsets(wall)

    def _log_transitions(self) -> None:
        """One INFO line per group state change: the operator's view of rebalances. Looks at
        the groups changed since the last tick only."""
        for gid in self._dirty:
            g = self.state.groups.get(gid)
            if g is None:
                self._last_logged.pop(("classic", gid), None)
                continue
            now = (g.state.value, g.generation_id, len(g.members))
            if self._last_logged.get(("classic", gid)) != now:
                self._last_logged[("classic", gid)] = now
                log.info("group %s: %s, generation %d, %d member(s)%s", gid, *now,
                         f", protocol {g.protocol_name}" if g.protocol_name else "")
        for gid in self._dirty_consumer:
            g = self.consumer.groups.get(gid)
            if g is None:
                self._last_logged.pop(("consumer", gid), None)
                continue
            now = (g.state, g.group_epoch, len(g.members))
            if self._last_logged.get(("consumer", gid)) != now:
                self._last_logged[("consumer", gid)] = now
                log.info("consumer group %s: %s, epoch %d, %d member(s), assignor %s", gid, *now,
                         g.assignor)

    def topics_snapshot(self) -> dict:
        """{name: (topic id, partitions)} of the user topics, for server-side assignment.
        Computed once per metadata image: the tick asks for it ten times a second."""
        image = self._image()
        cached = getattr(self, "_topics_snapshot", None)
        if cached is None or cached[0] is not image:
            cached = self._topics_snapshot = (image, {
                name: (t.topic_id, len(t.partitions)) for name, t in image.topics.items()
                if not name.startswith("__")})
        return cached[1]

    def is_consumer_group(self, group_id: str) -> bool:
        g = self.consumer.groups.get(group_id)
        return g is not None and bool(g.members)

    def is_classic_group(self, group_id: str) -> bool:
        g = self.state.groups.get(group_id)
        return g is not None and bool(g.members)

    # -- persistence ------------------------------------------------------------------------------

    def _append(self, pid: int, records: list) -> tuple[ErrorCode, int]:
        ts = now_ms()
        res = self.replicas.append_records(
            OFFSETS_TOPIC, pid, build_batch([(k, v, [], ts) for k, v in records]), -1, ts)
        if res.error == ErrorCode.NONE:
            self.purgatory.notify((OFFSETS_TOPIC, pid))
        return res.error, res.last_offset

    def _persist_groups(self, now: int) -> None:
        """Write the group record of every changed group whose settled generation changed. A
        group whose append failed stays dirty and is tried again on the next tick."""
        dirty, self._dirty = self._dirty, set()
        for gid in dirty:
            g = self.state.groups.get(gid)
            owns = self.owns(gid)
            if owns == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
                self._dirty.add(gid)        # ours in a moment
            if g is None or owns != ErrorCode.NONE or g.storing is not None:
                continue                    # a generation being stored is _store_group's
            if g.state is GroupState.EMPTY and gid not in self._empty_since:
                self._empty_since[gid] = now
                self._touch(gid)
            elif g.members and self._empty_since.pop(gid, None) is not None:
                self._touch(gid)
            rec = group_record(g)
            if rec is None or rec == self._persisted.get(gid):
                continue
            value = msgpack.packb(rec + [self._empty_since.get(gid, now)])
            err, _ = self._append(self.partition_of(gid), [(msgpack.packb([GROUP_KEY, gid]), value)])
            if err == ErrorCode.NONE:
                self._persisted[gid] = rec
            else:
                self._dirty.add(gid)
        dirty, self._dirty_consumer = self._dirty_consumer, set()
        for gid in dirty:
            g = self.consumer.groups.get(gid)
            if g is None or self.owns(gid) != ErrorCode.NONE:
                continue
            rec = consumer_group_record(g)
            if rec == self._persisted.get(("consumer", gid)):
                continue
            if self._append_consumer_group(gid, rec) != ErrorCode.NONE:
                self._dirty_consumer.add(gid)

    def _append_consumer_group(self, gid: str, rec: list) -> ErrorCode:
        """Append a KIP-848 group's record (not waiting for it to commit) and remember it and
        its offset."""
        err, last = self._append(self.partition_of(gid),
                                 [(msgpack.packb([CONSUMER_GROUP_KEY, gid]), msgpack.packb(rec))])
        if err == ErrorCode.NONE:
            self._persisted[("consumer", gid)] = rec
            self._persisted_at[("consumer", gid)] = last
        return err

    async def persist_consumer_group(self, gid: str) -> ErrorCode:
        """Make the KIP-848 group's current record committed before a heartbeat answer shows
        it (as Kafka's coordinator runtime answers only once its records are committed): a new
        epoch or assignment a member acts on then survives a coordinator failover, so the member
        is not fenced for it. Written here if it changed, else waits for the last write (the
        tick may have written it a moment ago)."""
        key = ("consumer", gid)
        g = self.consumer.groups.get(gid)
        self.wake()
        if g is not None:
            rec = consumer_group_record(g)
            if rec != self._persisted.get(key):
                err = self._append_consumer_group(gid, rec)
                if err != ErrorCode.NONE:
                    return coordinator_error(err)
        last = self._persisted_at.get(key)
        if last is None:
            return ErrorCode.NONE
        return await wait_committed(self.replicas, self.purgatory, OFFSETS_TOPIC,
                                    self.partition_of(gid), last, GROUP_STORE_TIMEOUT_S)

    async def _store_group(self, gid: str, generation: int) -> None:
        """Make the group record of a generation the leader just assigned durable (acks=all),
        then answer the members' SyncGroups (Kafka's storeGroup). A failed store answers them
        with the error and rebalances."""
        g = self.state.groups.get(gid)
        rec = group_record(g) if g is not None and g.storing == generation else None
        if rec is None:
            return                          # overtaken by a rebalance, which answered everyone
        value = msgpack.packb(rec + [self._empty_since.get(gid, steady_ms())])
        err = await self._append_and_wait(self.partition_of(gid),
                                          [(msgpack.packb([GROUP_KEY, gid]), value)],
                                          GROUP_STORE_TIMEOUT_S)
        if err == ErrorCode.NONE:
            if self.owns(gid) == ErrorCode.NONE:     # not unloaded meanwhile
                self._persisted[gid] = rec
        else:
            log.warning("group %s: generation %d not stored (%s): rebalancing", gid, generation,
                        err.name)
        self.deliver(self.state.stored(gid, generation, store_error(err), steady_ms()))

    def _expire_offsets(self, now: int) -> None:
        """Looks at the groups due or changed since the last check only (offset_expiry.py)."""
        gone, looked = self.expiry.expired(now, self.offsets, self.state.groups,
                                           self._empty_since)
        self._expire_some(gone)
        self.expiry.file(looked, self.offsets, self.state.groups, self._empty_since)

    def _expire_some(self, gone: dict) -> None:
        for gid, parts in gone.items():
            if self.owns(gid) != ErrorCode.NONE:
                continue
            records = [(msgpack.packb([OFFSET_KEY, gid, t, p]), None) for t, p in parts]
            left = set(self.offsets.get(gid, {})) - set(parts)
            g = self.state.groups.get(gid)
            if not left and (g is None or not g.members):
                records.append((msgpack.packb([GROUP_KEY, gid]), None))
            err, _ = self._append(self.partition_of(gid), records)
            if err != ErrorCode.NONE:
                continue
            log.info("group %s: %d committed offset(s) expired", gid, len(parts))
            self._forget_offsets(gid, parts)
            if not left and (g is None or not g.members):
                self._forget_group(gid)

    def _touch(self, gid: str) -> None:
        """Its offsets or emptiness changed: the expiry and the lag monitor look again."""
        self.expiry.touch(gid)
        self.lag.touch(gid)

    def _forget_offsets(self, gid: str, parts) -> None:
        self._touch(gid)
        offsets = self.offsets.get(gid, {})
        for tp in parts:
            offsets.pop(tp, None)
        if not offsets:
            self.offsets.pop(gid, None)

    def _forget_group(self, gid: str) -> None:
        self._touch(gid)
        self._dirty.add(gid)                # its last logged state is dropped on the next tick
        self.state.groups.pop(gid, None)
        self._persisted.pop(gid, None)
        self._empty_since.pop(gid, None)

    async def _append_and_wait(self, pid: int, records: list, timeout_s: float) -> ErrorCode:
        """Append to our `__consumer_offsets` partition and wait until the high watermark passes
        it (acks=all), mapping partition errors to what group clients expect."""
        err, last = self._append(pid, records)
        if err != ErrorCode.NONE:
            return coordinator_error(err)
        return await wait_committed(self.replicas, self.purgatory, OFFSETS_TOPIC, pid, last,
                                    timeout_s)

    # -- offsets ----------------------------------------------------------------------------------

    async def store_offsets(self, group_id: str, entries: list[tuple], timeout_s: float = 5.0):
        """entries: [(topic, partition, offset, leader_epoch, metadata)] → ErrorCode."""
        ts = now_ms()
        records = [(msgpack.packb([OFFSET_KEY, group_id, t, p]), msgpack.packb([o, e, m, ts]))
                   for t, p, o, e, m in entries]
        if not records:
            return ErrorCode.NONE
        err = await self._append_and_wait(self.partition_of(group_id), records, timeout_s)
        if err == ErrorCode.NONE:
            self._touch(group_id)
            offsets = self.offsets.setdefault(group_id, {})
            for t, p, o, e, m in entries:
                offsets[(t, p)] = (o, e, m, ts)
        return err

    def committed(self, group_id: str, topic: str, partition: int):
        return self.offsets.get(group_id, {}).get((topic, partition))

    async def delete_group(self, group_id: str, timeout_s: float = 5.0) -> ErrorCode:
        """DeleteGroups: only a group without members; its offsets and record get tombstones."""
        g = self.state.groups.get(group_id)
        cg = self.consumer.groups.get(group_id)
        if (g is not None and g.members) or (cg is not None and cg.members):
            return ErrorCode.NON_EMPTY_GROUP
        if g is None and cg is None and group_id not in self.offsets:
            return ErrorCode.GROUP_ID_NOT_FOUND
        records = [(msgpack.packb([OFFSET_KEY, group_id, t, p]), None)
                   for t, p in self.offsets.get(group_id, {})]
        records.append((msgpack.packb([GROUP_KEY, group_id]), None))
        if cg is not None:
            records.append((msgpack.packb([CONSUMER_GROUP_KEY, group_id]), None))
        err = await self._append_and_wait(self.partition_of(group_id), records, timeout_s)
        if err == ErrorCode.NONE:
            self.offsets.pop(group_id, None)
            self._forget_group(group_id)
            self.consumer.groups.pop(group_id, None)
            self._dirty_consumer.add(group_id)
            self._persisted.pop(("consumer", group_id), None)
            self._persisted_at.pop(("consumer", group_id), None)
        return err

    def subscribed_topics(self, group_id: str) -> set[str] | None:
        """Topics the group's consumers subscribe to; None means "can't tell, assume all"."""
        return subscribed_topics(self.state.groups.get(group_id))

    async def delete_offsets(self, group_id: str, parts: list[tuple[str, int]],
                             timeout_s: float = 5.0) -> tuple[ErrorCode, dict]:
        """OffsetDelete → (group error, {(topic, partition): error})."""
        g = self.state.groups.get(group_id)
        if g is None and group_id not in self.offsets:
            return ErrorCode.GROUP_ID_NOT_FOUND, {}
        subscribed = self.subscribed_topics(group_id)
        errors, doomed = {}, []
        for t, p in parts:
            if subscribed is None or t in subscribed:
                errors[(t, p)] = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
            else:
                errors[(t, p)] = ErrorCode.NONE
                if (t, p) in self.offsets.get(group_id, {}):
                    doomed.append((t, p))
        if doomed:
            records = [(msgpack.packb([OFFSET_KEY, group_id, t, p]), None) for t, p in doomed]
            err = await self._append_and_wait(self.partition_of(group_id), records, timeout_s)
            if err != ErrorCode.NONE:
                return err, {}
            self._forget_offsets(group_id, doomed)
        return ErrorCode.NONE, errors
