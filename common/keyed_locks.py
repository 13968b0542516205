"""A trio lock per key that exists only while a task holds it or waits for it.

The transaction coordinator serialises the requests of one transactional id with a lock. It
kept one for every id it ever saw, for as long as the broker ran: clients that take a fresh
transactional id per task or per checkpoint (some stream processors do) made that table grow
with uptime. A key's lock here goes when its last user leaves, which is safe because a key
nobody holds or waits for has nothing to exclude.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import AsyncIterator, Hashable

import trio


class KeyedLocks:
    def __init__(self):
        self._locks: dict[Hashable, list] = {}      # key → [lock, tasks holding or waiting]

    def __len__(self) -> int:
        return len(self._locks)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._locks

    @asynccontextmanager
    async def hold(self, key: Hashable) -> AsyncIterator[None]:
        entry = self._locks.get(key)
        if entry is None:
            entry = self._locks[key] = [trio.Lock(), 0]
        entry[1] += 1
        try:
            async with entry[0]:
                yield
        finally:
            entry[1] -= 1
            if entry[1] == 0:
                del self._locks[key]
