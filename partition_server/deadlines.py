"""Timeouts for many waiters from one task: a heap of (deadline, callback).

A trio cancel scope per waiting request (an acks=all Produce waiting for its high watermark)
costs its entry and exit on every request — a few per cent of a broker's CPU when librdkafka
sends one small Produce per partition. Waiters that park with
`trio.lowlevel.wait_task_rescheduled` register a callback here instead; `run()` calls it when
the deadline passes. Cancelled entries stay in the heap until they surface or the heap is
compacted (when more than half of it is dead), so add and cancel are O(log n) and O(1).
"""

from __future__ import annotations

import heapq
import math
from typing import Callable

import trio

COMPACT_SLACK = 1024


class Deadlines:
    def __init__(self):
        self.running = False          # only while `run()` runs may waiters rely on it
        self._heap: list[list] = []   # [deadline, sequence, callback or None once cancelled]
        self._live = 0
        self._seq = 0
        self._wake = trio.Event()

    def __len__(self) -> int:
        return self._live

    def add(self, deadline: float, callback: Callable[[], None]) -> list:
        """Call `callback()` (from `run`'s task) once `trio.current_time()` reaches `deadline`,
        unless cancelled first; returns the handle for `cancel`."""
        entry = [deadline, self._seq, callback]
        self._seq += 1
        heapq.heappush(self._heap, entry)
        self._live += 1
        if self._heap[0] is entry:
            self._wake.set()          # earlier than what `run` sleeps until
        if len(self._heap) > 2 * self._live + COMPACT_SLACK:
            self._heap = [e for e in self._heap if e[2] is not None]
            heapq.heapify(self._heap)
        return entry

    def cancel(self, entry: list) -> None:
        if entry[2] is not None:
            entry[2] = None
            self._live -= 1

    async def run(self) -> None:
        self.running = True
        try:
            while True:
                now = trio.current_time()
                heap = self._heap
                while heap and (heap[0][2] is None or heap[0][0] <= now):
                    entry = heapq.heappop(heap)
                    callback = entry[2]
                    if callback is not None:
                        entry[2] = None
                        self._live -= 1
                        callback()
                self._wake = trio.Event()
                with trio.move_on_at(heap[0][0] if heap else math.inf):
                    await self._wake.wait()
        finally:
            self.running = False
