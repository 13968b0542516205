"""A follower's Fetch in an incremental fetch session (KIP-227), leader side, at O(changed).

A plain session fetch covers every partition of the session: at thousands of partitions per
follower that is thousands of reads per long poll even when nothing happens. Here the session
keeps a watch in the fetch purgatory on all its partitions (registered once, when the session is
created, and kept up to date as partitions join and leave it): each `notify(key)` — a log grew, a
log start moved, a replica went offline, leadership changed — marks the key dirty and wakes a
fetch waiting on the session; a move of the high watermark alone (`notify_high_watermark`) only
marks it, as Kafka's follower fetches learn it with the next records or at the end of the long
poll. A fetch reads only the partitions its request names (their position moved) and the dirty
ones; it long-polls on the session's wake-up, not on one registration per partition.

The partitions not read are still fetched, as far as the follower's ISR membership goes: the
session's `FetchClock` (replication/partition.py) moves on every fetch, and a follower whose last
fetch offset is the leader's log end counts as caught up as of that fetch.

Under produce load the answer serves many appends at once: a fetch woken by an append waits,
a scheduler pass at a time, while the appends under way keep marking partitions (`_coalesce`),
and a partition whose high watermark this very fetch moved is not marked again in its own
session (the answer holds that high watermark already). librdkafka sends one partition per
Produce request, so otherwise each request paid a replication cycle of its own.

As a safety net against a change that nothing notified, a session reads all its partitions again
every `FULL_SCAN_MS` (bounded: once a minute per follower session).
"""

from __future__ import annotations

import dataclasses

import trio

from common.clock import steady_ms
from common.request_metrics import add_remote_time
from partition_server.fetch_session import FetchContext, FetchSession
from partition_server.handlers.context import HandlerContext
from partition_server.replica_manager import FetchResult
from partition_server.replication.partition import FetchClock
from wire.errors import ErrorCode, KafkaError

FULL_SCAN_MS = 60_000
COALESCE_QUIET_PASSES = 3     # scheduler passes with no new dirty partition before answering
COALESCE_MAX_PASSES = 64      # a bound on the wait whatever keeps arriving


class SessionWatch:
    """The broker-side edge of a follower's session: its purgatory watch, wake-up and clock."""

    def __init__(self, hctx: HandlerContext, session: FetchSession, replica_id: int, now_ms: int):
        self.session = session
        self.replica_id = replica_id
        self.clock = FetchClock(now_ms)
        self.event = trio.Event()
        self.next_scan_ms = now_ms + FULL_SCAN_MS
        self.watch = hctx.purgatory.watch(list(session.partitions), self.wake, self.note)

    def wake(self, key) -> None:
        if key is None:
            self.session.all_dirty = True         # notify_all: anything may have changed
        else:
            self.session.dirty.add(key)
        self.event.set()

    def note(self, key) -> None:
        """Only the high watermark moved (`notify_high_watermark`): the next answer carries it,
        whatever ends the long poll (records, the wait)."""
        self.session.dirty.add(key)

    def close(self) -> None:
        self.watch.cancel()
        self.clock.alive = False
        self.event.set()


def close_session(session: FetchSession) -> None:
    """`FetchSessionCache.on_close`: the session was closed, replaced or evicted."""
    if session.edge is not None:
        session.edge.close()
        session.edge = None


def _session_watch(hctx: HandlerContext, ctx: FetchContext, replica_id: int,
                   now_ms: int) -> SessionWatch:
    session = ctx.session
    w = session.edge
    if w is None or w.replica_id != replica_id:
        if w is not None:
            w.close()
        w = session.edge = SessionWatch(hctx, session, replica_id, now_ms)
        session.dirty.clear()
        session.all_dirty = True
        return w
    w.watch.add_keys(ctx.added)
    w.watch.remove_keys(ctx.forgotten)
    for key in ctx.forgotten:
        hosted = hctx.replicas.get(*key)
        if hosted is not None:
            hosted.state.follower_left_session(replica_id)
    return w


