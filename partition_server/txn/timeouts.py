"""Which transactions the periodic timeout check must look at, without walking all of them
(issue 17: periodic jobs cost what is due, not the number of transactional ids).

The coordinator's `txns` is a `TxnTable`: a dict whose every assignment (load, each persisted
state change) files the new `TransactionMetadata` under the first moment the check could act on
it — an Ongoing transaction at `txn_start_ms + timeout_ms + 1` (aborted once strictly older than
its timeout), an idle one (Empty/Complete*) at `last_update_ms + expiration_ms + 1` (its id
expires), anything else never. Metadata is immutable and replaced on every change, so an entry
whose object is no longer the table's (changed, removed, unloaded) is stale and skipped.

`due(now)` hands back the current entries whose moment has come and keeps them due: the check
acts again on the next tick if nothing changed them meanwhile (an abort not finished yet, an id
this broker does not own any more), exactly as the full scan did. `timeout_actions` is the
check's decision, the same for a full scan (the tests' reference) and for the due entries. Pure:
callers pass the time.
"""

from __future__ import annotations

import heapq
import itertools

from partition_server.txn import state as S

ABORT, EXPIRE = "abort", "expire"


def deadline(meta: S.TransactionMetadata, expiration_ms: int) -> float | None:
    """The first time at which `timeout_actions` may act on `meta`; None: never."""
    if meta.state is S.TxnState.ONGOING:
        return meta.txn_start_ms + meta.timeout_ms + 1 if meta.txn_start_ms >= 0 else None
    if meta.state in S.IDLE:
        return meta.last_update_ms + expiration_ms + 1
    return None


def timeout_actions(entries, now_ms: int, expiration_ms: int, owned) -> list[tuple[str, str]]:
    """[(ABORT | EXPIRE, transactional id)] for `(tid, meta)` entries, as the check decides:
    an owned Ongoing transaction past its timeout aborts, an owned idle id past
    `transactional.id.expiration.ms` expires."""
    out = []
    for tid, meta in entries:
        if not owned(tid):
            continue
        if S.timed_out(meta, now_ms):
            out.append((ABORT, tid))
        elif meta.state in S.IDLE and now_ms - meta.last_update_ms > expiration_ms:
            out.append((EXPIRE, tid))
    return out


class TxnTable(dict):
    """transactional id → TransactionMetadata, with a heap of when each may need the check."""

    def __init__(self, expiration_ms: int):
        super().__init__()
        self.expiration_ms = expiration_ms
        self._heap: list[tuple[float, int, str, object]] = []
        self._seq = itertools.count()

    def __setitem__(self, tid: str, meta) -> None:
        super().__setitem__(tid, meta)
        self._file(tid, meta)

    def update(self, *args, **kw) -> None:
        for tid, meta in dict(*args, **kw).items():
            self[tid] = meta

    def _file(self, tid: str, meta) -> None:
        when = deadline(meta, self.expiration_ms)
        if when is not None:
            heapq.heappush(self._heap, (when, next(self._seq), tid, meta))
            if len(self._heap) > 2 * len(self) + 64:
                self._compact()

    def _compact(self) -> None:
        """Drop stale entries (each state change files one; an idle id's may lie days ahead)."""
        self._heap = [e for e in self._heap if self.get(e[2]) is e[3]]
        heapq.heapify(self._heap)

    def heap_size(self) -> int:
        return len(self._heap)

    def due(self, now_ms: int) -> list[tuple[str, object]]:
        """The current `(tid, meta)` entries whose deadline is at or before `now_ms`; they stay
        filed, so they come back on every call until their metadata changes."""
        out, heap, seen = [], self._heap, set()
        while heap and heap[0][0] <= now_ms:
            entry = heapq.heappop(heap)
            if self.get(entry[2]) is entry[3] and entry[2] not in seen:   # else stale or twice
                seen.add(entry[2])
                out.append(entry)
        for entry in out:
            heapq.heappush(heap, entry)
        return [(tid, meta) for _, _, tid, meta in out]
