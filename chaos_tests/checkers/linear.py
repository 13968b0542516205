"""Linearizability of metadata operations as clients saw them: a small model checker in the
manner of Knossos / Wing & Gong (WGL), one register per key.

Operations come from an `OpLog` (ops.py): each has a real-time window [invoke, completion];
an `info` one (timed out, connection lost) may take effect at any time after its invocation,
or never. A history is linearizable when every `ok` operation (and any subset of the `info`
ones) can be put in one order that respects real time (an operation that completed before
another was invoked comes first) and that the model accepts step by step. The search is a
depth-first walk over "which operation takes effect next", memoised on (operations done,
model state): with one register per key the histories stay small (tens of operations).

Models (`value` of an operation is `(key, argument)`):
  topics   key = a topic name, state = does it exist
           create ok → it did not exist, now does; create failed TOPIC_ALREADY_EXISTS → it
           existed (a read); delete ok → it existed, now does not; delete failed
           UNKNOWN_TOPIC_OR_PARTITION → it did not exist; read → result is whether it exists
  register key = e.g. (topic, config name), state = its value (None: never written)
           write ok → sets the argument; read → result is the value
A definite failure with any other error changed nothing and is left out.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict

from chaos_tests.checkers.checks import CheckResult
from chaos_tests.checkers.ops import FAIL, INFO, Operation

TOPIC_EXISTS = "TOPIC_ALREADY_EXISTS"
TOPIC_UNKNOWN = "UNKNOWN_TOPIC_OR_PARTITION"


@dataclasses.dataclass(frozen=True)
class Step:
    """One operation as the model sees it: what it does and what it observed."""
    f: str
    arg: object
    observed: object


def topic_step(state, step: Step):
    """(accepted, next state) of the topics model."""
    exists = bool(state)
    if step.f == "create":
        return (not exists, True) if step.observed is None else (exists, state)
    if step.f == "delete":
        return (exists, False) if step.observed is None else (not exists, state)
    if step.f == "read":
        return step.observed == exists, state
    raise ValueError(f"topics model: unknown operation {step.f!r}")


def register_step(state, step: Step):
    if step.f == "write":
        return True, step.arg
    if step.f == "read":
        return step.observed == state, state
    raise ValueError(f"register model: unknown operation {step.f!r}")


MODELS = {"topics": (topic_step, False), "register": (register_step, None)}


def _as_step(op: Operation) -> Step | None:
    """None: a definite failure that tells nothing (left out)."""
    _, arg = op.value
    if op.type == FAIL:
        known = {("create", TOPIC_EXISTS): "exists", ("delete", TOPIC_UNKNOWN): "absent"}
        tag = known.get((op.f, op.error))
        return None if tag is None else Step(op.f, arg, tag)
    return Step(op.f, arg, op.result if op.f == "read" else None)


@dataclasses.dataclass
class Verdict:
    ok: bool | None                 # None: the search gave up (budget)
    explored: int
    stuck: list[Operation] = dataclasses.field(default_factory=list)


def linearizable(ops: list[Operation], step_fn, initial, budget: int = 200_000) -> Verdict:
    """Is this one key's history linearizable? `stuck`, when not: the operations that could not
    take effect at the deepest point the search reached (the anomaly's neighbourhood)."""
    items = [(op, s) for op in ops if (s := _as_step(op)) is not None]
    items.sort(key=lambda x: x[0].start)
    # info operations are optional; ok ones and informative failures must take effect
    must = sum(1 << i for i, (op, _) in enumerate(items) if op.type != INFO)
    seen, explored, deepest = set(), 0, (0, 0)
    stack = [(0, initial)]
    while stack:
        done, state = stack.pop()
        if done & must == must:
            return Verdict(True, explored)
        if (done, state) in seen:
            continue
        seen.add((done, state))
        explored += 1
        if explored > budget:
            return Verdict(None, explored)
        deepest = max(deepest, (bin(done).count("1"), done))
        # the earliest completion among what has not taken effect bounds what may go next
        horizon = min((op.end for i, (op, _) in enumerate(items)
                       if not done >> i & 1 and op.type != INFO), default=math.inf)
        for i, (op, s) in enumerate(items):
            if done >> i & 1 or op.start > horizon:
                continue
            accepted, nxt = step_fn(state, s)
            if accepted:
                stack.append((done | 1 << i, nxt))
    done = deepest[1]
    stuck = [op for i, (op, _) in enumerate(items) if not done >> i & 1 and op.type != INFO]
    return Verdict(False, explored, stuck[:6])


def check_linearizable(ops: list[Operation], model: str = "topics", name: str | None = None,
                       budget: int = 200_000) -> CheckResult:
    """One register per key (`op.value[0]`); every key's history must be linearizable."""
    step_fn, initial = MODELS[model]
    result = CheckResult(name or f"linearizable-{model}")
    per_key = defaultdict(list)
    for op in ops:
        per_key[op.value[0]].append(op)
    for key, key_ops in sorted(per_key.items(), key=lambda kv: str(kv[0])):
        v = linearizable(key_ops, step_fn, initial, budget)
        if v.ok is None:
            result.add(f"key {key!r}: undecided after {v.explored} states ({len(key_ops)} ops)")
        elif not v.ok:
            shown = "; ".join(_show(op) for op in v.stuck)
            result.add(f"key {key!r}: not linearizable; no order takes: {shown}")
    return result


def _show(op: Operation) -> str:
    what = op.error if op.type == FAIL else (op.result if op.f == "read" else "ok")
    end = "∞" if op.end == math.inf else f"{op.end:.3f}"
    return f"#{op.index} {op.process} {op.f}({op.value[1]!r}) → {what} [{op.start:.3f}, {end}]"

