"""A trio lock per key that exists only while a task holds it or waits for it.

The transaction coordinator serialises the requests of one transactional id with a lock. It
kept one for every id it ever saw, for as long as the broker ran: clients that take a fresh
transactional id per task or per checkpoint (some stream processors do) made that table grow
with uptime. A key's lock here goes when its last user leaves, which is safe because a key
nobody holds or waits for has nothing to exclude.
"""

from __future__ import annotations

from typing import Hashable

import trio

from common import locks


class KeyedLocks:
    def __init__(self):
        self._locks: dict[Hashable, list] = {}      # key → [lock, tasks holding or waiting]

    def __len__(self) -> int:
        return len(self._locks)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._locks

    def hold(self, key: Hashable) -> "_Hold":
        """`async with locks.hold(key):` the key's lock, for the block."""
        return _Hold(self._locks, key)


class _Hold:
    """The async context manager of `hold`: a class, not an @asynccontextmanager generator —
    every request of a transactional id passes here (its generator's entry and exit showed in
    the transaction coordinator's profile)."""

    __slots__ = ("_locks", "_key", "_entry")

    def __init__(self, locks: dict, key: Hashable):
        self._locks, self._key = locks, key

    async def __aenter__(self) -> None:
        entry = self._locks.get(self._key)
        if entry is None:
            entry = self._locks[self._key] = [trio.Lock(), 0]
        entry[1] += 1
        self._entry = entry
        try:
            await locks.acquire(entry[0])   # no scheduler pass when free (every txn request)
        except BaseException:               # cancelled while waiting: not a user any more
            self._leave()
            raise

    async def __aexit__(self, *exc) -> bool:
        self._entry[0].release()
        self._leave()
        return False

    def _leave(self) -> None:
        entry = self._entry
        entry[1] -= 1
        if entry[1] == 0:
            del self._locks[self._key]
