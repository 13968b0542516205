"""Follower fetchers: one task per source (leader) broker, one Fetch in flight each, in an
incremental fetch session (KIP-227, `follower_session.py`): after a first full fetch, a request
names only the partitions whose position changed, and the answer only those with news.

Each Fetch carries, per followed partition, our log end offset, the epoch of our last batch and
our current leader epoch (KIP-320/595). The leader answers with batches to append, its high
watermark, or a diverging epoch: then we truncate to its end offset (the first offset where our
logs may differ) and fetch again. OFFSET_OUT_OF_RANGE means our log is outside the leader's:
above its end (truncate to it) or below its start (start over at its start).

Replication throttle (throttle.py, KIP-73), follower side: a partition listed in its topic's
`follower.replication.throttled.replicas` for this broker, not in sync (neither in the ISR nor
caught up with the leader's high watermark, Kafka's fetcher rule), while the follower rate is
over `follower.replication.throttled.rate`, is left out of the next fetch (its session forgets
it) and marked again before the one after; the bytes appended for listed partitions count toward
the rate.

`FetcherManager` is given what it uses, not the broker: our broker id, the config (fetch size),
the replica manager (the followed logs), the purgatory (woken when a follower's high watermark
moves), the current metadata image (a callable: where each leader listens) and the
inter-broker TLS/SASL settings. The deterministic simulation (chaos_tests/sim) builds one the
same way and drives its `_build`/`_process` halves.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from typing import TYPE_CHECKING, Callable

import trio

from common.clock import steady_ms
from common.connection import BrokerConnection, ConnectionClosed
from partition_server.config import config_value
from partition_server.replication.follower_session import FetchPlan, FetchPosition, FollowerSession
from partition_server.replication.partition import Role
from partition_server.replication.throttle import ReplicationQuota
from wire.errors import DecodeError, ErrorCode, KafkaError
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS

if TYPE_CHECKING:
    from common.security import ClientSecurity
    from metadata_quorum.image import MetadataImage
    from partition_server.purgatory import Purgatory
    from partition_server.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

FETCH_VERSION = 12
RESYNC_INTERVAL_S = 60


def _no_mark(key) -> None:
    pass


@dataclasses.dataclass
class FetchStats:
    """Per leader, for /metrics: the partitions the last fetch named and got back."""
    request_partitions: int = 0
    response_partitions: int = 0
    full_fetches: int = 0
    incremental_fetches: int = 0


class FetchFailures:
    """Failed fetches from one leader, logged so a follower stuck failing is seen: a leader that
    died fails a few fetches (DEBUG), one failing on and on is a WARNING every 30 s (it was DEBUG
    only: a fetcher failing for minutes left no trace at the default level)."""

    WARN_AFTER = 10                 # consecutive failures (~2 s of retries) before a warning
    WARN_EVERY_S = 30.0

    def __init__(self, leader: int):
        self.leader, self.count, self.next_warning = leader, 0, 0.0

    def failed(self, exc: Exception) -> None:
        self.count += 1
        now = trio.current_time()
        if self.count >= self.WARN_AFTER and now >= self.next_warning:
            log.warning("fetches from broker %d keep failing (%d in a row): %s", self.leader,
                        self.count, exc)
            self.next_warning = now + self.WARN_EVERY_S
        else:
            log.debug("fetch from broker %d failed: %s", self.leader, exc)

    def answered(self) -> None:
        if self.count >= self.WARN_AFTER:
            log.info("fetches from broker %d answered again after %d failures", self.leader,
                     self.count)
        self.count, self.next_warning = 0, 0.0


class _Link:
    """One fetcher's connection to its leader, and what outlives a reconnect."""

    def __init__(self, leader: int):
        self.conn: BrokerConnection | None = None
        self.next_resync = trio.current_time() + RESYNC_INTERVAL_S
        self.failures = FetchFailures(leader)