def _take_dirty(session: FetchSession, w: SessionWatch, now_ms: int) -> list:
    if session.all_dirty or now_ms >= w.next_scan_ms:
        session.all_dirty = False
        session.dirty.clear()
        w.next_scan_ms = now_ms + FULL_SCAN_MS
        return list(session.partitions)
    keys = list(session.dirty)
    session.dirty.clear()
    return keys


async def fetch_in_session(hctx: HandlerContext, req, ctx: FetchContext, replica_id: int,
                           now_ms: int, limits: tuple[int, int], respond):
    """Answer a follower's Fetch (v7–12, topics by name) in session `ctx.session`.
    `limits`: its (max_bytes, min_bytes) under the broker's cap (handlers/fetch.py);
    `respond(results, session_id)` encodes the response."""
    body = req.body
    max_bytes, min_bytes = limits
    session = ctx.session
    w = _session_watch(hctx, ctx, replica_id, now_ms)
    w.clock.last_fetch_ms = now_ms
    results: dict = {}
    budget = [max_bytes]
    no_room: list = []          # read again on the follower's next fetch (marked below)

    def read(keys) -> None:
        for key in keys:
            cached = session.partitions.get(key)
            if cached is None:
                continue
            room = budget[0]
            if room <= 0:
                no_room.append(key)               # none left: not read at all
                continue
            results[key] = res = _read_one(hctx, key, cached.request, replica_id, now_ms,
                                           room, room == max_bytes, w.clock)
            budget[0] -= res.size
            if not res.size and not res.error and room < cached.request.partition_max_bytes:
                no_room.append(key)     # maybe its next batch did not fit in what was left
            # This read's own notify (our fetch moved the high watermark) marked the key again
            # in this session; the result already holds that high watermark, so reading it
            # again would only repeat it (one more read and follower apply per batch).
            session.dirty.discard(key)
        if not session.dirty and not session.all_dirty and session.edge is w:
            w.event = trio.Event()                # nothing pending: no wake-up owed

    keys = _take_dirty(session, w, now_ms)
    read(dict.fromkeys([*ctx.requested, *keys]) if ctx.incremental else keys)
    started = trio.current_time()
    deadline = started + body.max_wait_ms / 1000
    if body.max_wait_ms > 0 and not _ready(results, min_bytes):
        await _long_poll(hctx, session, w, deadline, read, lambda: _ready(results, min_bytes))
    add_remote_time(trio.current_time() - started)         # the long poll (RemoteTimeMs)
    ctx.answer_requested = True
    # partitions not read for want of room, or read with less room than their own limit and
    # given nothing (records may not have fit): read them on the follower's next fetch (their
    # position does not change, so nothing else would mark them before the full scan, a minute
    # away). Marked here, after the wait: marked during it, the long poll would read them again
    # into the same lack of room.
    session.dirty.update(no_room)
    # partitions the throttle held back have news the follower did not get: read them again on
    # its next fetch (their position does not change, so nothing else would mark them)
    # (skipped outright while no topic is throttled: this runs on every follower fetch)
    if hctx.replication_quotas.leader.throttled:
        session.dirty.update(k for k, res in results.items()
                             if res.size == 0 and _held(hctx, k, replica_id))
    return respond(ctx.select(list(results.items())), ctx.session_id)


async def _long_poll(hctx: HandlerContext, session: FetchSession, w: SessionWatch,
                     deadline: float, read, ready) -> None:
    """Wait for the session's wake-ups, reading what they marked, until `ready()` or the
    deadline. The deadline is a callback in the purgatory's heap that sets the wake-up event
    (while the broker runs it), not a cancel scope per wait: its entry and exit were a few per
    cent of a leader's CPU when every acks=all append costs a follower fetch each."""
    deadlines = hctx.purgatory.deadlines
    expired = [False]
    timer = None
    if deadlines.running:
        def expire() -> None:
            expired[0] = True
            w.event.set()
        timer = deadlines.add(deadline, expire)
    try:
        while True:
            if timer is not None:
                await w.event.wait()
                if not expired[0]:
                    await _coalesce(session)
            else:
                with trio.move_on_at(deadline):
                    await w.event.wait()
                    await _coalesce(session)
            w.event = trio.Event()
            if session.edge is not w:
                return                            # the session was closed meanwhile
            read(_take_dirty(session, w, steady_ms()))
            if expired[0] or ready() or trio.current_time() >= deadline:
                return
    finally:
        if timer is not None:
            deadlines.cancel(timer)


