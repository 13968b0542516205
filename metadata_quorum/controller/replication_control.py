"""Topics, partitions, placement, leader election and ISR changes (Kafka's
ReplicationControlManager; KIP-631 records, KIP-497 AlterPartition, KIP-841 ineligible replicas).

Every function here is pure: it reads a `MetadataImage` and returns records (plus a result), and
never changes the image — `replay` of the committed records does.

Partition state machine, per partition:
    online(leader ∈ ISR, leader usable) ──leader fenced / shutting down──▶ elect the first usable
    ISR member (replica order) with leader_epoch + 1; none ⇒ offline (leader -1), unless unclean
    election is enabled, then the first usable replica (possible data loss, by the user's choice).
    offline ──an ISR member becomes usable──▶ online with leader_epoch + 1.
    ISR: shrinks/expands only through AlterPartition from the current leader (epochs checked);
    a fenced broker leaves every ISR except when it is the last member (the ISR never empties, so
    the last in-sync copy is remembered and unclean election stays a conscious choice).

Eligible leader replicas (KIP-966), so that losing the last ISR member's unflushed data (a power
loss) neither loses committed records nor leaves the partition without a safe leader:
    ELR: when the ISR shrinks below min.insync.replicas (capped at the replication factor), the
    members that left it join the ELR. Leaders advance the high watermark only while the ISR is
    at least min.insync.replicas (partition_server/replication/partition.py), so every ELR member
    holds every committed record. The ELR empties once the ISR is back at min.insync.replicas.
    Election order: a usable ISR member, else a usable ELR member (ISR becomes that leader, the
    other old ISR/ELR members stay eligible), else unclean election if allowed.
    A broker registering after an unclean shutdown (its previous broker epoch missing or not the
    one we know) leaves every ELR, and the ISR where it was the last member: its log may have
    lost what it had acknowledged. An empty ISR then waits for an ELR member (or an operator's
    unclean election) instead of electing a replica that may have lost committed data.
    Last resort: such replicas are remembered (last known ELR). With the ISR and ELR empty,
    unclean_recovery.py elects the replica with the longest log (KIP-966 unclean recovery,
    `unclean.recovery.strategy` Balanced or Aggressive); with strategy None, once every one of
    them is back the first of them (the former last ISR member) leads.
"""

from __future__ import annotations

import dataclasses
import uuid

from common.topic_configs import validate_topic_name
from metadata_quorum import records as r
from metadata_quorum.controller import placement, unclean_recovery
from metadata_quorum.image import MetadataImage
from wire.errors import ErrorCode

NO_LEADER = -1


@dataclasses.dataclass
class TopicResult:
    name: str
    error: ErrorCode = ErrorCode.NONE
    message: str | None = None
    topic_id: uuid.UUID | None = None
    num_partitions: int = -1
    replication_factor: int = -1


def place_replicas(image: MetadataImage, partitions: int, rf: int, first_partition: int = 0,
                   start: int | None = None) -> list[list[int]] | None:
    """Rack-aware round robin over usable brokers (placement.place): leaders spread evenly,
    replicas on distinct brokers and, where racks allow, distinct racks. None if there are
    fewer brokers than `rf`."""
    brokers = {b.broker_id: b.rack for b in image.usable_brokers()}
    if not brokers:
        return None if rf > 0 else []
    if start is None:
        start = (len(image.topics) * 7) % len(brokers)
    return placement.place(brokers, partitions, rf, first_partition, start)


