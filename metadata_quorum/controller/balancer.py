"""Continuous balancing (issue 19 item 6b; Kafka needs Cruise Control, Redpanda's continuous data
balancing is the anchor): when replica counts or preferred-leader counts per usable broker are
skewed, the active controller moves a few replicas at a time until they are even — e.g. onto a
broker that just joined.

Inputs are plain values, so the decision is a pure function that the controller runs on its
image (`decide_image`, on the rebalance tick after re-replication) and `raftka cluster balance
--status` runs on Metadata + ListPartitionReassignments + DescribeConfigs (`decide`): the same
code gives the same answer from the same cluster state. Why client-side: the controller's last
decision is soft state (`QuorumController.balancer_decision`) and exposing it would need a new
controller API in the service; recomputing it from what every client can read is exact as long
as the client's Metadata is current (it may lag the controller by a heartbeat, so a status read
right after a change can show the previous decision).

Load is replica counts, preferred-leader counts and, once those are even, disk bytes per broker
(balancer_disk.py: swaps that keep the counts; sizes from the leaders' load reports on heartbeats
on the controller, from DescribeLogDirs in the status command).

    disabled  (`raftka.balancer.enable` false, dynamic cluster-wide, default false)
    no usable broker / one usable broker: nothing to balance onto
    waiting   a replica sits on a fenced or unregistered broker: re-replication's job
              (rereplication.py) or the broker comes back; counts would mislead meanwhile
    balanced  replica counts and preferred-leader counts: max − min ≤ `raftka.balancer.threshold`,
              and disk bytes not skewed (or not known yet: not every usable broker has reported)
    moves in flight  at least `raftka.balancer.max.moves` reassignments in progress (anyone's)
    moving    replica moves: the most loaded broker gives one replica to the least loaded one
              (difference ≥ 2, so every move strictly evens the counts and the loop ends), in
              place in the replica list, only for healthy partitions (not moving, every replica
              usable and in the ISR) — the move is an ordinary reassignment, whose new replica
              joins the ISR before the old one leaves, so the ISR never drops below what it was
              (min.insync.replicas is never crossed by plan) and the replication factor is kept;
              a move never lowers the number of racks a partition spans (Kafka's rack rule)
    leaders   once replica counts are even: the preferred replica (first in the list) of a
              partition on the broker preferred most is swapped with an in-sync replica on the
              broker preferred least — a reorder of the same replica set, one record, after which
              the controller's preferred-leader rebalance moves the leadership
    disk      counts even, disk bytes skewed: a swap (or a single move) between the heaviest and
              the lightest broker (balancer_disk.py)
    stuck     skewed, but no move keeps the rules (racks, unhealthy partitions) or, for disk
              bytes, none narrows the gap
A broker that a move in progress takes replicas off (a `raftka cluster decommission` drains it)
is never a destination meanwhile, so the balancer does not fight a drain. (Once the drain's last
move finishes, a tick that falls before the command unregisters the broker may start a move onto
it; the command sees it and drains that partition too.)
Counts are taken over every partition, a move in progress counted at its target, so moves already
running are not planned twice.
"""

from __future__ import annotations

import dataclasses
from typing import Hashable

from metadata_quorum.controller import balancer_disk, reassignment
from metadata_quorum.image import MetadataImage

ENABLE_CONFIG = "raftka.balancer.enable"
MAX_MOVES_CONFIG = "raftka.balancer.max.moves"
THRESHOLD_CONFIG = "raftka.balancer.threshold"
DEFAULT_MAX_MOVES = 4
DEFAULT_THRESHOLD = 1


@dataclasses.dataclass(frozen=True)
class Part:
    """A partition as the balancer sees it: `replicas` is the target of a move in progress."""
    replicas: tuple
    isr: tuple
    leader: int
    moving: bool = False
    removing: tuple = ()        # of a move in progress: the replicas leaving


@dataclasses.dataclass(frozen=True)
class Settings:
    enabled: bool = False
    max_moves: int = DEFAULT_MAX_MOVES
    threshold: int = DEFAULT_THRESHOLD
    disk_percent: int = balancer_disk.DEFAULT_DISK_PERCENT
    disk_min_skew: int = balancer_disk.DEFAULT_DISK_MIN_SKEW

    @classmethod
    def from_configs(cls, configs: dict[str, str]) -> "Settings":
        def num(key, default, low):
            try:
                return max(low, int(configs.get(key, default)))
            except ValueError:
                return default
        return cls(str(configs.get(ENABLE_CONFIG, "false")).lower() == "true",
                   num(MAX_MOVES_CONFIG, DEFAULT_MAX_MOVES, 1),
                   num(THRESHOLD_CONFIG, DEFAULT_THRESHOLD, 1),
                   num(balancer_disk.DISK_PERCENT_CONFIG, balancer_disk.DEFAULT_DISK_PERCENT, 1),
                   num(balancer_disk.DISK_MIN_SKEW_CONFIG, balancer_disk.DEFAULT_DISK_MIN_SKEW,
                       0))


