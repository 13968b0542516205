"""One consumer's membership in a classic consumer group (JoinGroup / SyncGroup / Heartbeat /
LeaveGroup) and its offset commits and fetches, over a `Cluster`.

Membership, as Kafka's AbstractCoordinator:

    UNJOINED ──JoinGroup (MEMBER_ID_REQUIRED: retry at once with the id we were given)──▶
    joined as leader or follower ──SyncGroup──▶ STABLE (generation, assignment)
    STABLE ──heartbeat says REBALANCE_IN_PROGRESS, our subscription changed, or (cooperative) we
        revoked something──▶ rejoin, keeping member id and generation
    any ──UNKNOWN_MEMBER_ID / FENCED──▶ UNJOINED with no member id;
        ILLEGAL_GENERATION──▶ rejoin with our member id
    any ──NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE / connection lost──▶ find the coordinator
        again, then retry

The leader runs the assignor the coordinator chose among the protocols every member offered, on
partition counts from fresh metadata. Fatal answers (INCONSISTENT_GROUP_PROTOCOL,
GROUP_AUTHORIZATION_FAILED, INVALID_SESSION_TIMEOUT, FENCED_INSTANCE_ID...) raise typed errors.

`CoordinatorClient` (finding the coordinator, OffsetCommit/OffsetFetch) is shared with the
KIP-848 member in kip848_member.py, which commits with its member epoch instead of a
generation.
"""

from __future__ import annotations

import logging

import trio

from clients.consumer.assignors import (PROTOCOL_TYPE, PartitionAssignor, RebalanceProtocol,
                                        decode_assignment, decode_subscription, encode_assignment,
                                        encode_subscription)
from clients.cluster import Cluster
from clients.consumer.offsets import drop_on_cancel
from clients.errors import KafkaConnectionError, KafkaTimeoutError, check
from wire.errors import ErrorCode, KafkaError
from wire.messages.index_generated import REQUESTS

log = logging.getLogger("raftka.consumer.group")

TP = tuple[str, int]
COORDINATOR_RETRY = {ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                     ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NETWORK_EXCEPTION,
                     ErrorCode.REQUEST_TIMED_OUT}
# codes after which a commit cannot succeed without rejoining (Kafka's CommitFailedException)
COMMIT_FAILED = {ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID,
                 ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.FENCED_INSTANCE_ID,
                 ErrorCode.STALE_MEMBER_EPOCH, ErrorCode.FENCED_MEMBER_EPOCH}


def _retriable(code: int) -> bool:
    return code in ErrorCode._value2member_map_ and ErrorCode(code).retriable


class CommitFailedError(KafkaError):
    """The commit was refused because the group rebalanced since these records were assigned;
    they will be redelivered to their new owner."""