def create_topic(image: MetadataImage, name: str, num_partitions: int, replication_factor: int,
                 assignments: dict[int, list[int]] | None, configs: dict[str, str],
                 default_partitions: int, default_rf: int, topic_id: uuid.UUID | None = None):
    """Records for one new topic, or an error result (and no records)."""
    bad = validate_topic_name(name)
    if bad:
        return [], TopicResult(name, ErrorCode.INVALID_TOPIC_EXCEPTION, bad)
    if name in image.topics:
        return [], TopicResult(name, ErrorCode.TOPIC_ALREADY_EXISTS, f"topic '{name}' already exists")
    if assignments:
        if num_partitions != -1 or replication_factor != -1:
            return [], TopicResult(name, ErrorCode.INVALID_REQUEST,
                                   "give either assignments or partitions/replication factor")
        if sorted(assignments) != list(range(len(assignments))):
            return [], TopicResult(name, ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                   "partition ids must be 0..n-1")
        placement = [assignments[p] for p in range(len(assignments))]
        sizes = {len(x) for x in placement}
        known = set(image.brokers)
        if len(sizes) != 1 or 0 in sizes or any(len(set(x)) != len(x) or not set(x) <= known
                                                 for x in placement):
            return [], TopicResult(name, ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                   "replica lists must be non-empty, equal length, distinct, known brokers")
    else:
        partitions = default_partitions if num_partitions == -1 else num_partitions
        rf = default_rf if replication_factor == -1 else replication_factor
        if partitions <= 0:
            return [], TopicResult(name, ErrorCode.INVALID_PARTITIONS,
                                   f"number of partitions must be at least 1, got {partitions}")
        if rf <= 0:
            return [], TopicResult(name, ErrorCode.INVALID_REPLICATION_FACTOR,
                                   f"replication factor must be at least 1, got {rf}")
        placement = place_replicas(image, partitions, rf)
        if placement is None:
            return [], TopicResult(name, ErrorCode.INVALID_REPLICATION_FACTOR,
                                   f"replication factor {rf} is larger than the "
                                   f"{len(image.usable_brokers())} available brokers")
    topic_id = topic_id or uuid.uuid4()
    records: list = [r.TopicRecord(name, topic_id)]
    for k, v in sorted(configs.items()):
        records.append(r.ConfigRecord(2, name, k, v))
    usable = image.usable_ids()
    for pid, replicas in enumerate(placement):
        isr = tuple(x for x in replicas if x in usable) or tuple(replicas)
        leader = next((x for x in replicas if x in usable), NO_LEADER)
        records.append(r.PartitionRecord(topic_id, pid, tuple(replicas), isr, leader, 0, 0))
    return records, TopicResult(name, ErrorCode.NONE, None, topic_id, len(placement),
                                len(placement[0]))


def delete_topic(image: MetadataImage, name: str | None, topic_id: uuid.UUID | None):
    topic = image.topics.get(name) if name else image.topic_by_id(topic_id)
    if topic is None:
        code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if name else ErrorCode.UNKNOWN_TOPIC_ID
        return [], TopicResult(name or "", code, "topic does not exist")
    return [r.RemoveTopicRecord(topic.topic_id)], TopicResult(topic.name, topic_id=topic.topic_id)


def create_partitions(image: MetadataImage, name: str, count: int,
                      assignments: list[list[int]] | None):
    topic = image.topics.get(name)
    if topic is None:
        return [], TopicResult(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "topic does not exist")
    current = len(topic.partitions)
    if count <= current:
        return [], TopicResult(name, ErrorCode.INVALID_PARTITIONS,
                               f"topic has {current} partitions; the new count must be larger")
    rf = len(next(iter(topic.partitions.values())).replicas)
    if assignments:
        if len(assignments) != count - current or any(len(a) != rf or len(set(a)) != rf
                                                      or not set(a) <= set(image.brokers)
                                                      for a in assignments):
            return [], TopicResult(name, ErrorCode.INVALID_REPLICA_ASSIGNMENT, "bad assignment")
        placement = assignments
    else:
        placement = place_replicas(image, count - current, rf, first_partition=current)
        if placement is None:
            return [], TopicResult(name, ErrorCode.INVALID_REPLICATION_FACTOR,
                                   "not enough available brokers")
    usable = image.usable_ids()
    records = []
    for i, replicas in enumerate(placement):
        isr = tuple(x for x in replicas if x in usable) or tuple(replicas)
        leader = next((x for x in replicas if x in usable), NO_LEADER)
        records.append(r.PartitionRecord(topic.topic_id, current + i, tuple(replicas), isr, leader))
    return records, TopicResult(name, topic_id=topic.topic_id)


def unclean_allowed(image: MetadataImage, topic: str) -> bool:
    value = image.topic_config(topic).get("unclean.leader.election.enable")
    if value is None:
        value = image.broker_config().get("unclean.leader.election.enable", "false")
    return value.lower() == "true"


def min_insync(image: MetadataImage, topic: str, replication_factor: int,
               default_min_isr: int) -> int:
    """min.insync.replicas for ELR decisions: topic config, cluster default, else the controller's
    own setting — capped at the replication factor (an RF-1 topic is never 'below' it)."""
    value = image.topic_config(topic).get("min.insync.replicas")
    if value is None:
        value = image.broker_config().get("min.insync.replicas")
    try:
        wanted = int(value) if value is not None else default_min_isr
    except ValueError:
        wanted = default_min_isr
    return max(1, min(wanted, replication_factor))