@dataclasses.dataclass(frozen=True)
class Decision:
    state: str          # disabled | no usable broker | waiting | balanced | moves in flight |
    #                     moving | leaders | stuck
    reason: str
    moves: tuple = ()   # ((key, target, why), ...)
    replica_counts: tuple = ()      # ((broker, replicas, preferred leaderships), ...)
    disk_bytes: tuple = ()          # ((broker, bytes), ...) when sizes are known


def counts(brokers, parts: dict[Hashable, Part]) -> tuple[dict, dict]:
    replicas = {b: 0 for b in brokers}
    preferred = {b: 0 for b in brokers}
    for p in parts.values():
        for b in p.replicas:
            if b in replicas:
                replicas[b] += 1
        if p.replicas and p.replicas[0] in preferred:
            preferred[p.replicas[0]] += 1
    return replicas, preferred


def _spread(c: dict) -> int:
    return max(c.values()) - min(c.values()) if c else 0


def decide(brokers: dict[int, str | None], parts: dict[Hashable, Part],
           settings: Settings, sizes: dict | None = None) -> Decision:
    """The balancer's decision over usable `brokers` ({id: rack}) and every partition;
    `sizes` {key: bytes} of the partitions, None while not known."""
    rc, pc = counts(brokers, parts)
    table = tuple((b, rc[b], pc[b]) for b in sorted(brokers))
    if not settings.enabled:
        return Decision("disabled", f"{ENABLE_CONFIG} is not true", (), table)
    if len(brokers) < 2:
        return Decision("no usable broker", f"{len(brokers)} usable broker(s): nothing to "
                        "balance onto", (), table)
    away = sorted({b for p in parts.values() for b in p.replicas if b not in brokers})
    if away:
        return Decision("waiting", f"replicas on fenced or unregistered broker(s) {away}: "
                        "re-replication or their return comes first", (), table)
    in_flight = sum(p.moving for p in parts.values())
    by = None if sizes is None else balancer_disk.broker_bytes(brokers, parts, sizes)
    disk = tuple(sorted(by.items())) if by is not None else ()
    disk_skewed = by is not None and balancer_disk.skewed(by, settings.disk_percent,
                                                          settings.disk_min_skew)
    counts_even = _spread(rc) <= settings.threshold and _spread(pc) <= settings.threshold
    if counts_even and not disk_skewed:
        why = f"replica counts {min(rc.values())}..{max(rc.values())}, preferred leaders " \
              f"{min(pc.values())}..{max(pc.values())}: within {settings.threshold}; " + \
              (f"disk bytes {min(by.values())}..{max(by.values())}: not skewed" if by
               is not None else "disk bytes not known yet (waiting for every broker's report)")
        return Decision("balanced", why + (f" ({in_flight} moves in flight)" if in_flight
                                           else ""), (), table, disk)
    room = settings.max_moves - in_flight
    if room <= 0:
        return Decision("moves in flight", f"{in_flight} moves in progress, at most "
                        f"{settings.max_moves}", (), table, disk)
    # a broker that a move in progress takes replicas off (a decommission drains it, or an
    # earlier balancer move) receives none meanwhile: the balancer would fight a drain
    draining = {b for p in parts.values() for b in p.removing}
    if _spread(rc) > settings.threshold:
        moves = _replica_moves(brokers, parts, dict(rc), room, draining)
        state = "moving"
    elif _spread(pc) > settings.threshold:
        moves = _leader_moves(parts, dict(pc), room)
        state = "leaders"
    else:
        moves = balancer_disk.step(brokers, parts, sizes, rc, settings.threshold,
                                   settings.disk_min_skew, room, _healthy, _racks, draining)
        if not moves:
            return Decision("stuck", f"disk bytes {min(by.values())}..{max(by.values())} "
                            "skewed, but no move on a healthy partition narrows the gap "
                            "(racks, drains and replica counts kept)", (), table, disk)
        return Decision("disk", f"{len(moves)} move(s), disk bytes spread "
                        f"{max(by.values()) - min(by.values())}", tuple(moves), table, disk)
    if not moves:
        drained = f" (brokers being drained receive none: {sorted(draining)})" \
            if draining else ""
        return Decision("stuck", f"replica counts spread {_spread(rc)}, preferred leaders "
                        f"{_spread(pc)}, but no move keeps the rack rule on a healthy "
                        f"partition{drained}", (), table, disk)
    return Decision(state, f"{len(moves)} move(s), replica counts spread {_spread(rc)}, "
                    f"preferred leaders spread {_spread(pc)}", tuple(moves), table, disk)