class CoordinatorClient:
    """What both kinds of member share: the group coordinator (found, forgotten when it moves or
    dies) and offset commits/fetches. Subclasses say which identity a commit carries
    (`commit_identity`) and what a refused commit means for their membership (`commit_refused`)."""

    commit_max_version = 8

    def __init__(self, cluster: Cluster, group_id: str, group_instance_id: str | None,
                 retry_backoff_ms: int):
        self.cluster = cluster
        self.group_id = group_id
        self.group_instance_id = group_instance_id
        self.retry_backoff_s = retry_backoff_ms / 1000
        self.coordinator: int | None = None

    # -- coordinator -----------------------------------------------------------------------------

    async def ensure_coordinator(self) -> int:
        if self.coordinator is None or self.coordinator not in self.cluster.metadata.brokers:
            self.coordinator = await self.cluster.find_coordinator(self.group_id)
        return self.coordinator

    def coordinator_dead(self) -> None:
        self.cluster.forget_coordinator(self.group_id)
        self.coordinator = None

    async def _call(self, message, channel: str = "group", **kw):
        node = await self.ensure_coordinator()
        try:
            async with drop_on_cancel(self.cluster, node, channel):
                return await self.cluster.call(node, message, channel=channel, **kw)
        except (KafkaConnectionError, KafkaTimeoutError):
            self.coordinator_dead()
            raise

    async def _call_versioned(self, build, api_key: int, channel: str = "group", **kw):
        node = await self.ensure_coordinator()
        try:
            async with drop_on_cancel(self.cluster, node, channel):
                return await self.cluster.call_versioned(node, build, api_key, channel=channel,
                                                         **kw)
        except (KafkaConnectionError, KafkaTimeoutError):
            self.coordinator_dead()
            raise

    def commit_identity(self) -> tuple[int, str, str | None]:
        """(generation or member epoch, member id, group instance id) for OffsetCommit."""
        raise NotImplementedError

    def commit_refused(self, code: int, sent: tuple[int, str, str | None]) -> bool:
        """A commit answered a COMMIT_FAILED code: True to retry it (with a fresh identity)."""
        raise NotImplementedError

    # -- offsets ---------------------------------------------------------------------------------

    async def commit(self, offsets: dict[TP, tuple[int, int, str | None]],
                     use_generation: bool) -> None:
        """OffsetCommit {tp: (offset, leader_epoch, metadata)}. Raises CommitFailedError when
        the group rebalanced, a typed KafkaError otherwise; retries coordinator moves."""
        oc = REQUESTS[8]
        by_topic: dict[str, list] = {}
        for (topic, part), (offset, epoch, meta) in sorted(offsets.items()):
            by_topic.setdefault(topic, []).append(oc.OffsetCommitRequestPartition(
                partition_index=part, committed_offset=offset, committed_leader_epoch=epoch,
                committed_metadata=meta or ""))
        deadline = trio.current_time() + 30
        while True:
            sent = self.commit_identity() if use_generation else (-1, "", None)
            req = oc(group_id=self.group_id, generation_id_or_member_epoch=sent[0],
                     member_id=sent[1], group_instance_id=sent[2],
                     topics=[oc.OffsetCommitRequestTopic(name=t, partitions=ps)
                             for t, ps in by_topic.items()])
            try:
                resp = await self._call(req, max_version=self.commit_max_version)
                codes = {p.error_code for t in resp.topics for p in t.partitions} - {0}
            except (KafkaConnectionError, KafkaTimeoutError):
                codes = {ErrorCode.NOT_COORDINATOR}
            if not codes:
                return
            code = min(codes)
            if code in COMMIT_FAILED:
                if not (use_generation and self.commit_refused(code, sent)) \
                        or trio.current_time() > deadline:
                    raise CommitFailedError(
                        f"commit for group {self.group_id!r} refused: {ErrorCode(code).name} "
                        "(the group rebalanced)", code)
            elif code in COORDINATOR_RETRY:
                self.coordinator_dead()
            elif not _retriable(code):
                check(code, None, f"commit for group {self.group_id!r}")
            if trio.current_time() > deadline:
                check(code, None, f"commit for group {self.group_id!r}")
            await trio.sleep(self.retry_backoff_s)

    async def fetch_committed(self, tps: list[TP], require_stable: bool = True
                              ) -> dict[TP, tuple[int, int, str | None] | None]:
        """{tp: (offset, leader_epoch, metadata)} or None where nothing is committed."""
        of = REQUESTS[9]
        by_topic: dict[str, list[int]] = {}
        for t, p in tps:
            by_topic.setdefault(t, []).append(p)
        deadline = trio.current_time() + 30
        while True:
            def build(v):
                return of(group_id=self.group_id, require_stable=require_stable,
                          topics=[of.OffsetFetchRequestTopic(name=t, partition_indexes=ps)
                                  for t, ps in by_topic.items()])
            code = 0
            try:
                resp = await self._call_versioned(build, 9, max_version=7)
                code = resp.error_code or next((p.error_code for t in resp.topics
                                                for p in t.partitions if p.error_code), 0)
            except (KafkaConnectionError, KafkaTimeoutError):
                code = ErrorCode.NOT_COORDINATOR
            if code == 0:
                out: dict = {tp: None for tp in tps}
                for t in resp.topics:
                    for p in t.partitions:
                        if p.committed_offset >= 0:
                            out[(t.name, p.partition_index)] = (
                                p.committed_offset, p.committed_leader_epoch, p.metadata)
                return out
            if code in COORDINATOR_RETRY:
                self.coordinator_dead()
            elif not _retriable(code):
                check(code, None, f"offsets of group {self.group_id!r}")
            if trio.current_time() > deadline:
                check(code, None, f"offsets of group {self.group_id!r}")
            await trio.sleep(self.retry_backoff_s)


