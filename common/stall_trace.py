"""Which task held the event loop: with `RAFTKA_STALL_TRACE_MS=N` in its environment a process
logs every task step that ran N ms or more without yielding, with the task's await chain where
it yielded (the work was just before it). A stalled loop reads no socket, answers nothing and sends no heartbeat; the
controllers log that they stalled (service.py) but not what did it, and brokers not at all.
Each line also says how much of the step was Python's cyclic garbage collector: a full
collection walks every object of the heap (about a million in a broker at 30,000 partitions)
and runs inside whichever task allocated at the wrong moment. Opt-in: two clock reads per task
step, two per collection."""

from __future__ import annotations

import logging
import os
import time

import trio

from common.gc_policy import GcHooked

log = logging.getLogger(__name__)
ENV = "RAFTKA_STALL_TRACE_MS"


class StallTracer(GcHooked):
    def __init__(self, threshold_ms: float):
        self.threshold_s = threshold_ms / 1000
        self._started = 0.0
        self._gc_started = 0.0
        self._gc_s = 0.0                # collections during the current step
        self._gc_full = 0

    def _on_gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
            return
        self._gc_s += time.perf_counter() - self._gc_started
        self._gc_full += info["generation"] == 2

    def before_task_step(self, task) -> None:
        self._started = time.perf_counter()
        self._gc_s, self._gc_full = 0.0, 0

    def after_task_step(self, task) -> None:
        took = time.perf_counter() - self._started
        if took >= self.threshold_s:
            log.warning("task %s ran %.0f ms without yielding (garbage collection %.0f ms, "
                        "%d full); it yielded in %s", task.name, took * 1000,
                        self._gc_s * 1000, self._gc_full, _stack(task))


def _stack(task) -> str:
    """The task's await chain outside trio, outermost first, as file:line function."""
    parts = []
    coro = task.coro
    while coro is not None:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is None:
            break
        code = frame.f_code
        if "/trio/" not in code.co_filename:
            parts.append(f"{code.co_filename.rsplit('/', 1)[-1]}:{frame.f_lineno} {code.co_name}")
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return " > ".join(parts[-5:]) or "?"


def instruments_from_env() -> list:
    """trio.run's instruments: the tracer when the environment asks for it."""
    value = os.environ.get(ENV, "").strip()
    if not value:
        return []
    try:
        return [StallTracer(float(value))]
    except ValueError:
        log.warning("%s=%r is not a number of milliseconds: no stall trace", ENV, value)
        return []
