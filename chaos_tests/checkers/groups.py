"""Consumer-group checkers over what group members did.

- `GroupRead`: member `member` of `group`, in generation `generation`, processed the record at
  (`partition`, `offset`).
- `GroupCommit`: the member's OffsetCommit of `offset` for `partition`, with its outcome
  (`ok` acknowledged, `fail` refused, e.g. ILLEGAL_GENERATION; `unknown` in doubt), or an
  OffsetFetch that returned `offset` (`fetched=True`: what the coordinator says is committed).

| checker                  | invariant                                                          |
|--------------------------|--------------------------------------------------------------------|
| committed-offset-regress | per group and partition, acknowledged commits and fetched offsets   |
|                          | never go back in time order (our workloads never seek backwards)    |
| double-processing        | within one generation, a record is processed by at most one member  |
|                          | (two members owning one partition at once: a split brain)           |
| stale-commit-accepted    | a commit acknowledged for a generation older than one another       |
|                          | member already committed in (a fenced member's commit taken)        |
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict

from chaos_tests.checkers.checks import CheckResult


@dataclasses.dataclass
class GroupRead:
    group: str
    generation: int
    member: str
    partition: int
    offset: int
    time: float = 0.0


@dataclasses.dataclass
class GroupCommit:
    group: str
    generation: int
    member: str
    partition: int
    offset: int
    outcome: str = "ok"
    time: float = 0.0
    fetched: bool = False


def committed_offsets_monotonic(commits: list[GroupCommit]) -> CheckResult:
    result = CheckResult("committed-offset-regress")
    last: dict[tuple[str, int], GroupCommit] = {}
    for c in sorted(commits, key=lambda c: c.time):
        if c.outcome != "ok":
            continue
        k = (c.group, c.partition)
        prev = last.get(k)
        if prev is not None and c.offset < prev.offset:
            what = "fetched" if c.fetched else f"committed by {c.member} (gen {c.generation})"
            result.add(f"group {c.group} partition {c.partition}: {c.offset} {what} at "
                       f"t={c.time:.3f} after {prev.offset} at t={prev.time:.3f}")
        if prev is None or c.offset >= prev.offset:
            last[k] = c
    return result


def single_member_per_generation(reads: list[GroupRead]) -> CheckResult:
    result = CheckResult("double-processing")
    who: dict[tuple, set[str]] = defaultdict(set)
    for r in reads:
        who[(r.group, r.generation, r.partition, r.offset)].add(r.member)
    for (group, gen, partition, offset), members in sorted(who.items()):
        if len(members) > 1:
            result.add(f"group {group} generation {gen}: {partition}/{offset} processed by "
                       f"{sorted(members)}")
    return result


def stale_commits(commits: list[GroupCommit]) -> CheckResult:
    result = CheckResult("stale-commit-accepted")
    newest: dict[str, int] = {}
    for c in sorted(commits, key=lambda c: c.time):
        if c.outcome != "ok" or c.fetched:
            continue
        top = newest.get(c.group, c.generation)
        if c.generation < top:
            result.add(f"group {c.group}: {c.member}'s commit of {c.partition}/{c.offset} for "
                       f"generation {c.generation} accepted after generation {top} committed")
        newest[c.group] = max(top, c.generation)
    return result


def check_groups(reads: list[GroupRead], commits: list[GroupCommit]) -> list[CheckResult]:
    return [committed_offsets_monotonic(commits), single_member_per_generation(reads),
            stale_commits(commits)]
