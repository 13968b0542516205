"""Our consumer: trio-native (`Consumer`), with a blocking facade in `sync.py`.

    async with Consumer("127.0.0.1:9092", {"group.id": "g", "auto.offset.reset": "earliest"}) as c:
        c.subscribe(["orders"])                 # or c.subscribe("^orders-.*") / c.assign([...])
        while True:
            for record in await c.poll(1000):
                ...
            await c.commit()

Like Kafka's consumer, group work happens inside `poll`: joining (and so the rebalance
listeners) runs in the caller's task, while heartbeats run in a background task of the
consumer's own nursery. A member that stops polling for longer than `max.poll.interval.ms` (the
rebalance timeout) is dropped from the group when the group next rebalances.

Positions: each assigned partition has a position (the offset of the next record `poll` returns).
A partition without one gets its committed offset, else `auto.offset.reset` (earliest, latest,
or none: raise). `seek*` replace the position and drop anything buffered for the partition.

Config keys are Kafka's, typed and documented in one table (config.py: `CONSUMER`, with its
defaults); keyword arguments with underscores (group_id=...) work too.

`group.protocol=consumer` joins with KIP-848's ConsumerGroupHeartbeat instead of
JoinGroup/SyncGroup (group/kip848_member.py): the coordinator assigns (its `uniform` or
`range` assignor, `group.remote.assignor`), heartbeats run in the background, and partitions
move one member at a time: revoke (commit with auto-commit, on_revoked) before anyone else gets
them. A fenced member's partitions go to on_lost (default: on_revoked) with no commit.
session.timeout.ms, heartbeat.interval.ms and partition.assignment.strategy are then the
coordinator's (group.consumer.* on the broker): setting one is a ConfigError, as in Kafka.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import re
from typing import Callable, Iterable

import trio

from clients.consumer.assignors import get_assignor
from clients.cluster import Cluster
from clients.consumer.offsets import (EARLIEST, LATEST, NoOffsetForPartitionError, drop_on_cancel,
                                      list_offsets)
from clients.errors import KafkaConnectionError, KafkaTimeoutError, Retry, check, classify
from clients.consumer.fetcher import (READ_COMMITTED, READ_UNCOMMITTED, ConsumerRecord,
                                      TopicPartition, parse_partition)
from clients.consumer.config import parse_config
from clients.consumer.group.listeners import call_listener
from clients.consumer.group.classic_rebalance import ensure_classic_group
from clients.consumer.group.kip848_member import ConsumerGroupMember
from clients.consumer.group.classic_member import GroupMember
from clients.consumer.group.coordinator import CommitFailedError
from common.security import ClientSecurity
from wire.errors import DecodeError, ErrorCode, KafkaError
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS

log = logging.getLogger("raftka.consumer")

LEADER_ERRORS = {ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                 ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.FENCED_LEADER_EPOCH,
                 ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.REPLICA_NOT_AVAILABLE,
                 ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.OFFSET_NOT_AVAILABLE}


class Consumer:
    def __init__(self, bootstrap_servers: str | None = None, config: dict | None = None,
                 *, security: ClientSecurity | None = None, **kwargs):
        cfg = parse_config(config, kwargs)
        if bootstrap_servers is not None:
            cfg["bootstrap.servers"] = bootstrap_servers
        self.config = cfg
        self.group_id: str | None = cfg["group.id"] or None
        self.isolation_level = (READ_COMMITTED if cfg["isolation.level"] == "read_committed"
                                else READ_UNCOMMITTED)
        self.cluster = Cluster.from_config(cfg, security)
        strategies = cfg["partition.assignment.strategy"]
        if isinstance(strategies, str):
            strategies = [s for s in strategies.split(",") if s.strip()]
        self.assignors = [s if not isinstance(s, str) else get_assignor(s) for s in strategies]
        self.member: GroupMember | ConsumerGroupMember | None = None
        if self.group_id and cfg["group.protocol"] == "consumer":
            self.member = ConsumerGroupMember(
                self.cluster, self.group_id,
                rebalance_timeout_ms=cfg["max.poll.interval.ms"],
                group_instance_id=cfg["group.instance.id"],
                server_assignor=cfg["group.remote.assignor"],
                retry_backoff_ms=cfg["retry.backoff.ms"])
            # wake a waiting poll when there is a reconciliation to run
            self.member.on_change = lambda: self._fetched.set()
        elif self.group_id:
            self.member = GroupMember(
                self.cluster, self.group_id, self.assignors,
                session_timeout_ms=cfg["session.timeout.ms"],
                rebalance_timeout_ms=cfg["max.poll.interval.ms"],
                heartbeat_interval_ms=cfg["heartbeat.interval.ms"],
                group_instance_id=cfg["group.instance.id"],
                retry_backoff_ms=cfg["retry.backoff.ms"])
        self._topics: list[str] = []            # subscribed topics (resolved from a pattern)
        self._pattern: re.Pattern | None = None
        self._pattern_checked = float("-inf")
        self._on_assigned: Callable | None = None
        self._on_revoked: Callable | None = None
        self._on_lost: Callable | None = None
        self._manual = False
        self._assigned: list[TopicPartition] = []
        self._positions: dict[TopicPartition, int] = {}
        self._epochs: dict[TopicPartition, int] = {}
        self._resets: dict[TopicPartition, int] = {}       # tp -> EARLIEST / LATEST
        self._buffer: dict[TopicPartition, tuple[collections.deque, int]] = {}
        self._paused: set[TopicPartition] = set()
        self._in_flight: set[TopicPartition] = set()       # partitions in a Fetch being sent
        self._in_flight_nodes: set[int] = set()            # leaders with a Fetch in flight
        self._fetched = trio.Event()                       # set when a Fetch completes
        self._fetch_errors: list[KafkaError] = []          # from background fetches
        self._need_refresh = False
        self._next_auto_commit = 0.0
        self._last_poll = 0.0
        self._stack: contextlib.AsyncExitStack | None = None
        self._nursery: trio.Nursery | None = None
        self._scopes: set[trio.CancelScope] = set()     # background tasks close() cancels
        self._rr = 0
        self.closed = False

    # -- lifecycle -------------------------------------------------------------------------------

    async def start(self, nursery: trio.Nursery | None = None) -> "Consumer":
        """Connect and start background work (heartbeats, async commits) in `nursery`, or in
        a nursery of our own when None (then start and close must run in the same task, as
        `async with` does; the blocking facade passes its loop's nursery)."""
        await self.cluster.start()
        if nursery is None:
            self._stack = contextlib.AsyncExitStack()
            nursery = await self._stack.enter_async_context(trio.open_nursery())
        self._nursery = nursery
        if self.member is not None:
            nursery.start_soon(self._in_scope, self.member.heartbeat_loop)
            nursery.start_soon(self._in_scope, self._poll_interval_watchdog)
        self._next_auto_commit = trio.current_time() + self._auto_commit_interval
        return self

    async def _in_scope(self, fn, *args) -> None:
        """Run a background task that close() can cancel even in a caller's nursery."""
        if self.closed:
            return
        with trio.CancelScope() as scope:
            self._scopes.add(scope)
            try:
                await fn(*args)
            finally:
                self._scopes.discard(scope)

    async def __aenter__(self) -> "Consumer":
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def close(self, commit: bool = True) -> None:
        """Commit (with auto commit), call on_revoked, leave the group, stop background work."""
        if self.closed:
            return
        self.closed = True
        try:
            # shielded: a consumer closed because its task is being cancelled still commits
            # and leaves (bounded), or the group waits a whole session timeout for it
            with trio.move_on_after(15) as cleanup:
                cleanup.shield = True
                if self.member is not None and not self._manual and self._assigned:
                    if commit and self.config["enable.auto.commit"] and self.member.stable:
                        with contextlib.suppress(KafkaError):
                            await self.commit()
                    await call_listener(self._on_revoked, list(self._assigned))
                if self.member is not None and self.member.member_id:
                    await self.member.leave()
        finally:
            for scope in list(self._scopes):
                scope.cancel()
            if self._stack is not None:
                self._nursery.cancel_scope.cancel()
                await self._stack.aclose()
                self._stack = None
            self._nursery = None
            await self.cluster.aclose()

    async def _poll_interval_watchdog(self) -> None:
        """Leave the group when the application has not called poll for max.poll.interval.ms
        (Kafka's heartbeat thread does the same): heartbeats alone must not keep a stuck
        consumer's partitions from the rest of the group. The next poll rejoins."""
        limit = self.config["max.poll.interval.ms"] / 1000
        while True:
            await trio.sleep(min(1.0, limit / 4))
            member = self.member
            if member.stable and trio.current_time() - self._last_poll > limit:
                log.warning("group %s: poll not called for %.1f s (max.poll.interval.ms); "
                            "leaving the group", self.group_id, limit)
                await member.leave()

    @property
    def _auto_commit_interval(self) -> float:
        return self.config["auto.commit.interval.ms"] / 1000

    # -- subscription / assignment ---------------------------------------------------------------

    def subscribe(self, topics: Iterable[str] | str | re.Pattern, *,
                  on_assigned: Callable | None = None, on_revoked: Callable | None = None,
                  on_lost: Callable | None = None, listener=None) -> None:
        """Join the group for `topics` (a list), or for every topic matching a pattern (a
        compiled regex, or a string starting with "^" as librdkafka spells it). Listeners get
        lists of TopicPartition and may be sync or async; on_lost (partitions taken from us
        after we were dropped from the group: no commit) defaults to on_revoked, as Kafka's
        onPartitionsLost. With group.protocol=consumer the coordinator matches a pattern
        against whole topic names."""
        if self.member is None:
            raise ValueError("subscribe needs group.id (use assign() without a group)")
        if self._manual:
            raise ValueError("subscribe after assign: call unsubscribe() first")
        if isinstance(topics, re.Pattern) or (isinstance(topics, str) and topics.startswith("^")):
            self._pattern = re.compile(topics) if isinstance(topics, str) else topics
            self._topics = []
            self._pattern_checked = float("-inf")
            self.cluster.want_all_topics(True)
        else:
            names = [topics] if isinstance(topics, str) else list(topics)
            if not names or any(not isinstance(t, str) or not t for t in names):
                raise ValueError("subscribe needs a non-empty list of topic names")
            self._pattern = None
            self._topics = sorted(set(names))
            self.cluster.add_topics(self._topics)
        if listener is not None:
            on_assigned = getattr(listener, "on_partitions_assigned", on_assigned)
            on_revoked = getattr(listener, "on_partitions_revoked", on_revoked)
            on_lost = getattr(listener, "on_partitions_lost", on_lost)
        self._on_assigned, self._on_revoked, self._on_lost = on_assigned, on_revoked, on_lost
        self.member.rejoin_needed = True

    def subscription(self) -> list[str]:
        return list(self._topics)

    def assign(self, partitions: Iterable) -> None:
        """Manual assignment: no group membership, no rebalances (commits still go to group.id
        if one is set)."""
        if self._topics or self._pattern is not None:
            raise ValueError("assign after subscribe: call unsubscribe() first")
        tps = [TopicPartition(*tp) for tp in partitions]
        self._manual = True
        self._set_assignment(tps)
        self.cluster.add_topics({tp.topic for tp in tps})

    async def unsubscribe(self) -> None:
        if self.member is not None and not self._manual and self.member.member_id:
            await call_listener(self._on_revoked, list(self._assigned))
            await self.member.leave()
        self._topics, self._pattern, self._manual = [], None, False
        self._set_assignment([])

    def assignment(self) -> list[TopicPartition]:
        return list(self._assigned)

    def _set_assignment(self, tps: list[TopicPartition]) -> None:
        keep = set(tps)
        self._assigned = sorted(keep)
        for d in (self._positions, self._epochs, self._resets, self._buffer):
            for tp in [tp for tp in d if tp not in keep]:
                del d[tp]
        self._paused &= keep

    # -- positions -------------------------------------------------------------------------------

    def seek(self, tp, offset: int) -> None:
        tp = self._owned(tp)
        if offset < 0:
            raise ValueError(f"seek offset must be >= 0, got {offset}")
        self._positions[tp] = offset
        self._resets.pop(tp, None)
        self._buffer.pop(tp, None)

    def seek_to_beginning(self, tps: Iterable | None = None) -> None:
        self._seek_to(tps, EARLIEST)

    def seek_to_end(self, tps: Iterable | None = None) -> None:
        self._seek_to(tps, LATEST)

    def _seek_to(self, tps, spec: int) -> None:
        for tp in (self._assigned if tps is None else [self._owned(t) for t in tps]):
            self._positions.pop(tp, None)
            self._buffer.pop(tp, None)
            self._resets[tp] = spec

    def _owned(self, tp) -> TopicPartition:
        tp = TopicPartition(*tp)
        if tp not in self._assigned:
            raise ValueError(f"{tp.topic}-{tp.partition} is not assigned to this consumer")
        return tp

    async def position(self, tp) -> int:
        tp = self._owned(tp)
        if tp not in self._positions:
            await self._resolve_positions()
        return self._positions[tp]

    async def committed(self, tps: Iterable) -> dict[TopicPartition, int | None]:
        if self.member is None:
            raise ValueError("committed offsets need group.id")
        tps = [TopicPartition(*tp) for tp in tps]
        got = await self.member.fetch_committed(tps)
        return {TopicPartition(*tp): (v[0] if v else None) for tp, v in got.items()}

    async def offsets_for_times(self, timestamps: dict) -> dict[TopicPartition, tuple[int, int] | None]:
        """{tp: timestamp ms} -> {tp: (offset, timestamp)} of the first record at or after it,
        or None when there is none."""
        specs = {tuple(tp): ts for tp, ts in timestamps.items()}
        if any(ts < 0 for ts in specs.values()):
            raise ValueError("timestamps must be >= 0")
        got = await list_offsets(self.cluster, specs, self.isolation_level)
        return {TopicPartition(*tp): v for tp, v in got.items()}

    async def beginning_offsets(self, tps: Iterable) -> dict[TopicPartition, int]:
        got = await list_offsets(self.cluster, {tuple(tp): EARLIEST for tp in tps},
                                 self.isolation_level)
        return {TopicPartition(*tp): v[0] for tp, v in got.items() if v}

    async def end_offsets(self, tps: Iterable) -> dict[TopicPartition, int]:
        got = await list_offsets(self.cluster, {tuple(tp): LATEST for tp in tps},
                                 self.isolation_level)
        return {TopicPartition(*tp): v[0] for tp, v in got.items() if v}

    def pause(self, tps: Iterable) -> None:
        self._paused.update(self._owned(tp) for tp in tps)

    def resume(self, tps: Iterable) -> None:
        self._paused.difference_update(TopicPartition(*tp) for tp in tps)

    def paused(self) -> list[TopicPartition]:
        return sorted(self._paused)

    async def _resolve_positions(self) -> None:
        missing = [tp for tp in self._assigned if tp not in self._positions
                   and tp not in self._resets]
        if missing and self.member is not None:
            if (got := await self.member.fetch_committed(missing, or_none=True)) is None:
                return          # no coordinator in time: the next poll asks again (as Kafka)
            for tp in missing:
                if got.get(tp):
                    self._positions[tp] = got[tp][0]
        for tp in missing:
            if tp not in self._positions:
                self._reset_by_policy(tp)
        if self._resets:
            specs = dict(self._resets)
            got = await list_offsets(self.cluster, specs, self.isolation_level)
            for tp, spec in specs.items():
                if self._resets.get(tp) == spec and got.get(tp):
                    self._positions[tp] = got[tp][0]
                    del self._resets[tp]

    def _reset_by_policy(self, tp: TopicPartition) -> None:
        policy = self.config["auto.offset.reset"]
        if policy == "none":
            raise NoOffsetForPartitionError(
                f"{tp.topic}-{tp.partition}: no committed offset and auto.offset.reset=none")
        self._resets[tp] = EARLIEST if policy == "earliest" else LATEST
        self._buffer.pop(tp, None)
        self._positions.pop(tp, None)

    # -- commits ---------------------------------------------------------------------------------

    def _current_offsets(self) -> dict:
        return {tp: (pos, self._epochs.get(tp, -1), None) for tp, pos in self._positions.items()
                if tp in self._assigned}

    async def commit(self, offsets: dict | None = None, *, asynchronous: bool = False,
                     callback: Callable | None = None) -> None:
        """Commit `offsets` ({tp: next offset to read}) or every current position. Sync raises
        CommitFailedError after a rebalance; async hands (offsets, error or None) to
        `callback`."""
        if self.member is None:
            raise ValueError("commit needs group.id")
        if offsets is None:
            commit = self._current_offsets()
        else:
            commit = {TopicPartition(*tp): (int(off), -1, None) for tp, off in offsets.items()}
        if not commit:
            return
        use_generation = not self._manual
        if not asynchronous:
            await self.member.commit(commit, use_generation)
            return

        async def run() -> None:
            err = None
            try:
                await self.member.commit(commit, use_generation)
            except KafkaError as exc:
                err = exc
                log.info("async commit for group %s failed: %s", self.group_id, exc)
            if callback is not None:
                await call_listener(lambda _: callback({tp: o for tp, (o, _, _) in commit.items()},
                                                        err), [])
        self._nursery.start_soon(self._in_scope, run)

    async def _maybe_auto_commit(self) -> None:
        if (self.member is None or not self.config["enable.auto.commit"]
                or trio.current_time() < self._next_auto_commit):
            return
        self._next_auto_commit = trio.current_time() + self._auto_commit_interval
        if self._manual or self.member.stable:
            await self.commit(asynchronous=True)

    # -- group -----------------------------------------------------------------------------------

    async def _cg_revoke(self, tps: list[TopicPartition]) -> None:
        """Give partitions back in a rebalance: commit them (auto-commit), on_revoked, drop."""
        tps = [TopicPartition(*tp) for tp in tps]
        if self.config["enable.auto.commit"]:
            with contextlib.suppress(KafkaError):
                await self.commit({tp: self._positions[tp] for tp in tps
                                   if tp in self._positions})
        await call_listener(self._on_revoked, tps)
        gone = set(tps)
        self._set_assignment([tp for tp in self._assigned if tp not in gone])

    async def _cg_assign(self, added: list, partitions: list) -> None:
        self._set_assignment([TopicPartition(*tp) for tp in partitions])
        await call_listener(self._on_assigned, [TopicPartition(*tp) for tp in added])
        log.info("group %s epoch %d: assigned %s", self.group_id, self.member.generation,
                 [f"{t}-{p}" for t, p in self._assigned])

    async def _cg_lose(self, tps: list) -> None:
        """Partitions already someone else's (we were fenced or left): no commit."""
        tps = [TopicPartition(*tp) for tp in tps]
        gone = set(tps)
        self._set_assignment([tp for tp in self._assigned if tp not in gone])
        await call_listener(self._on_lost or self._on_revoked, tps)

    async def _ensure_group(self) -> None:
        member = self.member
        if member is None or self._manual or (not self._topics and self._pattern is None):
            return
        if isinstance(member, ConsumerGroupMember):
            await member.ensure_active(self._topics, self._pattern, self)
            return
        await ensure_classic_group(self)

    # -- poll ------------------------------------------------------------------------------------

    async def poll(self, timeout_ms: int = 1000) -> list[ConsumerRecord]:
        """Up to max.poll.records records, waiting at most about `timeout_ms` for some (a
        rebalance in progress may take longer, as in Kafka).

        Fetches run in the background, at most one per leader at a time: as soon as a
        partition's buffered records are handed out its next Fetch is sent, so the broker
        works on it while the caller processes this batch."""
        if self.closed or self._nursery is None:
            raise RuntimeError("consumer is not started (use `async with` or start())")
        deadline = trio.current_time() + max(0, timeout_ms) / 1000
        while True:
            self._last_poll = trio.current_time()     # a long join inside poll is not idling
            if self._fetch_errors:
                raise self._fetch_errors.pop(0)
            if self._fetched.is_set():
                self._fetched = trio.Event()
            await self._ensure_group()
            await self._maybe_auto_commit()
            await self._resolve_positions()
            if self._need_refresh:
                self._need_refresh = False
                await self.cluster.refresh_metadata({tp.topic for tp in self._assigned},
                                                    force=True)
            records = self._drain()
            if self._nursery is None:
                # closed by another task while this poll awaited (the group, a commit): what
                # was buffered is handed out, nothing more is fetched (seen: a member closed
                # during a rebalance, its poll then started a fetch on the closed consumer)
                return records
            in_flight = self._start_fetches()
            if records:
                return records
            remaining = deadline - trio.current_time()
            if remaining <= 0:
                return []
            with trio.move_on_after(remaining if in_flight else min(remaining, 0.05)):
                await self._fetched.wait()

    def _fetchable(self) -> list[TopicPartition]:
        return [tp for tp in self._assigned if tp in self._positions and tp not in self._paused
                and tp not in self._buffer and tp not in self._in_flight]

    def _drain(self) -> list[ConsumerRecord]:
        limit = self.config["max.poll.records"]
        out: list[ConsumerRecord] = []
        ready = [tp for tp in self._assigned if tp in self._buffer and tp not in self._paused]
        if not ready:
            return out
        self._rr = (self._rr + 1) % len(ready)      # rotate so no partition starves
        for tp in ready[self._rr:] + ready[:self._rr]:
            queue, next_offset = self._buffer[tp]
            while queue and len(out) < limit:
                record = queue.popleft()
                out.append(record)
                self._positions[tp] = record.offset + 1
                self._epochs[tp] = record.leader_epoch
            if not queue:
                del self._buffer[tp]
                self._positions[tp] = max(self._positions[tp], next_offset)
            if len(out) >= limit:
                break
        return out

    def _start_fetches(self) -> bool:
        """Send a Fetch to every leader that has fetchable partitions and no Fetch in flight.
        True while any Fetch is in flight."""
        by_node: dict[int, list[TopicPartition]] = {}
        for tp in self._fetchable():
            leader = self.cluster.leader_for(*tp)
            if leader is None:
                self._need_refresh = True
            elif leader not in self._in_flight_nodes:
                by_node.setdefault(leader, []).append(tp)
        for node, tps in by_node.items():
            self._in_flight_nodes.add(node)
            self._in_flight.update(tps)
            asked = {tp: self._positions[tp] for tp in tps}     # positions as of now
            self._nursery.start_soon(self._in_scope, self._fetch_task, node, asked)
        return bool(self._in_flight_nodes)

    async def _fetch_task(self, node: int, asked: dict[TopicPartition, int]) -> None:
        try:
            if await self._fetch_node(node, asked, self.config["fetch.max.wait.ms"]):
                self._need_refresh = True
        except (KafkaConnectionError, KafkaTimeoutError) as exc:
            log.info("fetch from node %d failed: %s", node, exc)
            self._need_refresh = True
            await trio.sleep(self.cluster.retry_backoff_s)
        except KafkaError as exc:            # handed to the caller by the next poll
            self._fetch_errors.append(exc)
        finally:
            self._in_flight_nodes.discard(node)
            self._in_flight.difference_update(asked)
            self._fetched.set()

    async def _fetch_node(self, node: int, asked: dict[TopicPartition, int],
                          max_wait_ms: int) -> bool:
        """One Fetch to one leader for {tp: offset}; buffers what came back (unless the
        position moved meanwhile). True if metadata needs a refresh."""
        fr = REQUESTS[ApiKey.FETCH]
        by_topic: dict[str, list] = {}
        for tp, offset in asked.items():
            by_topic.setdefault(tp.topic, []).append(fr.FetchPartition(
                partition=tp.partition, current_leader_epoch=-1, fetch_offset=offset,
                last_fetched_epoch=-1, log_start_offset=-1,
                partition_max_bytes=self.config["max.partition.fetch.bytes"]))
        req = fr(replica_id=-1, max_wait_ms=max_wait_ms,
                 min_bytes=self.config["fetch.min.bytes"],
                 max_bytes=self.config["fetch.max.bytes"],
                 isolation_level=self.isolation_level, session_id=0, session_epoch=-1,
                 topics=[fr.FetchTopic(topic=t, partitions=ps) for t, ps in by_topic.items()],
                 forgotten_topics_data=[], rack_id="")
        async with drop_on_cancel(self.cluster, node, "fetch"):
            resp = await self.cluster.call(node, req, channel="fetch", max_version=12,
                                           min_version=4, timeout_s=max_wait_ms / 1000
                                           + self.cluster.request_timeout_s)
        if resp.error_code:
            check(resp.error_code, None, "fetch")
        refresh = False
        for topic in resp.responses:
            for part in topic.partitions:
                tp = TopicPartition(topic.topic, part.partition_index)
                offset = asked.get(tp)
                if offset is None or self._positions.get(tp) != offset or tp in self._buffer:
                    continue          # seeked, revoked or reset while the fetch was out
                refresh |= self._handle_partition(tp, offset, part)
        return refresh

    def _handle_partition(self, tp: TopicPartition, offset: int, part) -> bool:
        code = part.error_code
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            log.info("%s-%d: offset %d out of range; applying auto.offset.reset", tp.topic,
                     tp.partition, offset)
            self._reset_by_policy(tp)
            return False
        if code in LEADER_ERRORS:
            return True
        if code:
            if classify(code) is Retry.NO:
                check(code, None, f"fetch {tp.topic}-{tp.partition}")
            return True
        try:
            got = parse_partition(tp.topic, tp.partition, part.records, offset,
                                  self.isolation_level, part.aborted_transactions)
        except DecodeError as exc:
            raise KafkaError(f"{tp.topic}-{tp.partition} at offset {offset}: {exc}",
                             ErrorCode.CORRUPT_MESSAGE) from None
        if got.records:
            self._buffer[tp] = (collections.deque(got.records), got.next_offset)
        elif got.next_offset > offset:
            self._positions[tp] = got.next_offset     # only markers / aborted records
        return False