def _healthy(p: Part, brokers) -> bool:
    return (not p.moving and set(p.isr) == set(p.replicas) and p.leader in p.replicas
            and all(b in brokers for b in p.replicas))


def _racks(replicas, brokers) -> int:
    return len({brokers[b] for b in replicas})


def _replica_moves(brokers, parts, rc: dict, room: int, draining=frozenset()) -> list:
    """Greedy: the most loaded broker gives a replica to the least loaded one that can take it."""
    order: dict = {b: [] for b in rc}     # each broker's healthy partitions, in a fixed order
    for key in sorted(parts, key=repr):
        if _healthy(parts[key], brokers):
            for b in parts[key].replicas:
                order[b].append(key)
    taken: set = set()
    moves = []
    while len(moves) < room:
        move = _one_replica_move(brokers, parts, order, taken, rc, draining)
        if move is None:
            break
        key, src, dst, target = move
        rc[src] -= 1
        rc[dst] += 1
        taken.add(key)
        moves.append((key, target, f"replica {src} -> {dst}"))
    return moves


def _one_replica_move(brokers, parts, order, taken, rc, draining):
    for src in sorted(rc, key=lambda b: (-rc[b], b)):
        for dst in sorted(rc, key=lambda b: (rc[b], b)):
            if rc[src] - rc[dst] < 2:
                break
            if dst in draining:
                continue
            for key in order[src]:
                p = parts[key]
                if key in taken or dst in p.replicas:
                    continue
                target = tuple(dst if b == src else b for b in p.replicas)
                if _racks(target, brokers) >= _racks(p.replicas, brokers):
                    return key, src, dst, target
    return None


def _leader_moves(parts, pc: dict, room: int) -> list:
    order: dict = {b: [] for b in pc}     # partitions by preferred broker, in a fixed order
    for key in sorted(parts, key=repr):
        p = parts[key]
        if p.replicas and p.replicas[0] in order and not p.moving:
            order[p.replicas[0]].append(key)
    moves, taken = [], set()
    while len(moves) < room:
        found = None
        for src in sorted(pc, key=lambda b: (-pc[b], b)):
            for dst in sorted(pc, key=lambda b: (pc[b], b)):
                if pc[src] - pc[dst] < 2:
                    break
                found = next(((key, src, dst) for key in order[src] if key not in taken
                              and dst in parts[key].replicas and dst in parts[key].isr), None)
                if found:
                    break
            if found:
                break
        if found is None:
            break
        key, src, dst = found
        target = (dst,) + tuple(b for b in parts[key].replicas if b != dst)
        pc[src] -= 1
        pc[dst] += 1
        taken.add(key)
        moves.append((key, target, f"preferred leader {src} -> {dst}"))
    return moves


# -- the controller's side --------------------------------------------------------------------

def image_parts(image: MetadataImage) -> dict:
    out = {}
    for t in image.topics.values():
        for p in t.partitions.values():
            moving = reassignment.in_progress(p)
            replicas = tuple(x for x in p.replicas if x not in p.removing_replicas) \
                if moving else tuple(p.replicas)
            out[(t.name, p.partition_id)] = Part(replicas, tuple(p.isr), p.leader, moving,
                                                 tuple(p.removing_replicas))
    return out


def decide_image(image: MetadataImage, loads=None) -> Decision:
    """`loads`: the controller's LoadReports (load_reports.py), or None: disk bytes unknown."""
    settings = Settings.from_configs(image.broker_config())
    if not settings.enabled:
        # the tick runs every 5 s on the active controller: a switched-off balancer must not
        # walk every partition (the counts are for the status command, which computes them)
        return Decision("disabled", f"{ENABLE_CONFIG} is not true")
    brokers = {b.broker_id: b.rack for b in image.usable_brokers()}
    sizes = loads.current(image) if loads is not None and loads.complete_for(brokers) else None
    return decide(brokers, image_parts(image), settings, sizes)


def records(image: MetadataImage, loads=None) -> tuple[list, Decision]:
    """(reassignment records of the decision, the decision), each move computed against the
    image the previous ones leave (as AlterPartitionReassignments does)."""
    decision = decide_image(image, loads)
    out = []
    for (topic, partition), target, _why in decision.moves:
        recs, _, _ = reassignment.alter(image, topic, partition, list(target))
        if recs:
            out += recs
            image = image.apply_all(image.offset + 1, recs)
    return out, decision
