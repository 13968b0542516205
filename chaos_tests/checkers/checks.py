"""Checkers over a `History`. Each returns a `CheckResult` naming every violation it found.

| checker               | invariant                                                                 |
|-----------------------|---------------------------------------------------------------------------|
| lost-write            | every acknowledged record is in the final log, at its acknowledged offset |
|                       | (anywhere in its partition when the client reported no offset)            |
| inconsistent-offsets  | no (partition, offset) ever holds two different values (acks and reads)   |
| nonmonotonic-send     | per producer and partition, acknowledged offsets grow in completion order  |
| order                 | the final log holds each producer's acknowledged values in ack order       |
| duplicate             | (idempotent runs) no produced value sits at two offsets of the final log   |
| truncated-read        | every record a consumer saw is in the final log at the same offset         |
| failed-write-read     | a definitely failed produce is never read                                  |
| nonmonotonic-poll     | per consumer and partition, offsets only grow (no seek in our workloads)   |
| sequence-order        | (sequenced runs) values `<producer>-<n>`: in each partition's final log a |
|                       | producer's n strictly grow, acknowledged or not (an idempotent producer's |
|                       | retried batch is never appended again, nor after a later batch)           |

The checks that compare against the final log need final reads (`Consume(final=True)`); without
them they report that, rather than passing vacuously.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict

from chaos_tests.checkers.history import FAIL, OK, History

MAX_SHOWN = 10


@dataclasses.dataclass
class CheckResult:
    name: str
    errors: list[str] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors

    def add(self, message: str) -> None:
        self.errors.append(message)

    def __str__(self) -> str:
        if self.ok:
            return f"{self.name}: ok"
        shown = "; ".join(self.errors[:MAX_SHOWN])
        more = f" (+{len(self.errors) - MAX_SHOWN} more)" if len(self.errors) > MAX_SHOWN else ""
        return f"{self.name}: {len(self.errors)} violation(s): {shown}{more}"


class CheckFailed(AssertionError):
    pass


def _final_log(history: History) -> dict[int, dict[int, str]]:
    log: dict[int, dict[int, str]] = defaultdict(dict)
    for op in history.final_reads:
        log[op.partition][op.offset] = op.value
    return log


def _needs_final(history: History, result: CheckResult) -> bool:
    if not history.has_final_read():
        result.add("no final read recorded: cannot judge")
        return False
    return True


def lost_writes(history: History) -> CheckResult:
    result = CheckResult("lost-write")
    if not _needs_final(history, result):
        return result
    final = _final_log(history)
    for op in history.acked:
        if op.offset is None:                 # acknowledged without an offset: judge by value
            if op.value not in final[op.partition].values():
                result.add(f"acked {op.value!r} (offset not reported) is missing from "
                           f"partition {op.partition}")
            continue
        found = final[op.partition].get(op.offset)
        if found is None:
            result.add(f"acked {op.value!r} at {op.partition}/{op.offset} is missing")
        elif found != op.value:
            result.add(f"acked {op.value!r} at {op.partition}/{op.offset} was replaced by {found!r}")
    return result


def inconsistent_offsets(history: History) -> CheckResult:
    result = CheckResult("inconsistent-offsets")
    seen: dict[tuple[int, int], str] = {}
    reported = set()
    for op in history.ops:
        offset = op.offset if op.kind == "consume" or op.outcome == OK else None
        if offset is None:
            continue
        key = (op.partition, offset)
        other = seen.setdefault(key, op.value)
        if other != op.value and (key, op.value) not in reported:
            reported.add((key, op.value))
            result.add(f"{op.partition}/{offset} holds {other!r} and {op.value!r}")
    return result


def nonmonotonic_send(history: History) -> CheckResult:
    result = CheckResult("nonmonotonic-send")
    last: dict[tuple[str, int], tuple[int, str]] = {}
    for op in sorted((o for o in history.acked if o.offset is not None), key=lambda o: o.time):
        key = (op.process, op.partition)
        prev = last.get(key)
        if prev is not None and op.offset <= prev[0]:
            result.add(f"{op.process} on partition {op.partition}: {op.value!r} acked at "
                       f"{op.offset} after {prev[1]!r} at {prev[0]}")
        last[key] = (op.offset, op.value)
    return result


def order(history: History) -> CheckResult:
    """Each producer's acknowledged values appear in the final log in acknowledgement order."""
    result = CheckResult("order")
    if not _needs_final(history, result):
        return result
    position = {(op.partition, op.value): op.offset for op in history.final_reads}
    per: dict[tuple[str, int], list] = defaultdict(list)
    for op in sorted(history.acked, key=lambda o: o.time):
        per[(op.process, op.partition)].append(op)
    for (process, partition), ops in per.items():
        prev = None
        for op in ops:
            at = position.get((partition, op.value))
            if at is None:
                continue                      # lost-write reports it
            if prev is not None and at <= prev[0]:
                result.add(f"{process} on partition {partition}: {op.value!r} (log offset {at}) "
                           f"acked after {prev[1]!r} (log offset {prev[0]})")
            prev = (at, op.value)
    return result


