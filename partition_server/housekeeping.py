"""The broker's periodic jobs, each touching only what can need work, or a bounded slice of the
hosted partitions per tick — so an idle broker's cost does not grow with its partition count.

- ISR checks (AlterPartition, KIP-497), every min(replica.lag.time.max.ms / 4, 500 ms): the
  partitions flagged since the last tick (a follower outside the ISR fetched, so it may join; an
  AlterPartition must be sent again) plus a slice of a sweep over the partitions led here that
  visits each once per replica.lag.time.max.ms / 4. A laggard is therefore proposed out within
  1.25 × the lag time (Kafka checks every lag / 2); a caught-up follower joins at its next fetch.
- log flushes (flush.ms): only logs with a finite flush.ms.
- compaction: a bounded slice per second per compacted log (LogCleaner budget).
- retention: a sweep visiting each log once per log.retention.check.interval.ms, a slice per
  second, instead of every log at once.
- high watermark checkpoint, every replica.high.watermark.checkpoint.interval.ms: written only
  when some high watermark changed since the last write.

The loops take what they use (the replica manager, the purgatory, a few settings and callables
into the broker), not the broker, so a test runs one against a bare ReplicaManager.
"""

from __future__ import annotations

import logging
import math
import time
from typing import TYPE_CHECKING, Awaitable, Callable, Iterable

import trio

from common.clock import steady_ms
from partition_server.log.cleaner import LogCleaner
from partition_server.replication.partition import Role

if TYPE_CHECKING:
    from partition_server.purgatory import Purgatory
    from partition_server.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

# ISR changes per AlterPartition: the active controller handles a request in one step of its
# event loop (tens of microseconds a partition, from decoding it to proposing the records), so
# 30,000 in one request held it for over a second while heartbeats and other brokers waited
# (at 30,000 partitions a restarted broker's followers rejoin every ISR at once)
ALTER_PARTITION_MAX = 2_000
COMPACTION_BUDGET_BYTES = 4 << 20


class Sweep:
    """Visit every key of a changing collection about once per `period_s`, `tick_s` worth of
    it per call: the collection is listed once per pass (keys added meanwhile wait for the next
    pass; keys gone are skipped by the caller)."""

    def __init__(self, source: Callable[[], Iterable], period_s: float, tick_s: float):
        self._source = source
        self._share = min(1.0, tick_s / period_s) if period_s > 0 else 1.0
        self._keys: list = []
        self._pos = 0

    def next_slice(self) -> list:
        if self._pos >= len(self._keys):
            self._keys = list(self._source())
            self._pos = 0
        n = max(1, math.ceil(len(self._keys) * self._share))
        out = self._keys[self._pos:self._pos + n]
        self._pos += n
        return out


def now_ms() -> int:
    return int(time.time() * 1000)


