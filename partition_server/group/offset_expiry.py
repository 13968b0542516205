"""Which groups the committed-offsets expiry must look at, so a check costs what changed or is
due, not a walk over every committed offset of every group (issue 17).

The rule stays `state.expired_offsets` (KIP-211: only groups without members, once the offset
and the group's emptiness are both older than the retention). For a group without members, the
first moment any of its offsets can expire is `max(oldest commit time, empty since) +
retention`: the group is filed under that moment in a heap and not looked at before. A group
with members cannot expire anything; it is looked at on every check (a membership test, not a
walk over its offsets), so losing its members needs no notification. The coordinator `touch`es
a group whenever its offsets or its empty-since time change (commit, load, delete, expiry);
touched groups are looked at on the next check. After a look, each group's moment is computed
again from scratch — a group whose expired offsets were not removed (not ours any more, a
failed append) is due again at once, and looked at on every check as before. Pure: no clock.
"""

from __future__ import annotations

import heapq

from partition_server.group.state import expired_offsets


class OffsetExpiry:
    def __init__(self, retention_ms: int):
        self.retention_ms = retention_ms
        self._heap: list[tuple[int, str]] = []
        self._filed: dict[str, int] = {}          # group → the moment it is filed under
        self._touched: set[str] = set()
        self._with_members: set[str] = set()

    def touch(self, group_id: str) -> None:
        self._touched.add(group_id)

    def looked_at(self, now_ms: int) -> set[str]:
        """The groups this check looks at: due, touched, or with members at their last look."""
        out, self._touched = self._touched, set()
        out |= self._with_members
        heap = self._heap
        while heap and heap[0][0] <= now_ms:
            when, gid = heapq.heappop(heap)
            if self._filed.get(gid) == when:
                del self._filed[gid]
                out.add(gid)
        return out

    def expired(self, now_ms: int, offsets: dict, groups: dict,
                empty_since_ms: dict) -> tuple[dict, set[str]]:
        """(`expired_offsets` over the groups looked at, those groups): the caller removes what
        it could and then calls `file(looked, ...)`."""
        looked = self.looked_at(now_ms)
        subset = {gid: offsets[gid] for gid in looked if gid in offsets}
        return expired_offsets(subset, groups, now_ms, self.retention_ms, empty_since_ms), looked

    def file(self, group_ids, offsets: dict, groups: dict, empty_since_ms: dict) -> None:
        """Compute each group's next moment from scratch."""
        for gid in group_ids:
            parts = offsets.get(gid)
            g = groups.get(gid)
            if not parts or (g is not None and g.members):
                self._filed.pop(gid, None)
                if parts:
                    self._with_members.add(gid)
                else:
                    self._with_members.discard(gid)
                continue
            self._with_members.discard(gid)
            when = max(min(v[3] for v in parts.values()), empty_since_ms.get(gid, 0)) + \
                self.retention_ms
            if self._filed.get(gid) != when:
                self._filed[gid] = when
                heapq.heappush(self._heap, (when, gid))
        if len(self._heap) > 2 * len(self._filed) + 64:
            self._heap = [(w, g) for w, g in self._heap if self._filed.get(g) == w]
            heapq.heapify(self._heap)

    def heap_size(self) -> int:
        return len(self._heap)
