"""Transaction checkers: what read_committed readers may see of transactions whose outcome
the client knows (or does not).

A `Txn` is the values one transaction wrote (unique strings) and how it ended for its client:

    COMMITTED  commit_transaction returned: every value must be in the final log
    ABORTED    abort_transaction returned, or the transaction was never committed and a new
               instance of its transactional.id was initialised (which aborts it): no reader
               may ever see any of its values (an aborted read, Adya's G1a)
    IN_DOUBT   the commit's answer was lost (a fault, a fenced zombie): either outcome is
               correct, but only all-or-nothing

Reads are the `Consume` operations of a `History` (read_committed consumers; `final=True` for the
verification pass after every fault healed and every transaction ended).

| checker               | invariant                                                              |
|-----------------------|------------------------------------------------------------------------|
| aborted-read          | no read, during the run or final, of an aborted transaction's value    |
| lost-committed-txn    | every value of a committed transaction is in the final log             |
| partial-txn           | every transaction is in the final log entirely or not at all          |
| duplicate             | no value at two offsets (final log), no value read at two offsets      |
| phantom-read          | every value read was written by some transaction                       |
| truncated-read        | a value read during the run is in the final log at that offset          |
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict

from chaos_tests.checkers.checks import CheckFailed, CheckResult, truncated_reads
from chaos_tests.checkers.history import History

COMMITTED, ABORTED, IN_DOUBT = "committed", "aborted", "in-doubt"


@dataclasses.dataclass
class Txn:
    id: str
    outcome: str
    values: list[str]

    def __post_init__(self):
        if self.outcome not in (COMMITTED, ABORTED, IN_DOUBT):
            raise ValueError(f"transaction outcome {self.outcome!r}")


def check_transactions(txns: list[Txn], history: History) -> list[CheckResult]:
    aborted = CheckResult("aborted-read")
    lost = CheckResult("lost-committed-txn")
    partial = CheckResult("partial-txn")
    dup = CheckResult("duplicate")
    phantom = CheckResult("phantom-read")
    owner = {v: t for t in txns for v in t.values}
    reads = [op for op in history.ops if op.kind == "consume"]
    final = history.final_reads
    if not history.has_final_read() and any(t.values for t in txns):
        lost.add("no final read recorded: cannot judge")
    in_final: dict[str, set] = defaultdict(set)
    for op in final:
        in_final[op.value].add((op.partition, op.offset))
    read_at: dict[str, set] = defaultdict(set)
    for op in reads:
        read_at[op.value].add((op.partition, op.offset))
        t = owner.get(op.value)
        if t is None:
            phantom.add(f"{op.value!r} read at {op.partition}/{op.offset} was never written")
        elif t.outcome == ABORTED:
            aborted.add(f"{op.process} read {op.value!r} of aborted {t.id} at "
                        f"{op.partition}/{op.offset}")
    for value, places in read_at.items():
        if len(places) > 1:
            dup.add(f"{value!r} at {sorted(places)}")
    for t in txns:
        present = [v for v in t.values if v in in_final]
        if t.outcome == COMMITTED and len(present) < len(t.values):
            missing = [v for v in t.values if v not in in_final]
            lost.add(f"committed {t.id}: {len(missing)} of {len(t.values)} values missing "
                     f"({missing[:3]})")
        elif present and len(present) < len(t.values):
            partial.add(f"{t.outcome} {t.id}: {len(present)} of {len(t.values)} values visible")
    results = [aborted, lost, partial, dup, phantom]
    if final:
        results.append(truncated_reads(history))
    return results


def assert_transactions(txns: list[Txn], history: History, dump_to=None) -> None:
    bad = [r for r in check_transactions(txns, history) if not r.ok]
    if bad:
        if dump_to is not None:
            history.dump(dump_to)
        where = f" (history in {dump_to})" if dump_to is not None else ""
        raise CheckFailed("\n".join(str(r) for r in bad) + where)


CLIENT_OUTCOMES = {"ok": COMMITTED, "committed": COMMITTED, "aborted": ABORTED,
                   "unknown": IN_DOUBT, "in-doubt": IN_DOUBT}


def assert_final_values(outcomes: dict, written: dict, seen: list[str]) -> None:
    """The short form for tests that only keep values: `outcomes` {txn: 'ok' | 'aborted' |
    'unknown'}, `written` {txn: [values]}, `seen` the values one final read_committed pass
    returned, in order (positions stand in for offsets: a value seen twice is a duplicate)."""
    txns = [Txn(str(t), CLIENT_OUTCOMES[o], list(written[t])) for t, o in outcomes.items()]
    history = History()
    for i, value in enumerate(seen):
        history.consume(value, 0, i, final=True, process="final")
    assert_transactions(txns, history)