def elr_after(image: MetadataImage, topic: str, p, new_isr: tuple, default_min_isr: int) -> tuple:
    """The ELR once the ISR becomes `new_isr`: members leaving an ISR that ends up below
    min.insync.replicas join it; an ISR at min.insync.replicas empties it."""
    if len(new_isr) >= min_insync(image, topic, p.replication_factor, default_min_isr):
        return ()
    out: list[int] = []
    for x in p.elr + p.isr:
        if x not in new_isr and x not in out and x in p.replicas:
            out.append(x)
    return tuple(out)


def leadership_changes(image: MetadataImage, gone: set[int], back: set[int] = frozenset(),
                       default_min_isr: int = 1, only: set | None = None):
    """Partition changes after brokers in `gone` stopped being usable (fenced, shutting down)
    and brokers in `back` became usable again. Computed against `image` with those changes
    hypothetically applied: `gone` must not be elected, `back` may be. `only`: just these
    (topic, partition)s (replicas of an offline log directory, controller/log_dirs.py)."""
    records = []
    # once per call, not per partition: a full restart elects leaders for every partition
    usable = (image.usable_ids() | set(back)) - set(gone)
    for topic in image.topics.values():
        for p in topic.partitions.values():
            if only is not None and (topic.name, p.partition_id) not in only:
                continue
            isr = p.isr
            if gone & set(isr):
                shrunk = tuple(x for x in isr if x not in gone)
                isr = shrunk or isr           # never empty the ISR (KIP-841 last-member rule)
            leader = p.leader
            unclean = False
            last_known = p.last_known_elr
            if leader in gone or leader == NO_LEADER:
                leader, how = _elect_with(image, topic.name, p, isr, usable)
                if how in ("elr", "unclean", "recovery"):
                    isr = (leader,)           # its log is the truth now
                unclean = how in ("unclean", "recovery")
                if leader != NO_LEADER:
                    last_known = ()
            # after an unclean election nobody is known to hold the (new) committed records
            elr = () if unclean else elr_after(image, topic.name, p, isr, default_min_isr)
            if isr != p.isr or leader != p.leader or elr != p.elr or last_known != p.last_known_elr:
                records.append(r.PartitionChangeRecord(
                    topic.topic_id, p.partition_id,
                    isr=isr if isr != p.isr else None,
                    leader=leader if leader != p.leader else None,
                    elr=elr if elr != p.elr else None,
                    last_known_elr=last_known if last_known != p.last_known_elr else None))
    return records


def _elect_with(image, topic, p, isr, usable: set[int]) -> tuple[int, str | None]:
    """(leader, how): from the ISR, else the ELR (KIP-966), else unclean if allowed; `usable`:
    the brokers that may lead."""
    for replica in p.replicas:
        if replica in isr and replica in usable:
            return replica, "isr"
    for replica in p.replicas:
        if replica in p.elr and replica in usable:
            return replica, "elr"
    if not isr and not p.elr and p.last_known_elr and set(p.last_known_elr) <= usable \
            and unclean_recovery.strategy(image, topic) == "None":
        return p.last_known_elr[0], "recovery"    # else unclean_recovery.py picks the longest log
    if unclean_allowed(image, topic):
        for replica in p.replicas:
            if replica in usable:
                return replica, "unclean"
    return NO_LEADER, None


def unclean_shutdown_changes(image: MetadataImage, broker_id: int) -> list:
    """KIP-966: `broker_id` restarted after an unclean shutdown, so its log may miss records it
    had acknowledged. It stops being eligible (ELR), and where it was the ISR's last member the
    ISR empties. Leaderless partitions are then elected by `leadership_changes`."""
    records = []
    for topic in image.topics.values():
        for p in topic.partitions.values():
            if broker_id not in p.replicas:
                continue
            elr = tuple(x for x in p.elr if x != broker_id)
            isr = () if p.isr == (broker_id,) else p.isr
            if elr != p.elr or isr != p.isr:
                others = tuple(x for x in p.last_known_elr if x != broker_id)
                # the former last ISR member first: it held the most when the ISR emptied
                last_known = (broker_id,) + others if p.isr == (broker_id,) \
                    else others + (broker_id,)
                records.append(r.PartitionChangeRecord(
                    topic.topic_id, p.partition_id, isr=isr if isr != p.isr else None,
                    leader=NO_LEADER if p.leader == broker_id and not isr else None,
                    elr=elr if elr != p.elr else None, last_known_elr=last_known))
    return records


