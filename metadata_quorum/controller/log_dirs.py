"""Offline log directories of brokers (KIP-858, JBOD): a broker whose directory failed keeps
serving from its other directories, and the controller moves the failed directory's replicas
out of leadership and ISRs — only those, not the broker's other partitions.

What the controller hears (partition_server/offline_replicas.py):
- BrokerHeartbeat v1 OfflineLogDirs: the ids of the broker's offline directories. Soft state of
  the active controller, like the heartbeat times: a new controller learns it from the next
  heartbeats.
- AssignReplicasToDirs naming replicas under a directory id. Kafka's brokers send one for every
  placement and the controller records it in the partition (PartitionRecord.Directories); here
  the broker sends only the replicas of offline directories (and repeats while they still lead
  or sit in an ISR), so an assignment to a directory the broker's heartbeats call offline is what
  takes those replicas offline, and any other assignment is acknowledged and not stored.

Effect: for each offline replica, the same partition change a fenced broker gets
(replication_control.leadership_changes, restricted to those partitions): a new leader from the
rest of the ISR (or the ELR), the broker out of the ISR unless it is its last member (KIP-841:
the partition then has no leader, as Kafka's offline partition).

Codes: STALE_BROKER_EPOCH / BROKER_ID_NOT_REGISTERED (top level); per partition NONE,
UNKNOWN_TOPIC_ID, NOT_LEADER_OR_FOLLOWER (the broker is not a replica of it).

An offline replica is never elected afterwards (Kafka's isAcceptableLeader): the replicas
reported offline are soft state too, and every command's records pass `without_offline_leaders`,
which turns an election of such a replica into "no leader" (a preferred-leader rebalance, a
fencing elsewhere that would hand a partition to its last ISR member, ...). After a controller
failover the set starts empty; a broker elected for an offline replica reports it again.
"""

from __future__ import annotations

import dataclasses
import uuid

from metadata_quorum import records as r
from metadata_quorum.controller.replication_control import NO_LEADER, leadership_changes
from metadata_quorum.image import MetadataImage
from wire.errors import ErrorCode


class OfflineLogDirs:
    """Soft state: broker id → ids of its offline log directories (from heartbeats)."""

    def __init__(self):
        self.by_broker: dict[int, frozenset] = {}
        self.replicas: dict[int, set] = {}      # broker → {(topic id, partition)} offline

    def heartbeat(self, broker_id: int, offline_dir_ids) -> None:
        ids = frozenset(offline_dir_ids or ())
        if ids:
            self.by_broker[broker_id] = ids
        else:               # every directory online again (a restart): so are its replicas
            self.by_broker.pop(broker_id, None)
            self.replicas.pop(broker_id, None)

    def offline(self, broker_id: int, dir_id: uuid.UUID) -> bool:
        return dir_id in self.by_broker.get(broker_id, ())


def assign_replicas_to_dirs(image: MetadataImage, offline: OfflineLogDirs, broker_id: int,
                            broker_epoch: int, directories: dict, default_min_isr: int = 1):
    """`directories`: {dir id: {topic id: [partition]}}. Returns (records, (top-level error,
    {dir id: {topic id: {partition: error}}}))."""
    b = image.brokers.get(broker_id)
    if b is None:
        return [], (ErrorCode.BROKER_ID_NOT_REGISTERED, {})
    if b.broker_epoch != broker_epoch:
        return [], (ErrorCode.STALE_BROKER_EPOCH, {})
    errors: dict = {}
    gone: set = set()
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
                    if offline.offline(broker_id, dir_id):
                        gone.add((t.name, partition))
                        offline.replicas.setdefault(broker_id, set()).add((t.topic_id, partition))
    records = leadership_changes(image, {broker_id}, default_min_isr=default_min_isr,
                                 only=gone) if gone else []
    return records, (ErrorCode.NONE, errors)


def without_offline_leaders(image: MetadataImage, offline: OfflineLogDirs, records: list) -> list:
    """`records` with every election of an offline replica undone: a partition whose current
    leader is usable keeps it (e.g. a preferred-leader move back onto the offline replica), one
    without a usable leader is left with none (a change left with nothing to do is dropped)."""
    if not offline.replicas:
        return records
    out = []
    for rec in records:
        if isinstance(rec, r.PartitionChangeRecord) and rec.leader is not None and \
                _is_offline(offline, rec.leader, rec.topic_id, rec.partition_id):
            t = image.topic_by_id(rec.topic_id)
            p = t.partitions.get(rec.partition_id) if t is not None else None
            keep = p is not None and p.leader != NO_LEADER and \
                not _is_offline(offline, p.leader, rec.topic_id, rec.partition_id)
            rec = dataclasses.replace(rec, leader=None if keep else NO_LEADER)
            if p is not None and p.leader == NO_LEADER:
                rec = dataclasses.replace(rec, leader=None)
            if rec.leader is None:
                if all(getattr(rec, f.name) is None for f in dataclasses.fields(rec)
                       if f.name not in ("topic_id", "partition_id")):
                    continue
        out.append(rec)
    return out


def _is_offline(offline: OfflineLogDirs, broker_id: int, topic_id, partition_id: int) -> bool:
    return (topic_id, partition_id) in offline.replicas.get(broker_id, ())
