"""Incremental fetch sessions (KIP-227): a consumer (or follower) that fetches many partitions
sends only what changed, and the broker answers only partitions with news.

Pure state: no sockets, no clock (callers pass `now_ms`). The Fetch handler asks for a
`FetchContext` per request, reads the partitions the context lists, then lets the context choose
which partition results go into the response.

Request (session_id, session_epoch) → context:

    (0, -1)    sessionless: a full fetch, no session kept; response session id 0.
    (0,  0)    full: create a session holding the requested partitions (if the cache has room:
               otherwise answer sessionless, session id 0, which clients accept); every
               partition is in the response.
    (S, -1)    close session S, then as (0, -1).
    (S,  0)    close session S, then as (0, 0).
    (S,  E>0)  incremental on S: E must equal the session's next epoch (else
               INVALID_FETCH_SESSION_EPOCH; unknown S: FETCH_SESSION_ID_NOT_FOUND). Requested
               partitions are added or update their fetch position; forgotten ones are removed;
               the fetch covers every partition of the session, and the response carries only
               partitions with records, an error, a diverging epoch or a changed high
               watermark, last stable offset or log start offset (and, for a follower, the
               partitions the request names: see `FetchContext.select`). Partitions that returned records move to
               the end of the session's order so one busy partition cannot starve the rest
               under `max_bytes` (Kafka does the same).

Cache: at most `max_slots` sessions. When full, a new session may evict the least recently used
one only if it has been idle for `eviction_ms` (Kafka's
`min.incremental.fetch.session.eviction.ms`); otherwise the new client just goes sessionless.
"""

from __future__ import annotations

import dataclasses
import random
from collections import OrderedDict

from wire.errors import ErrorCode

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
NO_SESSION = 0
MAX_EPOCH = 2**31 - 1

PartitionKey = tuple[object, int]       # (topic name or topic id, partition)


@dataclasses.dataclass
class CachedPartition:
    request: object                     # the last request partition (fetch offset, epochs, max bytes)
    high_watermark: int = -1            # what the client was last told
    last_stable_offset: int = -1
    log_start_offset: int = -1


@dataclasses.dataclass
class FetchSession:
    session_id: int
    next_epoch: int
    partitions: "OrderedDict[PartitionKey, CachedPartition]"
    last_used_ms: int
    # a follower's session (handlers/fetch.py): keys notified since its last read, or all
    dirty: set = dataclasses.field(default_factory=set)
    all_dirty: bool = False
    edge: object = None                 # the broker's watch on the session's partitions


class FetchContext:
    def __init__(self, error: ErrorCode = ErrorCode.NONE, session: "FetchSession | None" = None,
                 incremental: bool = False, partitions: list | None = None,
                 requested: frozenset = frozenset(), added: list | None = None,
                 forgotten: list | None = None):
        self.error = error
        self.session = session
        self.incremental = incremental
        self._partitions = partitions or []   # [(PartitionKey, request partition)]
        self.requested = requested            # keys named by an incremental request
        self.added = added or []              # keys that joined the session with this request
        self.forgotten = forgotten or []      # keys that left it
        self.answer_requested = False         # a follower's fetch: see `select`

    @property
    def partitions(self) -> list:
        """Every partition this fetch covers: an incremental fetch covers the whole session
        (built on demand: a follower's session fetch reads only what changed, see
        handlers/fetch.py)."""
        if self.incremental:
            return [(k, c.request) for k, c in self.session.partitions.items()]
        return self._partitions

    @property
    def session_id(self) -> int:
        return self.session.session_id if self.session is not None else NO_SESSION

    def select(self, results: list) -> list:
        """`results`: [(PartitionKey, result)] with attributes error, high_watermark,
        last_stable_offset, log_start_offset, size, diverging_epoch. Returns the ones to send
        and remembers what the client now knows."""
        if self.session is None:
            return results
        chosen, busy = [], []
        for key, res in results:
            cached = self.session.partitions.get(key)
            if cached is None:
                chosen.append((key, res))
                continue
            changed = (res.high_watermark != cached.high_watermark
                       or res.last_stable_offset != cached.last_stable_offset
                       or res.log_start_offset != cached.log_start_offset)
            # In a follower's session a partition the request names is always answered: a
            # follower that dropped an answer as stale re-sends its position to get the news it
            # missed (a high watermark it was told but did not apply would not be sent again).
            # Consumers get Kafka's rule: only news.
            must = (not self.incremental or changed or res.size > 0
                    or (self.answer_requested and key in self.requested)
                    or res.error != ErrorCode.NONE or res.diverging_epoch is not None)
            if must:
                chosen.append((key, res))
            # an error answer carries -1s, so the first good answer after it is always sent
            cached.high_watermark = res.high_watermark
            cached.last_stable_offset = res.last_stable_offset
            cached.log_start_offset = res.log_start_offset
            if res.size > 0:
                busy.append(key)
        for key in busy:
            self.session.partitions.move_to_end(key)
        return chosen


class FetchSessionCache:
    def __init__(self, max_slots: int = 1000, eviction_ms: int = 120_000, rng=None,
                 on_close=None):
        self.on_close = on_close        # called with each session leaving the cache
        self.max_slots = max_slots
        self.eviction_ms = eviction_ms
        self.sessions: "OrderedDict[int, FetchSession]" = OrderedDict()   # LRU first
        self._rng = rng or random.Random()

    def new_context(self, session_id: int, epoch: int, requested: list, forgotten: list,
                    now_ms: int) -> FetchContext:
        """`requested`: [(PartitionKey, request partition)], `forgotten`: [PartitionKey]."""
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != NO_SESSION:
                self._close(self.sessions.pop(session_id, None))
            if epoch == FINAL_EPOCH or self.max_slots <= 0:
                return FetchContext(partitions=list(requested))
            session = self._create(requested, now_ms)
            return FetchContext(session=session, partitions=list(requested),
                                added=[k for k, _ in requested] if session is not None else [])
        session = self.sessions.get(session_id)
        if session is None:
            return FetchContext(ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        if epoch != session.next_epoch:
            return FetchContext(ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        gone, added = [], []
        for key in forgotten:
            if session.partitions.pop(key, None) is not None:
                gone.append(key)
        for key, req in requested:
            cached = session.partitions.get(key)
            if cached is None:
                session.partitions[key] = CachedPartition(req)
                added.append(key)
            else:
                cached.request = req
        session.next_epoch = 1 if session.next_epoch >= MAX_EPOCH else session.next_epoch + 1
        session.last_used_ms = now_ms
        self.sessions.move_to_end(session_id)
        return FetchContext(session=session, incremental=True,
                            requested=frozenset(k for k, _ in requested), added=added,
                            forgotten=gone)

    def _create(self, requested: list, now_ms: int) -> FetchSession | None:
        if len(self.sessions) >= self.max_slots:
            oldest_id, oldest = next(iter(self.sessions.items()))
            if now_ms - oldest.last_used_ms < self.eviction_ms:
                return None
            self._close(self.sessions.pop(oldest_id))
        session_id = NO_SESSION
        while session_id == NO_SESSION or session_id in self.sessions:
            session_id = self._rng.randint(1, MAX_EPOCH)
        session = FetchSession(session_id, 1, OrderedDict((k, CachedPartition(r)) for k, r in requested),
                               now_ms)
        self.sessions[session_id] = session
        return session

    def _close(self, session: FetchSession | None) -> None:
        if session is not None and self.on_close is not None:
            self.on_close(session)
