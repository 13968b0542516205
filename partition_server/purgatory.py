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

While `run()` runs (the broker starts it), a waiter parks its task instead of waiting on an
event in a cancel scope, and one task times all of them out (`deadlines.py`): the per-request
scope was a measurable share of an acks=all Produce's cost. Without `run()` (unit tests of
handlers) waiters fall back to the cancel scope.
"""

from __future__ import annotations

import math
from typing import Callable, Hashable, Iterable

import trio

from common.request_metrics import add_remote_time
from partition_server.deadlines import Deadlines


class Watch:
    """One registration on a set of keys; `wake(key)` runs synchronously inside `notify`, so it
    must only record the wake (set an event, mark a key), never register or unregister. `note`,
    if given, replaces `wake` for `notify_high_watermark` (record the key, do not wake)."""

    __slots__ = ("keys", "wake", "note", "_purgatory")

    def __init__(self, purgatory: "Purgatory", keys: dict, wake: Callable[[Hashable], None],
                 note: Callable[[Hashable], None] | None = None):
        self._purgatory = purgatory
        self.keys = keys
        self.wake = wake
        self.note = note

    def add_keys(self, keys: Iterable[Hashable]) -> None:
        for key in keys:
            self._purgatory._add(key, self)
            self.keys[key] = None

    def remove_keys(self, keys: Iterable[Hashable]) -> None:
        for key in keys:
            if self.keys.pop(key, 0) is None:
                self._purgatory._remove(key, self)

    def cancel(self) -> None:
        p, self._purgatory = self._purgatory, None
        if p is None:
            return
        for key in self.keys:
            p._remove(key, self)
        p._all.discard(self)
        self.keys = {}


class Purgatory:
    def __init__(self, max_waiters: int = 10_000):
        self.max_waiters = max_waiters
        self.waiters = 0
        self._watches: dict[Hashable, set[Watch]] = {}
        self._all: set[Watch] = set()
        self.deadlines = Deadlines()

    async def run(self) -> None:
        """Time waiters out (see the module docstring); runs until cancelled."""
        await self.deadlines.run()

    def watch(self, keys: Iterable[Hashable], wake: Callable[[Hashable], None],
              note: Callable[[Hashable], None] | None = None) -> Watch:
        """Register `wake` (and `note`, see Watch) on every key until the returned watch is
        cancelled."""
        w = Watch(self, {}, wake, note)
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

    def notify_high_watermark(self, key: Hashable) -> None:
        """Only `key`'s high watermark moved: produces and consumer fetches waiting on it wake;
        a follower's fetch session only notes it for its next answer. As in Kafka, whose
        DelayedFetch for a follower completes on bytes, never on a high watermark: a follower
        learns it with the next records or when its long poll ends. Waking the session instead
        cost each acks=all append a wasted wake of the other follower's session (its long poll
        woken, partitions read, nothing to send, back to waiting): 0.4 per follower fetch
        answered at RF 3 with one transactional producer."""
        ws = self._watches.get(key)
        if ws:
            for w in tuple(ws):
                (w.note or w.wake)(key)

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
        started = trio.current_time()
        deadline = started + (timeout_s if math.isfinite(timeout_s) else 1e9)
        if self.deadlines.running:
            try:
                return await self._park_until(keys, done, deadline)
            finally:
                self.waiters -= 1
                add_remote_time(trio.current_time() - started)     # RemoteTimeMs
        woken = [trio.Event()]

        def wake(_key) -> None:
            woken[0].set()
        w = self.watch(keys, wake)
        try:
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
            add_remote_time(trio.current_time() - started)

    async def _park_until(self, keys, done: Callable[[], bool], deadline: float) -> bool:
        """`wait_until` with the task parked: a wake or the deadline reschedules it."""
        task = trio.lowlevel.current_task()
        st = _Parked()

        def resume() -> None:
            if st.parked:
                st.parked = False
                trio.lowlevel.reschedule(task)

        def wake(_key) -> None:
            st.woken = True
            resume()

        def expire() -> None:
            st.expired = True
            resume()

        def abort(_raise_cancel):
            st.parked = False
            return trio.lowlevel.Abort.SUCCEEDED

        w = self.watch(keys, wake)
        timer = self.deadlines.add(deadline, expire)
        try:
            while True:
                if not (st.woken or st.expired):
                    st.parked = True
                    await trio.lowlevel.wait_task_rescheduled(abort)
                st.woken = False            # `done` is synchronous: no wake falls in between
                if done():
                    return True
                if st.expired:
                    return False
        finally:
            w.cancel()
            self.deadlines.cancel(timer)


class _Parked:
    __slots__ = ("parked", "woken", "expired")

    def __init__(self):
        self.parked = self.woken = self.expired = False
