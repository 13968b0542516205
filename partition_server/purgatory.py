"""Waiting rooms for requests that cannot complete yet (Kafka's "purgatories").

- acks=all produces wait until the high watermark passes their last offset;
- fetches wait until enough bytes are available (`min_bytes`) or `max_wait_ms` passes.

Both are woken by per-partition "something changed" signals: the replica manager calls
`notify(topic, partition)` when a log grows or a high watermark moves. Waiters re-check their
condition on each wake, so a spurious wake is harmless. The number of waiters is bounded: past
`max_waiters` a new request is answered at once (a produce with REQUEST_TIMED_OUT, a fetch with
what is there), so a flood of long polls cannot grow memory without limit.
"""

from __future__ import annotations

import math
from typing import Callable, Hashable, Iterable

import trio


class Purgatory:
    def __init__(self, max_waiters: int = 10_000):
        self.max_waiters = max_waiters
        self.waiters = 0
        self._events: dict[Hashable, trio.Event] = {}

    def notify(self, key: Hashable) -> None:
        event = self._events.pop(key, None)
        if event is not None:
            event.set()

    def notify_all(self) -> None:
        events, self._events = self._events, {}
        for event in events.values():
            event.set()

    def _event(self, key: Hashable) -> trio.Event:
        event = self._events.get(key)
        if event is None:
            event = self._events[key] = trio.Event()
        return event

    async def wait_until(self, keys: Iterable[Hashable], done: Callable[[], bool],
                         timeout_s: float) -> bool:
        """Wait until `done()` is true or the timeout passes; returns `done()`'s last value.

        `done` is checked before waiting and after every notification for any of `keys`.
        """
        if done():
            return True
        if self.waiters >= self.max_waiters or timeout_s <= 0:
            return False
        keys = list(keys)
        self.waiters += 1
        try:
            deadline = trio.current_time() + (timeout_s if math.isfinite(timeout_s) else 1e9)
            while True:
                events = [self._event(k) for k in keys]
                with trio.move_on_at(deadline):
                    await _wait_any(events)
                if done():
                    return True
                if trio.current_time() >= deadline:
                    return False
        finally:
            self.waiters -= 1


async def _wait_any(events: list[trio.Event]) -> None:
    if len(events) == 1:
        await events[0].wait()
        return
    async with trio.open_nursery() as nursery:
        async def waiter(e: trio.Event) -> None:
            await e.wait()
            nursery.cancel_scope.cancel()
        for e in events:
            nursery.start_soon(waiter, e)
