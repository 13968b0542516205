"""Replica placement, pure: which brokers host a partition's replicas.

One rack rule for every decision that places a replica: a new topic's partitions (CreateTopics,
CreatePartitions), a broker drained by `raftka cluster decommission`, and the replicas of a
broker gone for good that the controller re-places (rereplication.py). Inputs are plain values
(broker id → rack, replica lists), so a command-line tool can plan from a Metadata response and
the controller from its image with the same code.

Rack rule (Kafka's rack-aware assignment): the replicas of one partition sit on distinct brokers
and, while some rack holds none of them yet, a broker on an unused rack is taken first.
"""

from __future__ import annotations

from typing import Hashable, Iterable


class NotEnoughBrokers(ValueError):
    """Fewer brokers are available than a partition's replication factor needs."""

    def __init__(self, key, replicas: int, available: int):
        super().__init__(f"{key}: {replicas} replicas need {replicas} brokers, only "
                         f"{available} would remain")
        self.key, self.replicas, self.available = key, replicas, available


def rack_alternating(brokers: dict[int, str | None]) -> list[int]:
    """Broker ids ordered so consecutive brokers sit on different racks (Kafka's rack
    alternation): the first broker of each rack, then the second of each, and so on."""
    by_rack: dict[str | None, list[int]] = {}
    for broker_id in sorted(brokers):
        by_rack.setdefault(brokers[broker_id], []).append(broker_id)
    racks = sorted(by_rack, key=lambda x: (x is None, x or ""))
    ordered: list[int] = []
    while any(by_rack[x] for x in racks):
        for x in racks:
            if by_rack[x]:
                ordered.append(by_rack[x].pop(0))
    return ordered


def pick_replica(candidates: Iterable[int], chosen: list[int],
                 rack_of: dict[int, str | None]) -> int | None:
    """The first of `candidates` (in their order of preference) that may join `chosen`: not in
    it, and on a rack `chosen` does not use while such a rack remains; None if none may."""
    candidates = [b for b in candidates if b not in chosen]
    racks_used = {rack_of[b] for b in chosen if b in rack_of}
    if len(racks_used) < len(set(rack_of.values())):
        fresh = next((b for b in candidates if rack_of[b] not in racks_used), None)
        if fresh is not None:
            return fresh
    return candidates[0] if candidates else None


def place(brokers: dict[int, str | None], partitions: int, rf: int, first_partition: int = 0,
          start: int = 0) -> list[list[int]] | None:
    """Rack-aware round robin: leaders spread evenly, followers of one leader spread too.
    None if there are fewer brokers than `rf`."""
    if rf > len(brokers):
        return None
    ordered = rack_alternating(brokers)
    n = len(ordered)
    out = []
    for p in range(first_partition, first_partition + partitions):
        first = (start + p) % n
        # the follower walk starts at a shift that changes every n partitions, so followers of
        # one leader are spread too
        shift = 1 + (p // n) % max(n - 1, 1)
        replicas = [ordered[first]]
        candidates = [ordered[(first + shift + k) % n] for k in range(n)]
        while len(replicas) < rf:
            replicas.append(pick_replica(candidates, replicas, brokers))
        out.append(replicas)
    return out


def replica_counts(partitions: dict[Hashable, tuple], brokers: Iterable[int]) -> dict[int, int]:
    counts = {b: 0 for b in brokers}
    for replicas in partitions.values():
        for b in replicas:
            if b in counts:
                counts[b] += 1
    return counts


def drain_plan(brokers: dict[int, str | None], partitions: dict[Hashable, tuple],
               leaving: set[int], skip_short: bool = False) -> dict[Hashable, list[int]]:
    """Targets that take every replica off the brokers in `leaving`: {partition key: target},
    only for partitions that have a replica there. Each leaving replica is replaced, at its
    position in the list (so preferred leaderships spread over the replacements as they were),
    by an available broker (`brokers` minus `leaving`) that is not yet a replica, on an unused
    rack while one remains, with the fewest replicas (counting the plan so far; ties: lowest
    id). The replication factor is kept; a partition that cannot keep it (fewer available
    brokers than its replicas) raises NotEnoughBrokers rather than shrinking it — or, with
    `skip_short`, is left out of the plan (the others still move)."""
    available = {b: rack for b, rack in brokers.items() if b not in leaving}
    counts = replica_counts(partitions, available)
    plan: dict[Hashable, list[int]] = {}
    for key in sorted(partitions, key=repr):
        replicas = list(partitions[key])
        if not leaving & set(replicas):
            continue
        target = _replace(replicas, leaving, available, counts)
        if target is None:
            if skip_short:
                continue
            raise NotEnoughBrokers(key, len(replicas), len(available))
        for b in target:
            if b not in replicas:
                counts[b] += 1
        plan[key] = target
    return plan


def _replace(replicas: list[int], leaving: set[int], available: dict[int, str | None],
             counts: dict[int, int]) -> list[int] | None:
    """`replicas` with each leaving one replaced in place (see drain_plan), or None."""
    kept = [b for b in replicas if b not in leaving]
    target: list[int] = []
    for i, b in enumerate(replicas):
        if b not in leaving:
            target.append(b)
            continue
        # the rest of the kept replicas count for the rack rule too
        others = target + [x for x in replicas[i + 1:] if x in kept]
        by_load = sorted(available, key=lambda x: (counts[x], x))
        pick = pick_replica(by_load, others, available)
        if pick is None:
            return None
        target.append(pick)
    return target
