"""A Jepsen-style history of operations: every operation is an `invoke` event, later followed by
its completion, `ok` (it happened), `fail` (it certainly did not) or `info` (in doubt: it may
have happened, at any time after its invocation, or never). Times are seconds on one clock
(time.monotonic() in live runs), so real-time order between operations is known.

    log = OpLog()
    i = log.invoke("admin-0", "create", "t1")         # returns the operation's index
    log.complete(i, "fail", error="TOPIC_ALREADY_EXISTS")
    log.operations()                                   # invoke + completion paired

`History` (history.py) is the data-plane view the log checkers read (one record per produce
attempt and per record read); `OpLog` is for operations whose timing matters: the metadata
linearizability checker and the campaign's throughput/latency timeline. An operation never
completed by the end of a run counts as `info`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import threading
from typing import Any

INVOKE, OK, FAIL, INFO = "invoke", "ok", "fail", "info"
COMPLETIONS = (OK, FAIL, INFO)


@dataclasses.dataclass
class Event:
    index: int              # the operation this event belongs to (its invoke's position)
    process: str
    type: str               # invoke / ok / fail / info
    f: str                  # what the operation does: create, delete, read, write, produce...
    value: Any              # its argument (invoke) or result (completion)
    time: float
    error: str | None = None


@dataclasses.dataclass
class Operation:
    index: int
    process: str
    f: str
    value: Any              # the argument
    type: str               # ok / fail / info
    start: float
    end: float              # math.inf for info: it may take effect at any later time
    result: Any = None
    error: str | None = None


class OpLog:
    def __init__(self):
        self.events: list[Event] = []
        self._open: dict[int, Event] = {}
        self._n = 0
        self._lock = threading.Lock()

    def invoke(self, process: str, f: str, value: Any, time: float) -> int:
        with self._lock:
            index = self._n
            self._n += 1
            ev = Event(index, process, INVOKE, f, value, time)
            self.events.append(ev)
            self._open[index] = ev
            return index

    def complete(self, index: int, type: str, time: float, result: Any = None,
                 error: str | None = None) -> None:
        if type not in COMPLETIONS:
            raise ValueError(f"completion type must be one of {COMPLETIONS}, got {type!r}")
        with self._lock:
            inv = self._open.pop(index, None)
            if inv is None:
                raise ValueError(f"operation {index} is not open (never invoked or completed)")
            self.events.append(Event(index, inv.process, type, inv.f, result, time, error))

    def operations(self) -> list[Operation]:
        """Invocations paired with their completions, in invocation order; still open ones
        are `info` (in doubt)."""
        with self._lock:
            events = list(self.events)
        done = {e.index: e for e in events if e.type != INVOKE}
        out = []
        for e in events:
            if e.type != INVOKE:
                continue
            c = done.get(e.index)
            if c is None or c.type == INFO:
                out.append(Operation(e.index, e.process, e.f, e.value, INFO, e.time, math.inf,
                                     None, c.error if c else "never completed"))
            else:
                out.append(Operation(e.index, e.process, e.f, e.value, c.type, e.time, c.time,
                                     c.value, c.error))
        return out

    def dumps(self) -> str:
        return "".join(json.dumps(dataclasses.asdict(e), sort_keys=True, default=str) + "\n"
                       for e in self.events)

    @classmethod
    def loads(cls, text: str) -> "OpLog":
        log = cls()
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                e = Event(**json.loads(line))
            except (ValueError, TypeError) as exc:
                raise ValueError(f"op log line {n}: {exc}") from None
            log.events.append(e)
            if e.type == INVOKE:
                log._open[e.index] = e
                log._n = max(log._n, e.index + 1)
            else:
                log._open.pop(e.index, None)
        return log
