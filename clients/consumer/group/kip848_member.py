"""One consumer's membership in a KIP-848 consumer group (`group.protocol=consumer`): the I/O
around the pure `ConsumerGroupMemberState` (kip848_state.py).

- A background task (`heartbeat_loop`) sends ConsumerGroupHeartbeat when the state machine says
  one is due — at once while joining, acknowledging or leaving, else every
  `heartbeat_interval_ms` the coordinator gave — and feeds it the answers. Connection loss,
  timeouts and NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE / COORDINATOR_LOAD_IN_PROGRESS make
  it find the coordinator again and retry after `retry.backoff.ms`.
- Reconciliation runs in the application's task, inside `poll` (`ensure_active`), because it
  calls the rebalance listeners: revoke first (commit with auto-commit, on_partitions_revoked),
  then assign (on_partitions_assigned), then the heartbeat task acknowledges at once. A fenced
  member (FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID) hands its partitions over as lost
  (on_partitions_lost, no commit) and rejoins with epoch 0.
- Offset commits carry the member id and member epoch (OffsetCommit v9). STALE_MEMBER_EPOCH
  (our epoch moved on under the commit) retries with the current epoch while we are still a
  member; FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID fail it (CommitFailedError) and the heartbeat
  sorts out the membership.
- Regex subscriptions go to the coordinator as `subscribed_topic_regex` (ConsumerGroupHeartbeat
  v1), which matches it against whole topic names (as Kafka's broker does) and notices new
  topics itself; topic names go as `subscribed_topic_names`.

The consumer passes itself as `hooks`: it must provide `assignment()`, and async
`_cg_revoke(tps)`, `_cg_assign(added, partitions)`, `_cg_lose(tps)`.
"""

from __future__ import annotations

import logging
import math
import re

import trio

from clients.cluster import Cluster
from clients.consumer.group.kip848_state import (COORDINATOR_RETRY, ConsumerGroupMemberState,
                                                 HeartbeatFields, MemberState)
from clients.errors import KafkaConnectionError, KafkaTimeoutError, check
from clients.consumer.group.coordinator import CoordinatorClient
from wire.errors import ErrorCode, KafkaError
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS

log = logging.getLogger("raftka.consumer.group")

HEARTBEAT = ApiKey.CONSUMER_GROUP_HEARTBEAT


