"""The follower's side of an incremental fetch session (KIP-227), one per leader it fetches from:
Kafka's FetchSessionHandler. Pure bookkeeping: no sockets, no clock.

States (`next_epoch`):

    0 (full)  ──answer with session id S≠0──▶ incremental(S, 1) ──answer──▶ incremental(S, 2) …
    0 (full)  ──answer with session id 0──▶ 0 (the leader's cache is full: sessionless, each
                                            fetch names every partition, as before sessions)
    any       ──FETCH_SESSION_ID_NOT_FOUND──▶ 0 with no session (the leader restarted or evicted it)
    any       ──INVALID_FETCH_SESSION_EPOCH, other top-level error, no answer──▶ 0, closing S
              (a lost request leaves the leader's epoch unknown: start over, Kafka does the same)

A full fetch names every followed partition; an incremental one only the partitions whose fetch
position (fetch offset, last fetched epoch, current leader epoch, log start offset) differs from
what the leader's session holds, and lists partitions no longer followed from this leader as
forgotten. Callers `mark` a partition whenever its position may have changed (records appended,
truncation, a new leader epoch, following it from another leader, a stale answer skipped); the
next request compares only marked partitions with what was sent, so an idle follower's fetch costs
O(changed) and carries no partitions at all.

`sent` is updated when a request is built: at most one fetch per session is in flight, so while
an answer is processed `sent` is exactly the leader's view that answer was computed from (the
answer of an incremental fetch names partitions the request did not).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Hashable, Iterable, NamedTuple

from wire.errors import ErrorCode

NO_SESSION = 0
INITIAL_EPOCH = 0
MAX_EPOCH = 2**31 - 1


class FetchPosition(NamedTuple):
    """Immutable and compared by value; a tuple because one is built and compared per marked
    partition per fetch (a frozen dataclass cost twice as much)."""
    fetch_offset: int
    last_fetched_epoch: int
    current_leader_epoch: int
    log_start_offset: int


@dataclasses.dataclass
class FetchPlan:
    session_id: int
    session_epoch: int
    send: list                  # [(key, FetchPosition)] to put in the request
    forgotten: list             # [key] to list in forgotten_topics_data

    @property
    def full(self) -> bool:
        return self.session_epoch == INITIAL_EPOCH


class FollowerSession:
    def __init__(self):
        self.session_id = NO_SESSION
        self.next_epoch = INITIAL_EPOCH
        self.sent: dict[Hashable, FetchPosition] = {}     # the leader's view of our session
        self.dirty: set[Hashable] = set()

    def mark(self, key: Hashable) -> None:
        self.dirty.add(key)

    def mark_all(self, keys: Iterable[Hashable]) -> None:
        self.dirty.update(keys)

    def build(self, followed: Iterable[Hashable],
              position_of: Callable[[Hashable], FetchPosition | None]) -> FetchPlan:
        """The next request. `followed`: every partition followed from this leader (read only for
        a full fetch); `position_of(key)`: its position now, None when it is not to be fetched
        (not a follower of this leader, offline)."""
        if self.next_epoch == INITIAL_EPOCH:
            self.dirty.clear()
            self.sent = {}
            for key in followed:
                pos = position_of(key)
                if pos is not None:
                    self.sent[key] = pos
            return FetchPlan(self.session_id, INITIAL_EPOCH, list(self.sent.items()), [])
        send, forgotten = [], []
        for key in self.dirty:
            pos = position_of(key)
            if pos is None:
                if self.sent.pop(key, None) is not None:
                    forgotten.append(key)
            elif self.sent.get(key) != pos:
                self.sent[key] = pos
                send.append((key, pos))
        self.dirty.clear()
        return FetchPlan(self.session_id, self.next_epoch, send, forgotten)

    def on_response(self, plan: FetchPlan, error: int, session_id: int) -> bool:
        """Account for the answer to `plan`; False when it was a session error (the answer holds
        no partitions and the next fetch is a full one)."""
        if error == ErrorCode.FETCH_SESSION_ID_NOT_FOUND:
            self.session_id, self.next_epoch = NO_SESSION, INITIAL_EPOCH
            return False
        if error != ErrorCode.NONE:
            self.next_epoch = INITIAL_EPOCH          # (S, 0): close S and open a new one
            return False
        if plan.full:
            self.session_id = session_id
            self.next_epoch = INITIAL_EPOCH if session_id == NO_SESSION else 1
        else:
            self.next_epoch = 1 if self.next_epoch >= MAX_EPOCH else self.next_epoch + 1
        return True

    def on_failure(self) -> None:
        """No answer (connection lost, timeout): whether the leader saw the request is unknown."""
        self.next_epoch = INITIAL_EPOCH
