"""A history of operations as plain data (Jepsen style, reduced to what a log needs).

- `Produce`: one attempt to write `value` to `partition`, with its outcome:
    OK      the broker acknowledged it at `offset` (a promise: it must never be lost);
    FAIL    a definite failure (the broker said it was not appended, e.g. NOT_ENOUGH_REPLICAS
            before append): the value must never be read;
    UNKNOWN in doubt (timeout, connection lost, NOT_ENOUGH_REPLICAS_AFTER_APPEND): it may or may
            not be in the log, both are correct.
- `Consume`: a record a consumer saw at (`partition`, `offset`). `final=True` marks the reads
  of the verification pass at the end of a run, after every fault healed: the final log.

Values are strings, unique per produce attempt by construction of the workloads (a retry of the
same idempotent batch keeps its value; that is what makes duplicates detectable).
Histories dump to and load from JSON lines, one operation per line, for post-mortems.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Iterable, Iterator

OK = "ok"
FAIL = "fail"
UNKNOWN = "unknown"
OUTCOMES = (OK, FAIL, UNKNOWN)


@dataclasses.dataclass
class Produce:
    value: str
    partition: int
    outcome: str
    offset: int | None = None         # the acknowledged offset (OK only; None if the client
                                      # did not say: librdkafka reports none for some retries)
    process: str = "p0"               # which producer; order is checked per producer
    time: float = 0.0                 # completion time (wall or virtual clock)
    error: str | None = None          # the error name for FAIL / UNKNOWN
    key: str | None = None            # the record key (per-key order is judged by it)
    kind: str = "produce"

    def __post_init__(self):
        if self.outcome not in OUTCOMES:
            raise ValueError(f"produce outcome must be one of {OUTCOMES}, got {self.outcome!r}")
        if self.outcome != OK and self.offset is not None:
            raise ValueError("only an acknowledged produce has an offset")
        if self.offset is not None and self.offset < 0:
            raise ValueError(f"offset {self.offset} is negative (use None for unknown)")


@dataclasses.dataclass
class Consume:
    value: str
    partition: int
    offset: int
    process: str = "c0"
    time: float = 0.0
    final: bool = False
    key: str | None = None
    epoch: int | None = None          # the batch's partition leader epoch, when the reader knew it
    kind: str = "consume"


Op = Produce | Consume
_KINDS = {"produce": Produce, "consume": Consume}


class History:
    def __init__(self, ops: Iterable[Op] = ()):
        self.ops: list[Op] = list(ops)
        # set by a final read that reached every partition's end: an empty final log is then
        # a finding to judge (nothing there), not a missing read (a round whose transactional
        # producer committed nothing read an empty, complete final log: "cannot judge")
        self.final_read_complete = False

    def __iter__(self) -> Iterator[Op]:
        return iter(self.ops)

    def __len__(self) -> int:
        return len(self.ops)

    def add(self, op: Op) -> Op:
        self.ops.append(op)
        return op

    def produce(self, value, partition, outcome, offset=None, **kw) -> Produce:
        return self.add(Produce(str(value), partition, outcome, offset, **kw))

    def consume(self, value, partition, offset, **kw) -> Consume:
        return self.add(Consume(str(value), partition, offset, **kw))

    # -- views ----------------------------------------------------------------------------------

    @property
    def produces(self) -> list[Produce]:
        return [op for op in self.ops if isinstance(op, Produce)]

    @property
    def acked(self) -> list[Produce]:
        return [op for op in self.produces if op.outcome == OK]

    @property
    def consumes(self) -> list[Consume]:
        return [op for op in self.ops if isinstance(op, Consume) and not op.final]

    @property
    def final_reads(self) -> list[Consume]:
        return [op for op in self.ops if isinstance(op, Consume) and op.final]

    def has_final_read(self) -> bool:
        return self.final_read_complete or \
            any(isinstance(op, Consume) and op.final for op in self.ops)

    # -- JSON lines -----------------------------------------------------------------------------

    def dumps(self) -> str:
        return "".join(json.dumps(dataclasses.asdict(op), sort_keys=True) + "\n" for op in self.ops)

    def dump(self, path) -> None:
        with open(path, "w") as f:
            f.write(self.dumps())

    @classmethod
    def loads(cls, text: str) -> "History":
        ops = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                raw = json.loads(line)
                kind = _KINDS[raw.pop("kind")]
                ops.append(kind(**raw))
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"history line {n}: {exc}") from None
        return cls(ops)

    @classmethod
    def load(cls, path) -> "History":
        with open(path) as f:
            return cls.loads(f.read())