class FetcherManager:
    def __init__(self, broker_id: int, config, replicas: ReplicaManager, purgatory: Purgatory,
                 image: Callable[[], MetadataImage], security: ClientSecurity | None,
                 quota: ReplicationQuota | None = None):
        self.broker_id = broker_id
        self.config = config
        self.replicas = replicas
        self.purgatory = purgatory
        self._image = image
        self._security = security
        self.assignments: dict[tuple[str, int], int] = {}     # partition → leader broker id
        self.by_leader: dict[int, set[tuple[str, int]]] = {}  # leader → partitions followed
        self.sessions: dict[int, FollowerSession] = {}        # leader → its running session
        self.stats: dict[int, FetchStats] = {}                # leader → what the last fetch held
        self.changed = trio.Event()
        # follower replication throttle (throttle.py): partitions held back from a fetch are
        # marked again before the next one, so they are reconsidered every round
        self.quota = quota if quota is not None else ReplicationQuota()
        self.held: dict[int, set[tuple[str, int]]] = {}        # leader → held back last build
        self.caught_up: set[tuple[str, int]] = set()   # throttled, at the leader's HW (Kafka's
        #                                                "in sync" for the follower's throttle)

    def follow(self, topic: str, partition: int, leader: int) -> None:
        """Follow from `leader`; called again on a new leader epoch, which moves the position."""
        key = (topic, partition)
        old = self.assignments.get(key)
        if old != leader:
            if old is not None:
                self._drop(key, old)
            self.assignments[key] = leader
            followed = self.by_leader.setdefault(leader, set())
            followed.add(key)
            if len(followed) == 1:
                self._signal()
        self.mark(key)

    def unfollow(self, topic: str, partition: int) -> None:
        key = (topic, partition)
        self.caught_up.discard(key)
        old = self.assignments.pop(key, None)
        if old is not None:
            self._drop(key, old)

    def _drop(self, key, leader: int) -> None:
        followed = self.by_leader.get(leader)
        if followed is not None:
            followed.discard(key)
            if not followed:
                del self.by_leader[leader]
                self._signal()
        session = self.sessions.get(leader)
        if session is not None:
            session.mark(key)                   # the next fetch lists it as forgotten

    def mark(self, key) -> None:
        """`key`'s fetch position may have changed: compare it again on the next fetch."""
        leader = self.assignments.get(key)
        session = self.sessions.get(leader) if leader is not None else None
        if session is not None:
            session.mark(key)

    def _signal(self) -> None:
        event, self.changed = self.changed, trio.Event()
        event.set()

    async def run(self) -> None:
        running: dict[int, trio.CancelScope] = {}
        async with trio.open_nursery() as nursery:
            while True:
                # Take the event before reading `by_leader`: a `follow`/`unfollow` while we
                # await `nursery.start` below sets this one, so we look again. Waiting on
                # `self.changed` as of after the loop lost that wake-up, and a leader that
                # appeared meanwhile got no fetcher until another leader came or went
                # (issue 20: a restarted broker never fetched from one leader again).
                changed = self.changed
                leaders = set(self.by_leader)
                for leader in leaders - set(running):
                    running[leader] = await nursery.start(self._fetch_from, leader)
                for leader in set(running) - leaders:
                    running.pop(leader).cancel()
                await changed.wait()

    def _max_wait_ms(self) -> int:
        # Kafka's replica.fetch.wait.max.ms (it was a fixed 500 here, the setting ignored)
        return config_value(self.config, "replica.fetch.wait.max.ms")

    async def _fetch_from(self, leader: int, task_status=trio.TASK_STATUS_IGNORED) -> None:
        session = FollowerSession()
        with trio.CancelScope() as scope:
            task_status.started(scope)
            self.sessions[leader] = session
            try:
                await self._fetch_loop(leader, session)
            finally:
                if self.sessions.get(leader) is session:
                    del self.sessions[leader]

    async def _fetch_loop(self, leader: int, session: FollowerSession) -> None:
        link = _Link(leader)
        while True:
            # One cancel scope over many fetches, its deadline moved on before each: a scope
            # entered and left per request (BrokerConnection's own timeout) was ~9 % of a
            # follower's CPU at one fetch exchange per append. A fetch (or a connect) that
            # outlives it ends the scope: the link failed, and starts over in a new one.
            with trio.CancelScope() as scope:
                await self._fetch_rounds(leader, session, link, scope)
            await self._link_failed(link, session, trio.TooSlowError("no answer in time"))

    async def _link_failed(self, link: "_Link", session: FollowerSession, exc: Exception) -> None:
        link.failures.failed(exc)
        session.on_failure()
        if link.conn is not None:
            with trio.CancelScope(shield=True):
                await link.conn.aclose()
        link.conn = None
        await trio.sleep(0.2)

    async def _fetch_rounds(self, leader: int, session: FollowerSession, link: "_Link",
                            scope: trio.CancelScope) -> None:
        """Fetch from `leader` until cancelled; returns only when `scope`'s deadline passed."""
        while True:
            # moved only once it is a second or more behind: setting a deadline is a trio
            # generator context manager and a heap update, ~1 % of a follower's CPU when it
            # ran per fetch; a link is then left after replica.fetch.wait.max.ms + 4-5 s
            deadline = trio.current_time() + self._max_wait_ms() / 1000 + 5
            if not deadline - 1 <= scope.deadline <= deadline:
                scope.deadline = deadline
            reg = self._image().brokers.get(leader)
            if not self.by_leader.get(leader) or reg is None:
                await trio.sleep(0.1)
                continue
            if trio.current_time() >= link.next_resync:
                # A safety net, O(followed) once a minute: positions that moved without a
                # mark (a storage failure taking replicas offline, retention moving a log
                # start) are compared again, so nothing waits longer than this.
                session.mark_all(self.by_leader.get(leader, ()))
                link.next_resync = trio.current_time() + RESYNC_INTERVAL_S
            try:
                if link.conn is None:
                    link.conn = BrokerConnection(reg.host, reg.port, f"replica-{self.broker_id}",
                                                 security=self._security)
                    await link.conn.connect(timeout_s=2)
                held = self.held.pop(leader, None)
                if held:
                    session.mark_all(held)
                plan = session.build(self.by_leader.get(leader, ()),
                                     lambda key: self._position(key, leader))
                resp = await link.conn.request(self._request(plan), FETCH_VERSION,
                                               timeout_s=math.inf)     # `scope` times it
            except (ConnectionClosed, OSError, DecodeError, trio.TooSlowError, ValueError) as exc:
                await self._link_failed(link, session, exc)
                continue
            self._count(leader, plan, resp)
            link.failures.answered()
            if not session.on_response(plan, resp.error_code, resp.session_id):
                log.info("fetch session with broker %d: %s, starting a new one", leader,
                         ErrorCode(resp.error_code).name)
                await trio.sleep(0.05)
                continue
            if self._process(resp, session, leader):
                await trio.sleep(0.05)      # errors: let metadata catch up before retrying

    def _count(self, leader: int, plan: FetchPlan, resp) -> None:
        st = self.stats.setdefault(leader, FetchStats())
        st.request_partitions = len(plan.send) + len(plan.forgotten)
        st.response_partitions = sum(len(t.partitions) for t in resp.responses)
        if plan.full:
            st.full_fetches += 1
        else:
            st.incremental_fetches += 1

    def _position(self, key, leader: int | None = None) -> FetchPosition | None:
        """Where `key` fetches from now; None if it is not fetched (from `leader`)."""
        if leader is not None and self.assignments.get(key) != leader:
            return None
        hosted = self.replicas.get(*key)
        if hosted is None or hosted.state.role is not Role.FOLLOWER or hosted.offline:
            return None
        if self.quota.throttled and self.quota.should_throttle(
                key[0], key[1], self.broker_id in hosted.state.isr or key in self.caught_up,
                steady_ms()):
            self.held.setdefault(self.assignments.get(key, -1), set()).add(key)
            return None                 # Kafka's fetcher leaves it out of this fetch
        plog = hosted.log
        return FetchPosition(plog.log_end_offset, plog.latest_epoch, hosted.state.leader_epoch,
                             plog.log_start_offset)

    def _build(self, parts):
        """A sessionless full fetch of `parts` (session 0, epoch -1): the fetch before sessions,
        which the deterministic simulation (chaos_tests/sim) drives with `_process`."""
        send = [(key, pos) for key in parts if (pos := self._position(key)) is not None]
        return self._request(FetchPlan(0, -1, send, []))

    def _request(self, plan: FetchPlan):
        cls = REQUESTS[ApiKey.FETCH]
        max_bytes = self.config["replica.fetch.max.bytes"]
        topics: dict[str, list] = {}
        for (topic, partition), pos in plan.send:
            topics.setdefault(topic, []).append(cls.FetchPartition(
                partition=partition, current_leader_epoch=pos.current_leader_epoch,
                fetch_offset=pos.fetch_offset, last_fetched_epoch=pos.last_fetched_epoch,
                log_start_offset=pos.log_start_offset, partition_max_bytes=max_bytes))
        forgotten: dict[str, list] = {}
        for topic, partition in plan.forgotten:
            forgotten.setdefault(topic, []).append(partition)
        return cls(replica_id=self.broker_id, max_wait_ms=self._max_wait_ms(),
                   min_bytes=config_value(self.config, "replica.fetch.min.bytes"),
                   max_bytes=config_value(self.config, "replica.fetch.response.max.bytes"),
                   isolation_level=0, session_id=plan.session_id,
                   session_epoch=plan.session_epoch,
                   topics=[cls.FetchTopic(topic=t, partitions=ps) for t, ps in topics.items()],
                   forgotten_topics_data=[cls.ForgottenTopic(topic=t, partitions=ps)
                                          for t, ps in forgotten.items()])

    def _process(self, resp, asked_in, leader: int) -> bool:
        """Apply a fetch response from `leader`; True if some partition reported an error.
        Partitions missing from an incremental answer have no news: their view stays. A
        partition whose state moved on while the fetch was in flight (another leader or leader
        epoch, or a different log end) is skipped, as Kafka's fetcher does: the answer was right
        for the question asked, and applying a late "you diverged at N" from a previous leader
        would truncate records committed since. Skipped and applied partitions are marked so
        the next fetch sends their new position.

        `asked_in`: the session the fetch was made in (its `sent` is what the leader answered
        about), or a sessionless request body (`_build`)."""
        if isinstance(asked_in, FollowerSession):
            positions, mark = asked_in.sent, asked_in.mark
        else:
            positions = {(t.topic, p.partition): FetchPosition(
                p.fetch_offset, p.last_fetched_epoch, p.current_leader_epoch, p.log_start_offset)
                for t in asked_in.topics for p in t.partitions}
            mark = _no_mark
        errors = False
        now = int(time.time() * 1000)
        for t in resp.responses:
            for p in t.partitions:
                key = (t.topic, p.partition_index)
                asked = positions.get(key)
                hosted = self.replicas.get(*key)
                if asked is None or hosted is None or hosted.state.role is not Role.FOLLOWER:
                    continue
                mark(key)
                if hosted.state.leader_id != leader or \
                        (asked.current_leader_epoch, asked.fetch_offset) != \
                        (hosted.state.leader_epoch, hosted.log.log_end_offset):
                    log.debug("dropping a stale fetch answer for %s-%d", t.topic, p.partition_index)
                    continue
                try:
                    errors |= self._apply(hosted, p, now)
                except (KafkaError, DecodeError) as exc:
                    log.warning("follower %s-%d: %s", t.topic, p.partition_index, exc)
                    errors = True
                except OSError as exc:
                    log.error("follower %s-%d storage error: %s", t.topic, p.partition_index, exc)
                    self.replicas.storage_failed(hosted, exc)
                    errors = True
        return errors

    def _apply(self, hosted, p, now: int) -> bool:
        plog, state = hosted.log, hosted.state
        self.replicas.check_storage(hosted)
        if p.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
            if p.high_watermark >= 0 and plog.log_end_offset > p.high_watermark:
                plog.truncate_to(p.high_watermark)
                hosted.truncated()
            elif p.log_start_offset > plog.log_end_offset:
                plog.truncate_fully_and_start_at(p.log_start_offset)
                hosted.truncated()
            return True
        if p.error_code != ErrorCode.NONE:
            return True
        if p.diverging_epoch.epoch >= 0 or p.diverging_epoch.end_offset >= 0:
            # The leader's last offset for that epoch may be past what we hold *of that epoch*
            # (our later records are from an epoch the leader never had): cut at the smaller of
            # its end offset and our own end offset for the epoch it names (Kafka's fetcher).
            end = p.diverging_epoch.end_offset
            local_epoch, local_end = plog.end_offset_for(p.diverging_epoch.epoch)
            if end < 0 or local_epoch < 0:
                target = plog.log_start_offset
            else:
                target = min(end, local_end, plog.log_end_offset)
            log.info("%s-%d diverged at epoch %d: truncating to %d", hosted.topic,
                     hosted.partition, p.diverging_epoch.epoch, target)
            plog.truncate_to(target)
            hosted.truncated()
            return False
        if p.records is not None and len(p.records):
            # one copy of the records, out of the response frame (a view would pin the
            # connection's buffer), validated in place; the headers it parsed feed the
            # producer state (they were parsed a second time here)
            data = bytearray(p.records)
            info = plog.append_as_follower(memoryview(data), now)
            if self.quota.is_throttled(hosted.topic, hosted.partition):
                self.quota.record(len(data), steady_ms(), (hosted.topic, hosted.partition))
            for h in info.headers:
                if h.producer_id >= 0:
                    hosted.producers.update_from_header(h)
        state.update_follower_high_watermark(p.high_watermark)
        self._note_lag(hosted, p.high_watermark)
        self.purgatory.notify((hosted.topic, hosted.partition))
        return False

    def _note_lag(self, hosted, leader_high_watermark: int) -> None:
        """Kafka's follower counts a replica in sync for its throttle once it has no lag behind
        the leader's high watermark (it may not be in the ISR yet: held back then, it would
        never send the fetch at the log end that admits it)."""
        key = (hosted.topic, hosted.partition)
        if self.quota.is_throttled(*key) and hosted.log.log_end_offset >= leader_high_watermark:
            self.caught_up.add(key)
        else:
            self.caught_up.discard(key)
