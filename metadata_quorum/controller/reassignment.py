"""Partition reassignment (KIP-455, as KRaft's ReplicationControlManager does it): pure functions
from a `MetadataImage` to PartitionChangeRecords; `replay` of the records changes the image.

The state lives in the partition itself, so a controller failover or a broker restart mid-move
neither loses nor corrupts it:

    idle(replicas = R) ──alter(T)──▶ moving(replicas = T + (R − T),
                                          adding = T − R, removing = R − T)
    moving ──every replica of T in the ISR──▶ idle(replicas = T, ISR − removing; a leader being
        removed hands over to the first in-sync, usable member of T)
    moving ──alter(None) (cancel)──▶ idle(replicas = R, ISR − adding; an adding leader hands over)
        (R as a set: the list is the moving one minus the adding replicas, so its order — the
        preferred leader — may differ from before the move, as in Kafka)
    moving ──alter(T')──▶ the move to T is reverted first, then moving towards T' from R

Completion is Kafka's rule: *all* target replicas in the ISR (not only the adding ones), so a
finished move never leaves the partition with fewer in-sync copies than it asked for. It is
checked when a move starts (a target inside the ISR finishes at once), after every ISR change
(AlterPartition from the leader) and on the controller's tick (a move that waited for a usable
leader). A move whose leader must go waits until a usable target member is in the ISR rather
than finishing into an offline partition.

Cancel: when the ISR holds only adding replicas (the original ones all fell out), reverting
would need an unclean election: refused (INVALID_REPLICA_ASSIGNMENT, Kafka's words) unless the
topic allows unclean election, then the first usable original replica leads with an ISR of
itself. A new target replacing a move reverts it first, so the same rule applies (the seeded
simulation lost acknowledged records with an unconditional unclean revert).

Errors (Kafka's codes and words): UNKNOWN_TOPIC_OR_PARTITION; NO_REASSIGNMENT_IN_PROGRESS for
cancelling nothing; INVALID_REPLICA_ASSIGNMENT for an empty target, an unregistered broker or a
broker named twice. A registered but fenced broker may be a target (Kafka checks registration
only); it joins the ISR once it is back. A refused plan writes nothing.
"""

from __future__ import annotations

import dataclasses

from metadata_quorum import records as r
from metadata_quorum.controller.replication_control import unclean_allowed
from metadata_quorum.image import MetadataImage, PartitionState
from wire.errors import ErrorCode

NO_LEADER = -1


@dataclasses.dataclass(frozen=True)
class Placement:
    """A partition's replica set, ISR and leader, proposed (not yet a record)."""
    replicas: tuple
    isr: tuple
    leader: int
    adding: tuple = ()
    removing: tuple = ()

    @property
    def moving(self) -> bool:
        return bool(self.adding or self.removing)


def in_progress(p: PartitionState) -> bool:
    return bool(p.adding_replicas or p.removing_replicas)


def validate_target(image: MetadataImage, target) -> str | None:
    """Why `target` is not a valid replica list (Kafka's messages), or None."""
    if not target:
        return "The manual partition assignment includes an empty replica list."
    previous = None
    for broker_id in sorted(target):
        if broker_id not in image.brokers:
            return (f"The manual partition assignment includes broker {broker_id}, "
                    "but no such broker is registered.")
        if broker_id == previous:
            return (f"The manual partition assignment includes the broker {broker_id} "
                    "more than once.")
        previous = broker_id
    return None


def revert(p: PartitionState, usable: set[int]) -> Placement:
    """The partition as it was before its move: adding replicas out of the replica set and ISR;
    a leader among them hands over to an in-sync original replica."""
    adding = set(p.adding_replicas)
    replicas = tuple(x for x in p.replicas if x not in adding)
    isr = tuple(x for x in p.isr if x not in adding)
    leader = p.leader
    if not isr:
        # only adding replicas were in sync: Kafka's unclean revert (possible data loss is the
        # cancelling operator's choice, as it is in Kafka)
        leader = next((x for x in replicas if x in usable), NO_LEADER)
        isr = (leader,) if leader != NO_LEADER else replicas[:1]
    elif leader not in isr:
        leader = next((x for x in replicas if x in isr and x in usable), NO_LEADER)
    return Placement(replicas, isr, leader)


def start(original: Placement, target) -> Placement:
    """Moving from `original` towards `target`: replicas = target, then the ones leaving."""
    target = tuple(target)
    removing = tuple(x for x in original.replicas if x not in target)
    adding = tuple(x for x in target if x not in original.replicas)
    return Placement(target + removing, original.isr, original.leader, adding, removing)


