"""Offline log directories of brokers (KIP-858, JBOD): a broker whose directory failed keeps
serving from its other directories, and the controller moves the failed directory's replicas
out of leadership and ISRs — only those, not the broker's other partitions.

Durable state, in the metadata log as Kafka keeps it, so every controller (and every broker)
reads the same offline replicas from its image and a controller failover forgets nothing:
- a broker's online directories: RegisterBrokerRecord.log_dirs (BrokerRegistration LogDirs),
  then BrokerRegistrationChangeRecord.log_dirs when a heartbeat (v1 OfflineLogDirs) names some
  of them offline (Kafka's BrokerRegistrationChangeRecord.LogDirs);
- the directory of each replica: PartitionRecord / PartitionChangeRecord `directories`
  (Kafka's Directories), written when the broker sends AssignReplicasToDirs.
A replica is offline when its directory is assigned and not among its broker's online ones
(MetadataImage.replica_offline; unassigned = online, as Kafka's UNASSIGNED/MIGRATING, which is
how records written before this read). A broker registering again names its directories anew.

Kafka's brokers assign every replica as it is placed; ours (partition_server/offline_replicas.py)
assign the replicas of a failed directory, and any replica whose directory in the image is
assigned and differs from where it is (a move, a restart without a directory): every other
replica stays UNASSIGNED, which costs nothing and reads as online.

Effect of a replica going offline (heartbeat or assignment, whichever commits second): the same
partition change a fenced broker gets (replication_control.leadership_changes, restricted to
those partitions): a new leader from the rest of the ISR (or the ELR), the broker out of the
ISR unless it is its last member (KIP-841: the partition then has no leader, as Kafka's
offline partition). An offline replica is never elected afterwards (Kafka's
isAcceptableLeader): every command's records pass `without_offline_leaders`.

Codes: STALE_BROKER_EPOCH / BROKER_ID_NOT_REGISTERED (top level); per partition NONE,
UNKNOWN_TOPIC_ID, NOT_LEADER_OR_FOLLOWER (the broker is not a replica of it).
"""

from __future__ import annotations

import dataclasses

from metadata_quorum import records as r
from metadata_quorum.controller.replication_control import NO_LEADER, leadership_changes
from metadata_quorum.image import LOST_DIR, UNASSIGNED_DIR, MetadataImage
from wire.errors import ErrorCode


def heartbeat_records(image: MetadataImage, broker_id: int, broker_epoch: int,
                      offline_dir_ids, default_min_isr: int = 1) -> list:
    """A heartbeat naming `offline_dir_ids` (None: a v0 heartbeat, which cannot say): the
    broker's online directories shrink, and replicas assigned to the newly offline ones leave
    leadership and ISRs. Directories come back only with a new registration (a restart), as a
    failed directory stays failed in the broker's process."""
    b = image.brokers.get(broker_id)
    if offline_dir_ids is None or b is None or b.broker_epoch != broker_epoch or not b.log_dirs:
        return []
    offline = set(offline_dir_ids)
    online = tuple(d for d in b.log_dirs if d not in offline)
    if online == b.log_dirs:
        return []
    # every directory offline: LOST stands in, since an empty list reads as "all online"
    records: list = [r.BrokerRegistrationChangeRecord(broker_id, broker_epoch,
                                                      log_dirs=online or (LOST_DIR,))]
    after = image.apply_all(image.offset + 1, records)
    gone = {(t.name, p.partition_id) for t in after.topics.values()
            for p in t.partitions.values()
            if p.directories and broker_id in p.replicas and after.replica_offline(p, broker_id)}
    if gone:
        records += leadership_changes(after, {broker_id}, default_min_isr=default_min_isr,
                                      only=gone)
    return records


def assign_replicas_to_dirs(image: MetadataImage, broker_id: int, broker_epoch: int,
                            directories: dict, default_min_isr: int = 1):
    """`directories`: {dir id: {topic id: [partition]}}. Returns (records, (top-level error,
    {dir id: {topic id: {partition: error}}}))."""
    b = image.brokers.get(broker_id)
    if b is None:
        return [], (ErrorCode.BROKER_ID_NOT_REGISTERED, {})
    if b.broker_epoch != broker_epoch:
        return [], (ErrorCode.STALE_BROKER_EPOCH, {})
    errors: dict = {}
    changed: dict = {}          # (topic id, partition) → directories after the assignment
    for dir_id, topics in directories.items():
        for topic_id, partitions in topics.items():
            t = image.topic_by_id(topic_id)
            out = errors.setdefault(dir_id, {}).setdefault(topic_id, {})
            for partition in partitions:
                p = t.partitions.get(partition) if t is not None else None
                if t is None:
                    out[partition] = ErrorCode.UNKNOWN_TOPIC_ID
                elif p is None or broker_id not in p.replicas:
                    out[partition] = ErrorCode.NOT_LEADER_OR_FOLLOWER
                else:
                    out[partition] = ErrorCode.NONE
                    dirs = list(changed.get((topic_id, partition))
                                or p.directories or (UNASSIGNED_DIR,) * len(p.replicas))
                    dirs[p.replicas.index(broker_id)] = dir_id
                    if tuple(dirs) != (p.directories or (UNASSIGNED_DIR,) * len(p.replicas)):
                        changed[(topic_id, partition)] = tuple(dirs)
    records: list = [r.PartitionChangeRecord(tid, pid, directories=dirs)
                     for (tid, pid), dirs in changed.items()]
    if records:
        after = image.apply_all(image.offset + 1, records)
        gone = set()
        for tid, pid in changed:
            t = after.topic_by_id(tid)
            if after.replica_offline(t.partitions[pid], broker_id):
                gone.add((t.name, pid))
        if gone:
            records += leadership_changes(after, {broker_id}, default_min_isr=default_min_isr,
                                          only=gone)
    return records, (ErrorCode.NONE, errors)


def without_offline_leaders(image: MetadataImage, records: list) -> list:
    """`records` with every election of an offline replica undone: a partition whose current
    leader is usable keeps it (e.g. a preferred-leader move back onto the offline replica), one
    without a usable leader is left with none (a change left with nothing to do is dropped)."""
    out = []
    for rec in records:
        if isinstance(rec, r.PartitionChangeRecord) and rec.leader is not None and \
                rec.leader != NO_LEADER and _is_offline(image, rec.leader, rec.topic_id,
                                                        rec.partition_id):
            t = image.topic_by_id(rec.topic_id)
            p = t.partitions.get(rec.partition_id) if t is not None else None
            keep = p is not None and p.leader != NO_LEADER and \
                not _is_offline(image, p.leader, rec.topic_id, rec.partition_id)
            rec = dataclasses.replace(rec, leader=None if keep else NO_LEADER)
            if p is not None and p.leader == NO_LEADER:
                rec = dataclasses.replace(rec, leader=None)
            if rec.leader is None:
                if all(getattr(rec, f.name) is None for f in dataclasses.fields(rec)
                       if f.name not in ("topic_id", "partition_id")):
                    continue
        out.append(rec)
    return out


def _is_offline(image: MetadataImage, broker_id: int, topic_id, partition_id: int) -> bool:
    t = image.topic_by_id(topic_id)
    p = t.partitions.get(partition_id) if t is not None else None
    return p is not None and bool(p.directories) and image.replica_offline(p, broker_id)