def duplicates(history: History) -> CheckResult:
    result = CheckResult("duplicate")
    if not _needs_final(history, result):
        return result
    where: dict[tuple[int, str], list[int]] = defaultdict(list)
    for op in history.final_reads:
        where[(op.partition, op.value)].append(op.offset)
    for (partition, value), offsets in where.items():
        if len(set(offsets)) > 1:
            result.add(f"{value!r} at {partition}/{sorted(set(offsets))}")
    return result


def truncated_reads(history: History) -> CheckResult:
    result = CheckResult("truncated-read")
    if not _needs_final(history, result):
        return result
    final = _final_log(history)
    for op in history.consumes:
        found = final[op.partition].get(op.offset)
        if found != op.value:
            result.add(f"{op.process} read {op.value!r} at {op.partition}/{op.offset}; the final "
                       f"log has {'nothing' if found is None else repr(found)} there")
    return result


def failed_write_reads(history: History) -> CheckResult:
    result = CheckResult("failed-write-read")
    failed = {(op.partition, op.value) for op in history.produces if op.outcome == FAIL}
    for op in history.ops:
        if op.kind == "consume" and (op.partition, op.value) in failed:
            result.add(f"failed write {op.value!r} read at {op.partition}/{op.offset}")
    return result


def nonmonotonic_poll(history: History) -> CheckResult:
    result = CheckResult("nonmonotonic-poll")
    last: dict[tuple[str, int], int] = {}
    for op in history.consumes:
        key = (op.process, op.partition)
        if key in last and op.offset <= last[key]:
            result.add(f"{op.process} read {op.partition}/{op.offset} after {last[key]}")
        last[key] = op.offset
    return result


def parse_sequenced(value: str) -> tuple[str, int] | None:
    """`<producer>-<n>` → (producer, n); None for values of another shape."""
    producer, _, n = value.rpartition("-")
    if not producer or not n.isdigit():
        return None
    return producer, int(n)


def sequence_order(history: History) -> CheckResult:
    """Every record in the final log, acknowledged or not, in its producer's send order: what
    `order` checks for acknowledged values, extended to the in-doubt ones (a retry appended a
    second time, or after a later batch, shows here even when its ack was lost)."""
    result = CheckResult("sequence-order")
    if not _needs_final(history, result):
        return result
    last: dict[tuple[str, int], tuple[int, int]] = {}
    for op in sorted(history.final_reads, key=lambda o: (o.partition, o.offset)):
        parsed = parse_sequenced(op.value)
        if parsed is None:
            result.add(f"{op.value!r} at {op.partition}/{op.offset} is not <producer>-<n>")
            continue
        producer, n = parsed
        prev = last.get((producer, op.partition))
        if prev is not None and n <= prev[0]:
            result.add(f"{producer} on partition {op.partition}: #{n} at offset {op.offset} "
                       f"after #{prev[0]} at offset {prev[1]}")
        last[(producer, op.partition)] = (n, op.offset)
    return result


def check_all(history: History, idempotent: bool = False,
              sequenced: bool = False) -> list[CheckResult]:
    results = [lost_writes(history), inconsistent_offsets(history), nonmonotonic_send(history),
               order(history), truncated_reads(history), failed_write_reads(history),
               nonmonotonic_poll(history)]
    if idempotent:
        results.append(duplicates(history))
    if sequenced:
        results.append(sequence_order(history))
    return results


def assert_valid(history: History, idempotent: bool = False, dump_to=None,
                 sequenced: bool = False) -> None:
    """Raise `CheckFailed` listing every failed checker; dump the history first if asked."""
    bad = [r for r in check_all(history, idempotent, sequenced) if not r.ok]
    if bad:
        if dump_to is not None:
            history.dump(dump_to)
        where = f" (history in {dump_to})" if dump_to is not None else ""
        raise CheckFailed("\n".join(str(r) for r in bad) + where)
