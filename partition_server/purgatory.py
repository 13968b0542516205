"""Waiting rooms for requests that cannot complete yet (Kafka's "purgatories").

- acks=all produces wait until the high watermark passes their last offset;
- fetches wait until enough bytes are available (`min_bytes`) or `max_wait_ms` passes.

Both are woken by per-partition "something changed" signals: the replica manager calls
`notify(topic, partition)` when a log grows or a high watermark moves. Waiters re-check their
condition on each wake, so a spurious wake is harmless. The number of waiters is bounded: past
`max_waiters` a new request is answered at once (a produce with REQUEST_TIMED_OUT, a fetch with
what is there), so a flood of long polls cannot grow memory without limit.

Like Kafka's DelayedFetch, a waiter is a watch registered once on each of its keys (a wake-up
callback in a per-key set), not a task per key: an idle follower's long poll over thousands of
partitions costs O(keys) set insertions and removals and no task spawns, and `notify(key)`
touches only the watches on that key. Long-lived watchers (incremental fetch sessions marking
their partitions dirty) use `watch` directly; they are bounded by the session cache, not by
`max_waiters`.
"""

from __future__ import annotations

import math
from typing import Callable, Hashable, Iterable

import trio


class Watch:
    """One registration on a set of keys; `wake(key)` runs synchronously inside `notify`, so it
    must only record the wake (set an event, mark a key), never register or unregister."""

    __slots__ = ("keys", "wake", "_purgatory")

    def __init__(self, purgatory: "Purgatory", keys: list, wake: Callable[[Hashable], None]):
        self._purgatory = purgatory
        self.keys = keys
        self.wake = wake

    def add_keys(self, keys: Iterable[Hashable]) -> None:
        for key in keys:
            self._purgatory._add(key, self)
            self.keys.append(key)

    def remove_keys(self, keys: Iterable[Hashable]) -> None:
        gone = set(keys)
        for key in gone:
            self._purgatory._remove(key, self)
        self.keys = [k for k in self.keys if k not in gone]

    def cancel(self) -> None:
        p, self._purgatory = self._purgatory, None
        if p is None:
            return
        for key in self.keys:
            p._remove(key, self)
        p._all.discard(self)
        self.keys = []


class Purgatory:
    def __init__(self, max_waiters: int = 10_000):
        self.max_waiters = max_waiters
        self.waiters = 0
        self._watches: dict[Hashable, set[Watch]] = {}
        self._all: set[Watch] = set()

    def watch(self, keys: Iterable[Hashable], wake: Callable[[Hashable], None]) -> Watch:
        """Register `wake` on every key until the returned watch is cancelled."""
        w = Watch(self, [], wake)
        self._all.add(w)
        w.add_keys(keys)
        return w

    def _add(self, key: Hashable, w: Watch) -> None:
        ws = self._watches.get(key)
        if ws is None:
            ws = self._watches[key] = set()
        ws.add(w)

    def _remove(self, key: Hashable, w: Watch) -> None:
        ws = self._watches.get(key)
        if ws is not None:
            ws.discard(w)
            if not ws:
                del self._watches[key]

    def watched_keys(self) -> int:
        """Keys with at least one watch (tests check registrations do not leak)."""
        return len(self._watches)

    def notify(self, key: Hashable) -> None:
        ws = self._watches.get(key)
        if ws:
            for w in tuple(ws):
                w.wake(key)

    def notify_all(self) -> None:
        """Wake every watch once (keyless: a metadata change that may concern anything)."""
        for w in tuple(self._all):
            w.wake(None)

    async def wait_until(self, keys: Iterable[Hashable], done: Callable[[], bool],
                         timeout_s: float) -> bool:
        """Wait until `done()` is true or the timeout passes; returns `done()`'s last value.

        `done` is checked before waiting and after every notification for any of `keys`.
        """
        if done():
            return True
        if self.waiters >= self.max_waiters or timeout_s <= 0:
            return False
        self.waiters += 1
        woken = [trio.Event()]

        def wake(_key) -> None:
            woken[0].set()
        w = self.watch(keys, wake)
        try:
            deadline = trio.current_time() + (timeout_s if math.isfinite(timeout_s) else 1e9)
            while True:
                with trio.move_on_at(deadline):
                    await woken[0].wait()
                # a fresh event before re-checking: `done` is synchronous, so no notify can
                # fall between the check and the next wait
                woken[0] = trio.Event()
                if done():
                    return True
                if trio.current_time() >= deadline:
                    return False
        finally:
            w.cancel()
            self.waiters -= 1
