"""Consumer-group checkers over what group members did.

- `GroupRead`: member `member` of `group`, in generation `generation`, processed the record at
  (`partition`, `offset`).
- `GroupCommit`: the member's OffsetCommit of `offset` for `partition`, with its outcome
  (`ok` acknowledged, `fail` refused, e.g. ILLEGAL_GENERATION; `unknown` in doubt), or an
  OffsetFetch that returned `offset` (`fetched=True`: what the coordinator says is committed).

| checker                  | invariant                                                          |
|--------------------------|--------------------------------------------------------------------|
| committed-offset-regress | per group and partition, an acknowledged commit or fetched offset   |
|                          | invoked after another completed is never lower (no seek backwards)  |
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
    time: float = 0.0               # completion
    fetched: bool = False
    start: float | None = None      # invocation (None: the same as `time`)

    @property
    def begun(self) -> float:
        return self.time if self.start is None else self.start


def committed_offsets_monotonic(commits: list[GroupCommit]) -> CheckResult:
    """In real time: an acknowledged commit (or fetch) invoked after another one completed
    never carries a lower offset. Concurrent ones are not ordered (a commit's answer delayed by
    a fault may arrive after a later member's commit that the coordinator took second)."""
    result = CheckResult("committed-offset-regress")
    per = defaultdict(list)
    for c in commits:
        if c.outcome == "ok":
            per[(c.group, c.partition)].append(c)
    for (group, partition), cs in per.items():
        by_end = sorted(cs, key=lambda c: c.time)
        i, top = 0, None
        for c in sorted(cs, key=lambda c: c.begun):
            while i < len(by_end) and by_end[i].time < c.begun:
                if top is None or by_end[i].offset > top.offset:
                    top = by_end[i]
                i += 1
            if top is not None and c.offset < top.offset:
                what = "fetched" if c.fetched else f"committed by {c.member} (gen {c.generation})"
                result.add(f"group {group} partition {partition}: {c.offset} {what} at "
                           f"t={c.begun:.3f}..{c.time:.3f} after {top.offset} was committed by "
                           f"{top.member} (gen {top.generation}) by t={top.time:.3f}")
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
    """A commit invoked after a commit of a newer generation completed carries a stale
    generation: the coordinator must refuse it (ILLEGAL_GENERATION)."""
    result = CheckResult("stale-commit-accepted")
    per = defaultdict(list)
    for c in commits:
        if c.outcome == "ok" and not c.fetched:
            per[c.group].append(c)
    for group, cs in per.items():
        by_end = sorted(cs, key=lambda c: c.time)
        i, top = 0, None
        for c in sorted(cs, key=lambda c: c.begun):
            while i < len(by_end) and by_end[i].time < c.begun:
                if top is None or by_end[i].generation > top.generation:
                    top = by_end[i]
                i += 1
            if top is not None and c.generation < top.generation:
                result.add(f"group {group}: {c.member}'s commit of {c.partition}/{c.offset} for "
                           f"generation {c.generation} accepted after generation "
                           f"{top.generation} committed")
    return result


def check_groups(reads: list[GroupRead], commits: list[GroupCommit]) -> list[CheckResult]:
    return [committed_offsets_monotonic(commits), single_member_per_generation(reads),
            stale_commits(commits)]