def complete(pl: Placement, usable: set[int]) -> Placement | None:
    """The finished move, if every target replica is in the ISR and the partition keeps a
    usable leader; else None (the move goes on)."""
    if not pl.moving:
        return None
    leaving = set(pl.removing)
    target = tuple(x for x in pl.replicas if x not in leaving)
    isr = tuple(x for x in pl.isr if x not in leaving)
    if not isr or not set(target) <= set(isr):
        return None
    leader = pl.leader
    if leader not in isr:
        leader = next((x for x in target if x in isr and x in usable), NO_LEADER)
        if leader == NO_LEADER:
            return None
    return Placement(target, isr, leader)


def change_record(topic_id, p: PartitionState, pl: Placement, unclean: bool = False):
    """The PartitionChangeRecord taking `p` to `pl` (only changed fields), or None."""
    members = set(pl.replicas)
    # ELR members are replicas outside the ISR (KIP-966); one that left the replica set goes
    elr = () if unclean else tuple(x for x in p.elr if x in members and x not in pl.isr)
    last_known = tuple(x for x in p.last_known_elr if x in members)
    fields = {}
    for name, new, old in (("replicas", pl.replicas, p.replicas), ("isr", pl.isr, p.isr),
                           ("leader", pl.leader, p.leader),
                           ("adding_replicas", pl.adding, p.adding_replicas),
                           ("removing_replicas", pl.removing, p.removing_replicas),
                           ("elr", elr, p.elr), ("last_known_elr", last_known, p.last_known_elr)):
        if new != old:
            fields[name] = new
    if not fields:
        return None
    return r.PartitionChangeRecord(topic_id, p.partition_id, **fields)


def alter(image: MetadataImage, topic: str, partition: int, target):
    """One partition of AlterPartitionReassignments: (records, error, message). `target` None
    cancels the move in progress."""
    t = image.topics.get(topic)
    p = t.partitions.get(partition) if t else None
    if p is None:
        return [], ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, (
            f"Unable to find partition {topic}-{partition}." if t else
            f"Unable to find a topic named {topic}.")
    usable = image.usable_ids()
    if target is None and not in_progress(p):
        return [], ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, (
            f"No ongoing reassignment for {topic}-{partition}.")
    if target is not None:
        problem = validate_target(image, target)
        if problem:
            return [], ErrorCode.INVALID_REPLICA_ASSIGNMENT, problem
    # the revert is unclean when no original replica is in sync
    unclean = in_progress(p) and not set(p.isr) - set(p.adding_replicas)
    if unclean and not unclean_allowed(image, topic):
        return [], ErrorCode.INVALID_REPLICA_ASSIGNMENT, (
            f"Unable to revert partition assignment for {topic}:{partition} because it would "
            "require an unclean leader election.")
    if target is None:
        pl = revert(p, usable)
    else:
        # a new target replaces the one in progress: first back to the original replicas
        pl = start(revert(p, usable), target)
        pl = complete(pl, usable) or pl
    rec = change_record(t.topic_id, p, pl, unclean)
    return ([rec] if rec else []), ErrorCode.NONE, None


def after_isr_change(image: MetadataImage, topic_id, partition: int, isr: tuple):
    """The completion record once the ISR becomes `isr` (AlterPartition), or None."""
    t = image.topic_by_id(topic_id)
    p = t.partitions.get(partition) if t else None
    if p is None or not in_progress(p):
        return None
    pl = Placement(p.replicas, tuple(isr), p.leader, p.adding_replicas, p.removing_replicas)
    done = complete(pl, image.usable_ids())
    if done is None:
        return None
    # computed against the partition as the ISR change leaves it
    after = dataclasses.replace(p, isr=tuple(isr))
    return change_record(t.topic_id, after, done)


def completions(image: MetadataImage) -> list:
    """Moves that can finish now (the controller's tick): normally finished by AlterPartition
    already, this catches one that waited for a usable leader."""
    usable = image.usable_ids() if image.brokers else set()
    records = []
    for t in image.topics.values():
        for p in t.partitions.values():
            if in_progress(p):
                pl = Placement(p.replicas, p.isr, p.leader, p.adding_replicas,
                               p.removing_replicas)
                done = complete(pl, usable)
                rec = change_record(t.topic_id, p, done) if done else None
                if rec:
                    records.append(rec)
    return records


@dataclasses.dataclass(frozen=True)
class Ongoing:
    partition: int
    replicas: tuple
    adding: tuple
    removing: tuple


def ongoing(image: MetadataImage, topics: list[tuple[str, list[int]]] | None):
    """ListPartitionReassignments: [(topic, [Ongoing])] for moves in progress among `topics`
    (None: every topic). Unknown topics and partitions are left out, as Kafka does."""
    wanted = ([(name, None) for name in sorted(image.topics)] if topics is None else topics)
    out = []
    for name, partitions in wanted:
        t = image.topics.get(name)
        if t is None:
            continue
        ids = sorted(t.partitions) if partitions is None else partitions
        found = [Ongoing(pid, p.replicas, p.adding_replicas, p.removing_replicas)
                 for pid in ids if (p := t.partitions.get(pid)) is not None and in_progress(p)]
        if found:
            out.append((name, found))
    return out
