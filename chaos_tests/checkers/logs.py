"""Checkers of a partition's final log shape and of per-key order (the data plane, beyond
checks.py's lost/duplicate/order checks).

| checker          | invariant                                                                  |
|------------------|----------------------------------------------------------------------------|
| offsets-dense    | in the final log of each partition every offset holds one record, the     |
|                  | offsets run without a hole (a non-transactional topic, no compaction: an   |
|                  | offset is never skipped), and leader epochs never go down along the log;   |
|                  | a hole or a repeat is reported with the epoch it sits in                    |
| key-order        | a key's records sit in one partition, and each producer's records of a key |
|                  | appear in the final log in acknowledgement order (what Kafka promises to   |
|                  | consumers of a key); reads of a key during the run never go back           |

Both read `Consume(final=True)` records (with `epoch` where the reader knew it, `key` where the
workload set one); without a final read they say so rather than pass.
"""

from __future__ import annotations

from collections import defaultdict

from chaos_tests.checkers.checks import CheckResult, _needs_final
from chaos_tests.checkers.history import History


def offsets_dense(history: History, first_offset: int = 0) -> CheckResult:
    """`first_offset`: where the final read started (0 unless retention removed a prefix)."""
    result = CheckResult("offsets-dense")
    if not _needs_final(history, result):
        return result
    by_partition = defaultdict(list)
    for op in history.final_reads:
        by_partition[op.partition].append(op)
    for partition, ops in sorted(by_partition.items()):
        ops.sort(key=lambda o: o.offset)
        expected, last_epoch = first_offset, None
        for op in ops:
            where = f"partition {partition} offset {op.offset} (epoch {op.epoch})"
            if op.offset < expected:
                result.add(f"{where}: read twice ({op.value!r})")
                continue
            if op.offset > expected:
                result.add(f"{where}: hole, offsets {expected}..{op.offset - 1} missing")
            if op.epoch is not None and last_epoch is not None and op.epoch < last_epoch:
                result.add(f"{where}: leader epoch went down from {last_epoch}")
            if op.epoch is not None:
                last_epoch = op.epoch
            expected = op.offset + 1
    return result


def key_order(history: History) -> CheckResult:
    result = CheckResult("key-order")
    if not _needs_final(history, result):
        return result
    where: dict[str, set[int]] = defaultdict(set)
    position: dict[str, tuple[int, int]] = {}
    for op in history.final_reads:
        if op.key is not None:
            where[op.key].add(op.partition)
            position[op.value] = (op.partition, op.offset)
    for key, partitions in sorted(where.items()):
        if len(partitions) > 1:
            result.add(f"key {key!r} in partitions {sorted(partitions)}")
    acked = defaultdict(list)
    for op in sorted(history.acked, key=lambda o: o.time):
        if op.key is not None:
            acked[(op.process, op.key)].append(op)
    for (process, key), ops in acked.items():
        prev = None
        for op in ops:
            at = position.get(op.value)
            if at is None:
                continue                          # lost-write reports it
            if prev is not None and at[0] == prev[0][0] and at[1] <= prev[0][1]:
                result.add(f"{process} key {key!r}: {op.value!r} (offset {at[1]}) acked after "
                           f"{prev[1]!r} (offset {prev[0][1]}) but stands before it")
            prev = (at, op.value)
    last: dict[tuple[str, str], int] = {}
    for op in history.consumes:
        if op.key is None:
            continue
        k = (op.process, op.key)
        if k in last and op.offset < last[k]:
            result.add(f"{op.process} read key {op.key!r} at offset {op.offset} after "
                       f"offset {last[k]}")
        last[k] = op.offset
    return result