async def isr_loop(replicas: ReplicaManager, lag_ms: int, isr_eligible: Callable[[int], bool],
                   alter_partition: Callable[[list], Awaitable[None]]) -> None:
    """Propose ISR shrinks/expansions for partitions we lead: `alter_partition(changes)` sends
    them (replication/isr.py's send_alter_partition); `isr_eligible(broker_id)` says whether a
    follower's broker may join the ISR (KIP-841); `lag_ms` is replica.lag.time.max.ms.

    The partitions to look at (a slice of those led, and the candidates: a follower outside
    the ISR fetched, or a change must be sent again) form a backlog, worked through
    ALTER_PARTITION_MAX changes per request, one request after another. Each change is
    computed just before its request, from the state as it is then: when a restarted broker
    rejoins 30,000 ISRs the requests take seconds each, and changes computed up front went
    stale meanwhile (the controller moved leaderships or changed ISRs itself; ~30,000 were
    sent anyway and refused after a two-broker restart). Partitions whose acks=all produces were
    refused for a short ISR (`replicas.isr_urgent`) or whose acks=all produces wait for replication
    (`replicas.produce_waiting`) go first, including those that became ready while the
    requests before were out: a producer waiting on one should not wait for 29,999 idle ones.
    A change to send again (an uncertain answer) waits for the next tick, as before.
    (librdkafka's idempotent producer sends nothing more on a connection whose five requests
    in flight wait: below min.insync.replicas the high watermark stands still, KIP-966, so
    they wait until the ISR grows back or they time out.)"""
    tick_s = min(lag_ms / 4000, 0.5)
    sweep = Sweep(lambda: replicas.led, lag_ms / 4000, tick_s)
    backlog: dict = {}                  # insertion-ordered set of partitions to look at
    tried: set = set()                  # proposed since the tick: a refusal waits for the next
    while True:
        if not backlog:
            await trio.sleep(tick_s)
            tried = set()
            backlog.update(dict.fromkeys(sweep.next_slice()))
            backlog.update(dict.fromkeys(replicas.isr_candidates))
            replicas.isr_candidates = set()
        urgent, replicas.isr_urgent = replicas.isr_urgent, set()
        urgent.update(replicas.produce_waiting)
        # urgent candidates join at once; the others wait for the next tick
        ready = [k for k in urgent if k in replicas.isr_candidates and k not in tried]
        replicas.isr_candidates.difference_update(ready)
        front = [k for k in urgent if k in backlog] + ready
        if front:
            rest, backlog = backlog, dict.fromkeys(front)
            backlog.update(rest)
        changes = []
        now = steady_ms()
        for key in list(backlog):
            del backlog[key]
            hosted = replicas.get(*key)
            if hosted is None or hosted.state.role is not Role.LEADER:
                continue
            change = hosted.state.isr_change_needed(now, lag_ms, isr_eligible)
            if change is not None:
                changes.append((hosted, change))
                tried.add(key)
                if len(changes) == ALTER_PARTITION_MAX:
                    break
        if changes:
            await alter_partition(changes)


async def housekeeping_loop(replicas: ReplicaManager, purgatory: Purgatory, retention_s: float,
                            hw_interval: float,
                            checkpoint_high_watermarks: Callable[..., None]) -> None:
    """Flushes, compaction, retention (every `retention_s`, log.retention.check.interval.ms)
    and high-watermark checkpoints (every `hw_interval`)."""
    tick_s = min(1.0, hw_interval)
    retention = Sweep(lambda: replicas.partitions, retention_s, tick_s)
    next_hw_checkpoint = trio.current_time() + hw_interval
    while True:
        await trio.sleep(tick_s)
        now = now_ms()
        if trio.current_time() >= next_hw_checkpoint:
            checkpoint_high_watermarks(force=False)
            next_hw_checkpoint = trio.current_time() + hw_interval
        for key in list(replicas.timed_flush):
            _guarded(replicas, key, lambda h: h.log.maybe_flush(now))
        for key in list(replicas.compacted):
            _guarded(replicas, key, lambda h: _compact(h, now))
        for key in retention.next_slice():
            _guarded(replicas, key, lambda h: _retention(purgatory, h, now))


def _compact(hosted, now: int) -> None:
    # a bounded slice of compaction per second per log, between events
    if hosted.cleaner is None:
        hosted.cleaner = LogCleaner(hosted.log)
    hosted.cleaner.clean_step(COMPACTION_BUDGET_BYTES, now)


def _retention(purgatory: Purgatory, hosted, now: int) -> None:
    if hosted.log.apply_retention(now):
        # the log start moved: fetch sessions holding the partition tell their followers
        purgatory.notify((hosted.topic, hosted.partition))


def _guarded(replicas: ReplicaManager, key, job) -> None:
    hosted = replicas.get(*key)
    if hosted is None or hosted.offline:
        return
    try:
        replicas.check_storage(hosted)
        job(hosted)
    except OSError as exc:
        log.error("housekeeping of %s-%d failed: %s", hosted.topic, hosted.partition, exc)
        replicas.storage_failed(hosted, exc)
