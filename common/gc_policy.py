"""When Python's cyclic garbage collector runs in a node process (issue 17).

CPython's full collection walks every object the process holds, and it runs whenever the
objects that survived into the oldest generation since the last one reach a quarter of it —
inside whichever task allocates at that moment, with every thread stopped. A broker at 30,000
partitions holds about a million objects, so each full collection took 0.5-2 s, and a
restart or controlled shutdown (tens of thousands of partition states replaced) set off 10-15
of them per broker: 55-63 % of the time its event loop was held in steps of 300 ms or more
(`RAFTKA_STALL_TRACE_MS`, which now counts collections). Heartbeats and fetches waited
meanwhile; in a controller the Raft thread stops too.

Policy, with the reasoning:
- after every full collection, `gc.freeze()`: what survived it (the metadata image, partition
  states, logs, sessions) moves to the permanent generation, which later collections skip.
  Freezing is a list splice, O(1). The next full collection then walks only what survived
  since, so each object is walked about once in the old generation instead of at every
  collection of a growing heap. What dies later is still freed by reference counting, as
  almost all of this code's garbage is; only a *cycle* alive at a freeze that dies afterwards
  stays until the next sweep.
- every SWEEP_EVERY_S, a sweep: `gc.unfreeze()`, one full `gc.collect()`, freeze again — the
  cycles left behind are reclaimed at a moment chosen here, once an hour (a loop that is about
  to sleep: trio's `before_io_wait`), not 10-15 times during one big metadata change.

Installed by `common.process.run` in every node process, as a trio instrument.
"""

from __future__ import annotations

import gc
import logging
import time

import trio

log = logging.getLogger(__name__)

SWEEP_EVERY_S = 3600.0


class GcHooked(trio.abc.Instrument):
    """An instrument whose `_on_gc(phase, info)` hears every collection while trio runs."""

    def before_run(self) -> None:
        gc.callbacks.append(self._on_gc)

    def after_run(self) -> None:
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)

    def _on_gc(self, phase: str, info: dict) -> None:
        raise NotImplementedError


class GcPolicy(GcHooked):
    def __init__(self, sweep_every_s: float = SWEEP_EVERY_S, clock=time.monotonic):
        self.sweep_every_s = sweep_every_s
        self._clock = clock
        self._next_sweep = clock() + sweep_every_s
        self._sweeping = False
        self.freezes = self.sweeps = 0

    def _on_gc(self, phase: str, info: dict) -> None:
        if phase == "stop" and info["generation"] == 2 and not self._sweeping:
            gc.freeze()
            self.freezes += 1

    def before_io_wait(self, timeout) -> None:
        now = self._clock()
        if now >= self._next_sweep:
            self.sweep()
            self._next_sweep = now + self.sweep_every_s

    def sweep(self) -> None:
        started = time.perf_counter()
        self._sweeping = True
        try:
            gc.unfreeze()
            collected = gc.collect()
            gc.freeze()
        finally:
            self._sweeping = False
        self.sweeps += 1
        log.info("garbage sweep: %d unreachable objects collected in %.0f ms; %d objects kept",
                 collected, (time.perf_counter() - started) * 1000, gc.get_freeze_count())
