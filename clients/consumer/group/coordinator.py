"""What both kinds of group member share (classic in classic_member.py, KIP-848 in
kip848_member.py): finding the group coordinator (and forgetting it when it moves or dies), and
offset commits and fetches. A classic member commits with its generation, a KIP-848 member with
its member epoch; a commit the group refuses is a `CommitFailedError`.
"""

from __future__ import annotations

import logging

import trio

from clients.cluster import Cluster
from clients.consumer.offsets import drop_on_cancel
from clients.errors import KafkaConnectionError, KafkaTimeoutError, check
from wire.errors import ErrorCode, KafkaError
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS

log = logging.getLogger("raftka.consumer")
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
        oc = REQUESTS[ApiKey.OFFSET_COMMIT]
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

    async def fetch_committed(self, tps: list[TP], require_stable: bool = True,
                              or_none: bool = False
                              ) -> dict[TP, tuple[int, int, str | None] | None] | None:
        """{tp: (offset, leader_epoch, metadata)} or None where nothing is committed.
        `or_none`: None instead of an error when only retriable errors (no coordinator, one
        loading) came for 30 s: a consumer's poll then returns without those positions, as
        Kafka's, and asks again at the next; none is reset by auto.offset.reset meanwhile."""
        of = REQUESTS[ApiKey.OFFSET_FETCH]
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
                resp = await self._call_versioned(build, ApiKey.OFFSET_FETCH, max_version=7)
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
                if or_none:
                    log.warning("offsets of group %r not fetched in 30 s (error %s)",
                                self.group_id, code)
                    return None
                check(code, None, f"offsets of group {self.group_id!r}")
            await trio.sleep(self.retry_backoff_s)