async def _coalesce(session: FetchSession) -> None:
    """Woken by the first append: let the appends already under way land before answering.

    A Produce over many partitions (librdkafka sends one partition per request) reaches its
    append a scheduler pass or two after the one before it on the same connection, so a fetch
    answered at the first wake carried one or two partitions, and every acks=all request paid a
    whole replication cycle of its own (answer, follower append, next fetch, high watermark).
    Here the answer waits while partitions keep turning dirty, a scheduler pass at a time (no
    clock: on an idle broker a pass is immediate), until COALESCE_QUIET_PASSES passes bring
    nothing new, or COALESCE_MAX_PASSES."""
    seen, quiet = len(session.dirty), 0
    for _ in range(COALESCE_MAX_PASSES):
        if session.all_dirty:
            return
        await trio.lowlevel.cancel_shielded_checkpoint()
        n = len(session.dirty)
        if n == seen:
            quiet += 1
            if quiet >= COALESCE_QUIET_PASSES:
                return
        else:
            seen, quiet = n, 0


def _held(hctx: HandlerContext, key, replica_id: int) -> bool:
    """A throttled partition whose follower (out of the ISR) is behind our log end."""
    if not hctx.replication_quotas.leader.is_throttled(*key):
        return False
    hosted = hctx.replicas.get(*key)
    if hosted is None or replica_id in hosted.state.isr:
        return False
    follower = hosted.state.followers.get(replica_id)
    return follower is not None and follower.log_end_offset < hosted.log.log_end_offset


def _ready(results: dict, min_bytes: int) -> bool:
    total = 0
    for res in results.values():
        if res.error != ErrorCode.NONE or res.diverging_epoch is not None:
            return True
        total += res.size
    return total >= min_bytes


def _read_one(hctx: HandlerContext, key, p, replica_id: int, now_ms: int, remaining: int,
              min_one: bool, clock: FetchClock) -> FetchResult:
    topic, partition = key
    if topic not in hctx.image.topics:
        return FetchResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    hosted = hctx.replicas.get(topic, partition)
    hw = hosted.state.high_watermark if hosted is not None else None
    try:
        res = hctx.replicas.read(topic, partition, p.fetch_offset,
                                   max(0, min(p.partition_max_bytes, remaining)),
                                   p.current_leader_epoch, replica_id, p.last_fetched_epoch,
                                   now_ms, min_one=min_one, fetch_clock=clock)
    except KafkaError as exc:
        res = FetchResult(exc.error_code)
    if hosted is not None and hosted.state.high_watermark != hw:
        hctx.purgatory.notify_high_watermark(key)     # acks=all produces; other sessions note it
    return leader_throttle(hctx, key, hosted, replica_id, res, now_ms)


def leader_throttle(hctx: HandlerContext, key, hosted, replica_id: int, res: FetchResult,
                    now_ms: int) -> FetchResult:
    """The leader's replication throttle (replication/throttle.py): a throttled follower out of
    the ISR gets no records while the rate is over `leader.replication.throttled.rate` (its
    fetch position is still recorded: `read` ran); the bytes served for throttled partitions
    count toward the rate."""
    quota = hctx.replication_quotas.leader
    if not res.size or hosted is None or not quota.is_throttled(*key):
        return res
    if quota.should_throttle(key[0], key[1], replica_id in hosted.state.isr, now_ms):
        return dataclasses.replace(res, records=[], size=0)
    quota.record(res.size, now_ms, key)
    return res


def leader_holds(hctx: HandlerContext, key, replica_id: int, now_ms: int) -> bool:
    """Whether the leader's throttle would hold `replica_id`'s fetch of `key` back now."""
    quota = hctx.replication_quotas.leader
    if not quota.is_throttled(*key):
        return False
    hosted = hctx.replicas.get(*key)
    return hosted is not None and quota.would_throttle(key[0], key[1],
                                                       replica_id in hosted.state.isr, now_ms)