@dataclasses.dataclass
class AlterPartitionResult:
    error: ErrorCode
    leader: int = -1
    leader_epoch: int = -1
    isr: tuple = ()
    partition_epoch: int = -1


def alter_partition(image: MetadataImage, broker_id: int, broker_epoch: int,
                    topic_id: uuid.UUID, partition: int, leader_epoch: int, partition_epoch: int,
                    new_isr: list[int], default_min_isr: int = 1):
    """AlterPartition from a leader: records + per-partition result."""
    b = image.brokers.get(broker_id)
    if b is None or (broker_epoch != -1 and b.broker_epoch != broker_epoch):
        return [], AlterPartitionResult(ErrorCode.STALE_BROKER_EPOCH)
    topic = image.topic_by_id(topic_id)
    p = topic.partitions.get(partition) if topic else None
    if p is None:
        return [], AlterPartitionResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    if p.leader != broker_id:
        return [], AlterPartitionResult(ErrorCode.NOT_LEADER_OR_FOLLOWER)
    if leader_epoch != p.leader_epoch:
        return [], AlterPartitionResult(ErrorCode.FENCED_LEADER_EPOCH)
    if partition_epoch != p.partition_epoch:
        return [], AlterPartitionResult(ErrorCode.INVALID_UPDATE_VERSION)
    isr = tuple(new_isr)
    if broker_id not in isr or not set(isr) <= set(p.replicas) or len(set(isr)) != len(isr):
        return [], AlterPartitionResult(ErrorCode.INVALID_REQUEST)
    usable = image.usable_ids()
    if any(x not in usable for x in isr if x not in p.isr):
        return [], AlterPartitionResult(ErrorCode.INELIGIBLE_REPLICA)
    ok = AlterPartitionResult(ErrorCode.NONE, p.leader, p.leader_epoch, isr, p.partition_epoch + 1)
    if isr == p.isr:
        ok.partition_epoch = p.partition_epoch
        return [], ok
    elr = elr_after(image, topic.name, p, isr, default_min_isr)
    return [r.PartitionChangeRecord(topic_id, partition, isr=isr,
                                    elr=elr if elr != p.elr else None)], ok


def preferred_election(image: MetadataImage, topic: str, partition: int):
    t = image.topics.get(topic)
    p = t.partitions.get(partition) if t else None
    if p is None:
        return [], ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    preferred = p.replicas[0]
    if p.leader == preferred:
        return [], ErrorCode.ELECTION_NOT_NEEDED
    usable = image.usable_ids()
    if preferred not in p.isr or preferred not in usable:
        return [], ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    return [r.PartitionChangeRecord(t.topic_id, partition, leader=preferred)], ErrorCode.NONE


def preferred_rebalance(image: MetadataImage) -> list:
    """auto.leader.rebalance: move leadership back to each partition's first replica when it is
    usable and in the ISR, so a restarted cluster does not keep every leader on one broker."""
    usable = image.usable_ids()
    records = []
    for topic in image.topics.values():
        for p in topic.partitions.values():
            preferred = p.replicas[0]
            if p.leader != preferred and preferred in usable and preferred in p.isr:
                records.append(r.PartitionChangeRecord(topic.topic_id, p.partition_id,
                                                       leader=preferred))
    return records


def unclean_recoveries(image: MetadataImage) -> list:
    """Leaderless partitions whose topic now allows unclean election (the setting was turned on
    while they were offline) get an out-of-sync leader, as Kafka's controller does periodically."""
    records = []
    for topic in image.topics.values():
        if not unclean_allowed(image, topic.name):
            continue
        for p in topic.partitions.values():
            if p.leader == NO_LEADER:
                recs, _ = unclean_election(image, topic.name, p.partition_id)
                records += recs
    return records


def unclean_election(image: MetadataImage, topic: str, partition: int):
    t = image.topics.get(topic)
    p = t.partitions.get(partition) if t else None
    if p is None:
        return [], ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if p.leader != NO_LEADER:
        return [], ErrorCode.ELECTION_NOT_NEEDED
    brokers = image.usable_ids()
    usable = [x for x in p.replicas if x in brokers]
    if not usable:
        return [], ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
    return [r.PartitionChangeRecord(t.topic_id, partition, leader=usable[0],
                                    isr=(usable[0],), elr=() if p.elr else None)], ErrorCode.NONE