class GroupMember(CoordinatorClient):
    def __init__(self, cluster: Cluster, group_id: str, assignors: list[PartitionAssignor], *,
                 session_timeout_ms: int = 45_000, rebalance_timeout_ms: int = 300_000,
                 heartbeat_interval_ms: int = 3_000, group_instance_id: str | None = None,
                 retry_backoff_ms: int = 100):
        if not assignors:
            raise ValueError("partition.assignment.strategy names no assignor")
        super().__init__(cluster, group_id, group_instance_id, retry_backoff_ms)
        self.assignors = assignors
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.heartbeat_interval_s = heartbeat_interval_ms / 1000
        self.member_id = ""
        self.generation = -1
        self.protocol: PartitionAssignor | None = None
        self.is_leader = False
        self.stable = False          # joined and synced, heartbeats flowing
        self.rejoin_needed = True
        self.last_heartbeat_ok = 0.0            # trio time of the last good heartbeat
        # as leader: partition counts the last assignment was computed on (a change -> rejoin)
        self.assigned_partition_counts: dict[str, int] | None = None

    # -- join + sync -----------------------------------------------------------------------------

    @property
    def rebalance_protocol(self) -> RebalanceProtocol:
        proto = self.protocol or self.assignors[0]
        return proto.rebalance_protocol

    def reset_member(self) -> None:
        self.member_id = ""
        self.generation = -1
        self.stable = False
        self.rejoin_needed = True

    async def join(self, topics: list[str], owned: list[TP], deadline: float) -> list[TP] | None:
        """Join and sync once. Returns the new assignment, or None when the group moved on
        under us (rejoin needed); raises on fatal errors and when `deadline` passes."""
        self.stable = False
        jg = REQUESTS[11]
        protocols = []
        for a in self.assignors:
            sub = a.subscription(topics, owned, self.generation)
            protocols.append(jg.JoinGroupRequestProtocol(name=a.name,
                                                         metadata=encode_subscription(sub)))
        timeout_s = self.rebalance_timeout_ms / 1000 + 10
        while True:
            if trio.current_time() > deadline:
                raise KafkaTimeoutError(f"group {self.group_id!r}: join did not complete in time")
            req = jg(group_id=self.group_id, session_timeout_ms=self.session_timeout_ms,
                     rebalance_timeout_ms=self.rebalance_timeout_ms, member_id=self.member_id,
                     group_instance_id=self.group_instance_id, protocol_type=PROTOCOL_TYPE,
                     protocols=protocols, reason="rebalance")
            try:
                resp = await self._call(req, timeout_s=timeout_s)
            except (KafkaConnectionError, KafkaTimeoutError):
                await trio.sleep(self.retry_backoff_s)
                continue
            code = resp.error_code
            if code == ErrorCode.MEMBER_ID_REQUIRED:
                self.member_id = resp.member_id        # KIP-394: join again with this id
                continue
            if code == ErrorCode.UNKNOWN_MEMBER_ID:
                self.member_id = ""
                continue
            if code in COORDINATOR_RETRY:
                self.coordinator_dead()
                await trio.sleep(self.retry_backoff_s)
                continue
            if code == ErrorCode.REBALANCE_IN_PROGRESS:
                await trio.sleep(self.retry_backoff_s)
                continue
            check(code, None, f"join group {self.group_id!r}")
            break
        self.member_id = resp.member_id
        self.generation = resp.generation_id
        self.is_leader = resp.leader == resp.member_id
        self.assigned_partition_counts = None
        self.protocol = next((a for a in self.assignors if a.name == resp.protocol_name),
                             self.assignors[0])
        assignments = []
        if self.is_leader:
            assignments = await self._lead(resp.members)
        return await self._sync(assignments, timeout_s)

    async def _lead(self, members) -> list:
        subs = {}
        for m in members:
            try:
                sub = decode_subscription(m.metadata)
            except Exception as exc:      # noqa: BLE001 - one bad member must not crash us
                log.warning("group %s: member %s sent undecodable metadata (%s); assigning it "
                            "nothing", self.group_id, m.member_id, exc)
                sub = decode_subscription(encode_subscription(
                    self.assignors[0].subscription([], [], -1)))
            sub.group_instance_id = getattr(m, "group_instance_id", None)
            subs[m.member_id] = sub
        topics = sorted({t for s in subs.values() for t in s.topics})
        md = await self.cluster.refresh_metadata(topics, force=True)
        ppt = {t: len(md.topics[t].partitions) for t in topics if t in md.topics}
        self.assigned_partition_counts = ppt
        result = self.protocol.assign(ppt, subs)
        sg = REQUESTS[14]
        return [sg.SyncGroupRequestAssignment(member_id=m, assignment=encode_assignment(a))
                for m, a in result.items()]

    async def _sync(self, assignments, timeout_s: float) -> list[TP] | None:
        sg = REQUESTS[14]
        req = sg(group_id=self.group_id, generation_id=self.generation, member_id=self.member_id,
                 group_instance_id=self.group_instance_id, protocol_type=PROTOCOL_TYPE,
                 protocol_name=self.protocol.name, assignments=assignments)
        try:
            resp = await self._call(req, timeout_s=timeout_s)
        except (KafkaConnectionError, KafkaTimeoutError):
            self.rejoin_needed = True
            return None
        code = resp.error_code
        if code == ErrorCode.NONE:
            self.stable = True
            self.rejoin_needed = False
            self.last_heartbeat_ok = trio.current_time()
            return decode_assignment(resp.assignment).partitions
        self._on_group_error(code, "sync")
        return None

    def _on_group_error(self, code: int, what: str) -> None:
        """Shared handling of group errors from sync, heartbeat and commit answers."""
        self.stable = False
        self.rejoin_needed = True
        if code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID):
            if code == ErrorCode.FENCED_INSTANCE_ID:
                check(code, None, f"group {self.group_id!r} {what}")
            self.member_id = ""
            self.generation = -1
        elif code in COORDINATOR_RETRY:
            self.coordinator_dead()
        elif code not in (ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION):
            check(code, None, f"group {self.group_id!r} {what}")

    # -- heartbeat / leave -----------------------------------------------------------------------

    async def heartbeat(self) -> int:
        hb = REQUESTS[12]
        try:
            resp = await self._call(hb(group_id=self.group_id, generation_id=self.generation,
                                       member_id=self.member_id,
                                       group_instance_id=self.group_instance_id),
                                    channel="heartbeat",
                                    timeout_s=max(1.0, self.session_timeout_ms / 1000 / 2))
        except (KafkaConnectionError, KafkaTimeoutError):
            return ErrorCode.NETWORK_EXCEPTION
        if resp.error_code == ErrorCode.NONE:
            self.last_heartbeat_ok = trio.current_time()
        elif self.stable:
            try:
                self._on_group_error(resp.error_code, "heartbeat")
            except KafkaError as exc:
                log.warning("group %s heartbeat: %s", self.group_id, exc)
        return resp.error_code

    async def heartbeat_loop(self) -> None:
        """Background task: heartbeats while stable (not during a join, as Kafka's clients).
        Never raises: what goes wrong shows up as `rejoin_needed` for the next poll."""
        while True:
            await trio.sleep(self.heartbeat_interval_s)
            if self.stable and self.generation >= 0:
                try:
                    await self.heartbeat()
                except Exception as exc:      # noqa: BLE001 - keep heartbeating; poll reports
                    log.warning("group %s heartbeat failed: %s", self.group_id, exc)

    async def leave(self) -> None:
        if not self.member_id or self.group_instance_id is not None:
            # static members do not leave: their instance id keeps their place (KIP-345)
            self.reset_member()
            return
        lg = REQUESTS[13]

        def build(v):
            if v >= 3:
                return lg(group_id=self.group_id, members=[lg.MemberIdentity(
                    member_id=self.member_id, group_instance_id=None, reason="consumer closed")])
            return lg(group_id=self.group_id, member_id=self.member_id)
        try:
            with trio.move_on_after(5):
                await self._call_versioned(build, 13)
        except KafkaError as exc:
            log.info("group %s: leave failed (%s); the session will expire", self.group_id, exc)
        self.reset_member()

    def commit_identity(self) -> tuple[int, str, str | None]:
        return self.generation, self.member_id, self.group_instance_id

    def commit_refused(self, code: int, sent) -> bool:
        if self.stable:
            self._on_group_error(code, "commit")
        return False
