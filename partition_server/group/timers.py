"""A deadline heap for the group coordinator's timers: the periodic tick costs what is due, not
the number of groups (issue 18).

Each group has at most one live entry, at the earliest moment something in it may have to
happen (a member's session runs out, a rebalance times out, a revocation is late). Callers
`schedule` a deadline whenever they set one; it is pushed only when it is earlier than the
group's live entry, so the common case — a heartbeat pushing its member's deadline later —
costs a dict lookup. When an entry comes due, `due` hands the group back and forgets its entry;
the caller checks the group and schedules its next deadline, computed from scratch. Entries
made stale (an earlier deadline scheduled over them, the group deleted or replaced by a new
object under the same id) are skipped when they surface. Pure: no clock, callers pass `now_ms`.
"""

from __future__ import annotations

import heapq
import itertools

INF = float("inf")


class DeadlineHeap:
    def __init__(self):
        self._heap: list[tuple[float, int, object]] = []
        self._live: dict[str, tuple[float, object]] = {}   # group id → (deadline, group)
        self._seq = itertools.count()                       # ties: never compare groups

    def __len__(self) -> int:
        """Entries in the heap, stale ones included (for tests: it stays bounded)."""
        return len(self._heap)

    def scheduled(self, group) -> float:
        """The group's live deadline (INF when none)."""
        live = self._live.get(group.group_id)
        return live[0] if live is not None and live[1] is group else INF

    def schedule(self, group, deadline_ms: float) -> None:
        """Look at `group` no later than `deadline_ms`."""
        if deadline_ms == INF or deadline_ms >= self.scheduled(group):
            return
        self._live[group.group_id] = (deadline_ms, group)
        heapq.heappush(self._heap, (deadline_ms, next(self._seq), group))

    def due(self, now_ms: int, groups: dict) -> list:
        """The groups (still in `groups`) whose deadline is at or before `now_ms`, each once;
        their entries are gone, so the caller schedules each group's next deadline."""
        out = []
        heap = self._heap
        while heap and heap[0][0] <= now_ms:
            deadline, _, group = heapq.heappop(heap)
            live = self._live.get(group.group_id)
            if live is None or live[1] is not group or live[0] != deadline:
                continue                            # stale: rescheduled, replaced or done
            del self._live[group.group_id]
            if groups.get(group.group_id) is group:
                out.append(group)
        return out