class ConsumerGroupMember(CoordinatorClient):
    protocol = "consumer"
    commit_max_version = 9          # v9: generation_id_or_member_epoch is the member epoch
    is_leader = False               # no client-side assignment in this protocol
    assigned_partition_counts = None

    def __init__(self, cluster: Cluster, group_id: str, *, rebalance_timeout_ms: int = 300_000,
                 group_instance_id: str | None = None, server_assignor: str | None = None,
                 retry_backoff_ms: int = 100):
        super().__init__(cluster, group_id, group_instance_id, retry_backoff_ms)
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.state = ConsumerGroupMemberState(
            group_id, instance_id=group_instance_id, rebalance_timeout_ms=rebalance_timeout_ms,
            server_assignor=server_assignor, retry_backoff_ms=retry_backoff_ms)
        self.rejoin_needed = False      # the classic consumer's flag; unused here
        self.on_change = None           # called when poll has something to do (reconcile...)
        self._wakeup = trio.Event()
        self._lock = trio.Lock()        # one heartbeat (or leave) at a time, answers in order
        self._names_refreshed = -math.inf

    # -- what the consumer reads ---------------------------------------------------------------

    @property
    def member_id(self) -> str:
        return self.state.member_id

    @property
    def generation(self) -> int:
        return self.state.member_epoch

    @property
    def stable(self) -> bool:
        return self.state.active

    def commit_identity(self) -> tuple[int, str, str | None]:
        st = self.state
        if not st.member_id:
            return -1, "", None
        return st.member_epoch, st.member_id, self.group_instance_id

    def commit_refused(self, code: int, sent) -> bool:
        # STALE_MEMBER_EPOCH: the coordinator bumped our epoch and its answer is on its way
        # (or here already); while we are a member the commit is still ours to make
        return code == ErrorCode.STALE_MEMBER_EPOCH and self.state.active

    # -- heartbeats ------------------------------------------------------------------------------

    def _now_ms(self) -> int:
        return int(trio.current_time() * 1000)

    def wake(self) -> None:
        self._wakeup.set()

    async def heartbeat_loop(self) -> None:
        """Background task: heartbeats when due. Never raises: a fatal error is kept in the
        state machine and raised by the next poll."""
        while True:
            wait = self.state.time_to_heartbeat_ms(self._now_ms())
            if wait is None or wait > 0:
                with trio.move_on_after(1.0 if wait is None else wait / 1000):
                    await self._wakeup.wait()
                self._wakeup = trio.Event()
                continue
            async with self._lock:
                await self._heartbeat()

    async def _heartbeat(self) -> None:
        st = self.state
        before = st.state
        fields = st.heartbeat_request(self._now_ms())
        if fields is None:
            return
        try:
            resp = await self._call_versioned(lambda v: build_request(self.group_id, fields, v),
                                              HEARTBEAT, channel="heartbeat")
        except (KafkaConnectionError, KafkaTimeoutError) as exc:
            log.info("group %s heartbeat: %s", self.group_id, exc)
            st.on_failure(self._now_ms(), coordinator=True)
        except KafkaError as exc:       # unsupported version, authorization, ...
            if exc.retriable or exc.code in COORDINATOR_RETRY:
                st.on_failure(self._now_ms(), coordinator=True)
            else:
                st.fail(exc.code, str(exc))
        except BaseException:
            st.on_failure(self._now_ms())     # cancelled: the answer is lost with the connection
            raise
        else:
            assignment = None
            if resp.assignment is not None:
                assignment = {tp.topic_id: list(tp.partitions)
                              for tp in resp.assignment.topic_partitions}
            st.on_response(self._now_ms(), resp.error_code, resp.error_message, resp.member_id,
                           resp.member_epoch, resp.heartbeat_interval_ms, assignment)
            if resp.error_code:
                log.info("group %s heartbeat: %s %s", self.group_id,
                         _name(resp.error_code), resp.error_message or "")
        if st.coordinator_lost:
            st.coordinator_lost = False
            self.coordinator_dead()
        if st.state is not before or st.state in (MemberState.RECONCILING, MemberState.FATAL):
            if self.on_change is not None:
                self.on_change()

    async def leave(self) -> None:
        """Leave the group: epoch -1 (a static member: -2, its place kept for a restart). Best
        effort, bounded: the session timeout removes us if the answer never comes."""
        if not self.state.leave():
            return
        with trio.move_on_after(5):
            async with self._lock:
                await self._heartbeat()
        if self.state.state is MemberState.LEAVING:
            self.state.on_failure(self._now_ms())
        log.info("group %s: left", self.group_id)

    # -- reconciliation, inside poll ---------------------------------------------------------------

    async def ensure_active(self, topics: list[str], pattern: re.Pattern | None, hooks) -> None:
        """Join if needed and run whatever reconciliation is pending, in the caller's task."""
        st = self.state
        if st.state is MemberState.FATAL:
            code, message = st.error
            check(code, message, f"group {self.group_id!r}")
        if pattern is not None:
            st.subscribe(regex=pattern.pattern)
        else:
            st.subscribe(names=topics)
        if st.state is MemberState.FENCED:
            lost = st.lost
            log.info("group %s: fenced; partitions lost: %s", self.group_id, lost)
            await hooks._cg_lose(lost)
            st.lost_handed_over()
        mine = set(st.assigned) if st.state is not MemberState.FENCED else set()
        stale = [tp for tp in hooks.assignment() if tuple(tp) not in mine]
        if stale and st.state in (MemberState.JOINING, MemberState.UNSUBSCRIBED):
            # we left (poll interval exceeded) or were removed: they belong to others now
            await hooks._cg_lose(stale)
        if st.time_to_heartbeat_ms(self._now_ms()) == 0:
            self.wake()
        await self._reconcile(hooks)

    async def _reconcile(self, hooks) -> None:
        st = self.state
        names = self._topic_names()
        if st.unresolved(names) and trio.current_time() - self._names_refreshed > \
                self.retry_backoff_s * 5:
            self._names_refreshed = trio.current_time()
            await self.cluster.refresh_metadata(force=True)
            names = self._topic_names()
        rec = st.reconciliation(names)
        if rec is None:
            return
        log.info("group %s epoch %d: revoking %s, assigning %s", self.group_id, rec.member_epoch,
                 _fmt(rec.revoke), _fmt(rec.assign))
        if rec.revoke:
            await hooks._cg_revoke(list(rec.revoke))
        if st.state is not MemberState.RECONCILING:
            return                       # fenced or left during the listener
        await hooks._cg_assign(list(rec.assign), list(rec.partitions))
        st.reconciled(rec)
        self.wake()

    def _topic_names(self) -> dict:
        return {info.topic_id: name for name, info in self.cluster.metadata.topics.items()
                if info.topic_id is not None}


def build_request(group_id: str, f: HeartbeatFields, version: int):
    req = REQUESTS[HEARTBEAT]
    if f.subscribed_topic_regex and version < 1:
        raise KafkaError("a regex subscription needs ConsumerGroupHeartbeat v1, which the "
                         "coordinator does not support", ErrorCode.UNSUPPORTED_VERSION)
    tps = None
    if f.topic_partitions is not None:
        tps = [req.TopicPartitions(topic_id=t, partitions=list(ps))
               for t, ps in f.topic_partitions.items()]
    kw = dict(group_id=group_id, member_id=f.member_id, member_epoch=f.member_epoch,
              instance_id=f.instance_id, rebalance_timeout_ms=f.rebalance_timeout_ms,
              subscribed_topic_names=(None if f.subscribed_topic_names is None
                                      else list(f.subscribed_topic_names)),
              server_assignor=f.server_assignor, topic_partitions=tps)
    if version >= 1:
        kw["subscribed_topic_regex"] = f.subscribed_topic_regex
    return req(**kw)


def _name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"


def _fmt(tps) -> list[str]:
    return [f"{t}-{p}" for t, p in tps]
