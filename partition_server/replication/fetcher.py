"""Follower fetchers: one task per source (leader) broker, one Fetch in flight each.

Each Fetch carries, per followed partition, our log end offset, the epoch of our last batch and
our current leader epoch (KIP-320/595). The leader answers with batches to append, its high
watermark, or a diverging epoch: then we truncate to its end offset (the first offset where our
logs may differ) and fetch again. OFFSET_OUT_OF_RANGE means our log is outside the leader's:
above its end (truncate to it) or below its start (start over at its start).
"""

from __future__ import annotations

import logging
import time

import trio

from common.connection import BrokerConnection, ConnectionClosed
from partition_server.replication.partition import Role
from wire.errors import DecodeError, ErrorCode, KafkaError
from wire.messages.index_generated import REQUESTS
from wire.records.batch import iter_batches

log = logging.getLogger(__name__)

FETCH_VERSION = 12
MAX_WAIT_MS = 500


class FetcherManager:
    def __init__(self, broker):
        self.broker = broker
        self.assignments: dict[tuple[str, int], int] = {}     # partition → leader broker id
        self.changed = trio.Event()

    def follow(self, topic: str, partition: int, leader: int) -> None:
        if self.assignments.get((topic, partition)) != leader:
            self.assignments[(topic, partition)] = leader
            self._signal()

    def unfollow(self, topic: str, partition: int) -> None:
        if self.assignments.pop((topic, partition), None) is not None:
            self._signal()

    def _signal(self) -> None:
        event, self.changed = self.changed, trio.Event()
        event.set()

    async def run(self) -> None:
        running: dict[int, trio.CancelScope] = {}
        async with trio.open_nursery() as nursery:
            while True:
                leaders = set(self.assignments.values())
                for leader in leaders - set(running):
                    running[leader] = await nursery.start(self._fetch_from, leader)
                for leader in set(running) - leaders:
                    running.pop(leader).cancel()
                await self.changed.wait()

    async def _fetch_from(self, leader: int, task_status=trio.TASK_STATUS_IGNORED) -> None:
        with trio.CancelScope() as scope:
            task_status.started(scope)
            conn = None
            while True:
                parts = [k for k, v in self.assignments.items() if v == leader]
                reg = self.broker.image.brokers.get(leader)
                if not parts or reg is None:
                    await trio.sleep(0.1)
                    continue
                try:
                    if conn is None:
                        conn = BrokerConnection(reg.host, reg.port, f"replica-{self.broker.broker_id}",
                                                security=self.broker.inter_broker_security)
                        await conn.connect(timeout_s=2)
                    req = self._build(parts)
                    resp = await conn.request(req, FETCH_VERSION, timeout_s=MAX_WAIT_MS / 1000 + 5)
                except (ConnectionClosed, OSError, DecodeError, trio.TooSlowError, ValueError) as exc:
                    log.debug("fetch from broker %d failed: %s", leader, exc)
                    if conn is not None:
                        with trio.CancelScope(shield=True):
                            await conn.aclose()
                    conn = None
                    await trio.sleep(0.2)
                    continue
                if self._process(resp, req, leader):
                    await trio.sleep(0.05)      # errors: let metadata catch up before retrying

    def _build(self, parts):
        cls = REQUESTS[1]
        topics: dict[str, list] = {}
        for topic, partition in parts:
            hosted = self.broker.replicas.get(topic, partition)
            if hosted is None or hosted.state.role is not Role.FOLLOWER or hosted.offline:
                continue
            plog = hosted.log
            topics.setdefault(topic, []).append(cls.FetchPartition(
                partition=partition, current_leader_epoch=hosted.state.leader_epoch,
                fetch_offset=plog.log_end_offset, last_fetched_epoch=plog.latest_epoch,
                log_start_offset=plog.log_start_offset,
                partition_max_bytes=self.broker.config["replica.fetch.max.bytes"]))
        return cls(replica_id=self.broker.broker_id, max_wait_ms=MAX_WAIT_MS, min_bytes=1,
                   max_bytes=16 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                   topics=[cls.FetchTopic(topic=t, partitions=ps) for t, ps in topics.items()])

    def _process(self, resp, req, leader: int) -> bool:
        """Apply a fetch response to `req` sent to `leader`; True if some partition reported
        an error. A partition whose state moved on while the fetch was in flight (another
        leader or leader epoch, or a different log end) is skipped, as Kafka's fetcher does:
        the answer was right for the question asked, and applying a late "you diverged at N"
        from a previous leader would truncate records committed since."""
        asked = {(t.topic, p.partition): (p.current_leader_epoch, p.fetch_offset)
                 for t in req.topics for p in t.partitions}
        errors = False
        now = int(time.time() * 1000)
        for t in resp.responses:
            for p in t.partitions:
                hosted = self.broker.replicas.get(t.topic, p.partition_index)
                if hosted is None or hosted.state.role is not Role.FOLLOWER:
                    continue
                expected = asked.get((t.topic, p.partition_index))
                if expected is None or hosted.state.leader_id != leader or \
                        expected != (hosted.state.leader_epoch, hosted.log.log_end_offset):
                    log.debug("dropping a stale fetch answer for %s-%d", t.topic, p.partition_index)
                    continue
                try:
                    errors |= self._apply(hosted, p, now)
                except (KafkaError, DecodeError) as exc:
                    log.warning("follower %s-%d: %s", t.topic, p.partition_index, exc)
                    errors = True
                except OSError as exc:
                    log.error("follower %s-%d storage error: %s", t.topic, p.partition_index, exc)
                    self.broker.replicas.storage_failed(hosted, exc)
                    errors = True
        return errors

    def _apply(self, hosted, p, now: int) -> bool:
        plog, state = hosted.log, hosted.state
        self.broker.replicas.check_storage()
        if p.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
            if p.high_watermark >= 0 and plog.log_end_offset > p.high_watermark:
                plog.truncate_to(p.high_watermark)
                state.truncated_to(plog.log_end_offset)
            elif p.log_start_offset > plog.log_end_offset:
                plog.truncate_fully_and_start_at(p.log_start_offset)
                state.truncated_to(plog.log_end_offset)
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
            state.truncated_to(plog.log_end_offset)
            hosted.producers.truncate_after(plog.log_end_offset)
            return False
        if p.records is not None and len(p.records):
            data = bytes(p.records)
            plog.append_as_follower(data, now)
            for h in iter_batches(data):
                if h.producer_id >= 0:
                    hosted.producers.update_from_header(h)
        state.update_follower_high_watermark(p.high_watermark)
        self.broker.purgatory.notify((hosted.topic, hosted.partition))
        return False
