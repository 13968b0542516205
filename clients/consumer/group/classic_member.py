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

`CoordinatorClient` (coordinator.py: finding the coordinator, OffsetCommit/OffsetFetch) is
shared with the KIP-848 member in kip848_member.py, which commits with its member epoch instead
of a generation.
"""

from __future__ import annotations

import logging

import trio

from clients.consumer.assignors import (PROTOCOL_TYPE, PartitionAssignor, RebalanceProtocol,
                                        decode_assignment, decode_subscription, encode_assignment,
                                        encode_subscription)
from clients.cluster import Cluster
from clients.consumer.group.coordinator import COORDINATOR_RETRY, TP, CoordinatorClient
from clients.errors import KafkaConnectionError, KafkaTimeoutError, check
from wire.errors import ErrorCode, KafkaError
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS

log = logging.getLogger("raftka.consumer.group")


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
        jg = REQUESTS[ApiKey.JOIN_GROUP]
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
        sg = REQUESTS[ApiKey.SYNC_GROUP]
        return [sg.SyncGroupRequestAssignment(member_id=m, assignment=encode_assignment(a))
                for m, a in result.items()]

    async def _sync(self, assignments, timeout_s: float) -> list[TP] | None:
        sg = REQUESTS[ApiKey.SYNC_GROUP]
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
        hb = REQUESTS[ApiKey.HEARTBEAT]
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
        lg = REQUESTS[ApiKey.LEAVE_GROUP]

        def build(v):
            if v >= 3:
                return lg(group_id=self.group_id, members=[lg.MemberIdentity(
                    member_id=self.member_id, group_instance_id=None, reason="consumer closed")])
            return lg(group_id=self.group_id, member_id=self.member_id)
        try:
            with trio.move_on_after(5):
                await self._call_versioned(build, ApiKey.LEAVE_GROUP)
        except KafkaError as exc:
            log.info("group %s: leave failed (%s); the session will expire", self.group_id, exc)
        self.reset_member()

    def commit_identity(self) -> tuple[int, str, str | None]:
        return self.generation, self.member_id, self.group_instance_id

    def commit_refused(self, code: int, sent) -> bool:
        if self.stable:
            self._on_group_error(code, "commit")
        return False
