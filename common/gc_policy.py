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
  cycles left behind are reclaimed at a moment chosen here, once an hour, not 10-15 times
  during one big metadata change. The sweep is a system task asleep in between (`sweep_loop`):
  it was trio's `before_io_wait` hook, which trio calls on every pass of its loop (~1 % of a
  busy broker's CPU for a clock read that said "not yet").

Installed by `common.process.run` in every node process: the instrument hears collections
(`before_run` / `after_run` only, so trio calls it at no other moment), `run_with_sweeps`
starts the sweeps.
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
    def __init__(self, sweep_every_s: float = SWEEP_EVERY_S):
        self.sweep_every_s = sweep_every_s
        self._sweeping = False
        self.freezes = self.sweeps = 0

    def _on_gc(self, phase: str, info: dict) -> None:
        if phase == "stop" and info["generation"] == 2 and not self._sweeping:
            gc.freeze()
            self.freezes += 1

    async def sweep_loop(self) -> None:
        """A sweep every `sweep_every_s` for as long as trio runs (a system task: cancelled
        when the main task ends). A sweep that fails is logged; the next one still comes."""
        while True:
            await trio.sleep(self.sweep_every_s)
            try:
                self.sweep()
            except Exception:  # noqa: BLE001 - a system task must not raise: it would end the run
                log.exception("garbage sweep failed")

    async def run_with_sweeps(self, async_fn, *args):
        """`async_fn(*args)` with the sweeps going on beside it (`trio.run`'s main task)."""
        trio.lowlevel.spawn_system_task(self.sweep_loop, name="gc-sweeps")
        return await async_fn(*args)

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
