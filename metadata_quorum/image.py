"""The metadata image: cluster state as of one metadata offset, built only by replaying records.

Immutable: `apply(offset, record)` returns a new image sharing every part that did not change
(copy-on-write per concern, and per topic for partition changes), so brokers and the controller
can hand images across tasks without locks. Replay never raises: a record that does not fit the
image (a change to an unknown topic, a stale broker epoch) is skipped and counted in `skipped` —
an exception in the Raft applier would wedge every controller.

Records between a BeginTransactionRecord and its EndTransactionRecord (KIP-868: an operation
written as several Raft entries) wait in `pending` and change the image only at the End, all at
once; an AbortTransactionRecord drops them. So an image never shows half of an operation, on a
controller or on a broker, whatever entry boundary it was read at.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import typing
import uuid

from metadata_quorum import records as r

log = logging.getLogger(__name__)

TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4

# Kafka's reserved directory ids (DirectoryId, KIP-858): a replica not (yet) assigned to a
# directory, one whose directory is lost, one of a broker migrating to JBOD. A real directory
# id is random and never one of the first 100.
UNASSIGNED_DIR = uuid.UUID(int=0)
LOST_DIR = uuid.UUID(int=1)
MIGRATING_DIR = uuid.UUID(int=2)


@dataclasses.dataclass(frozen=True)
class BrokerRegistration:
    broker_id: int
    incarnation_id: str
    broker_epoch: int
    host: str
    port: int
    rack: str | None
    fenced: bool
    in_controlled_shutdown: bool
    registered_at_offset: int = -1      # metadata offset of the registration: "caught up" mark
    listeners: tuple = ()               # ((name, host, port, security_protocol), ...)
    log_dirs: tuple = ()                # ids of the online log directories (KIP-858)

    def dir_online(self, dir_id) -> bool:
        """Kafka's DirectoryId.isOnline: an unassigned or migrating replica counts as online,
        a lost one not; a broker that registered no directories (a log from before JBOD) has
        them all online."""
        if dir_id == UNASSIGNED_DIR or dir_id == MIGRATING_DIR:
            return True
        if dir_id == LOST_DIR:
            return False
        return not self.log_dirs or dir_id in self.log_dirs

    @property
    def usable(self) -> bool:
        """May lead partitions and count toward placement."""
        return not self.fenced and not self.in_controlled_shutdown


class Voter(typing.NamedTuple):
    """A controller voter (VotersRecord): its Raft (pysyncobj) address and its Kafka listener."""
    node_id: int
    raft_address: str
    host: str
    port: int


@dataclasses.dataclass(frozen=True)
class PartitionState:
    partition_id: int
    replicas: tuple
    isr: tuple
    leader: int
    leader_epoch: int
    partition_epoch: int
    removing_replicas: tuple = ()
    adding_replicas: tuple = ()
    leader_recovery_state: int = 0
    # KIP-966 eligible leader replicas: out of the ISR yet holding every committed record
    elr: tuple = ()
    # replicas that were the last copies (last ISR member, ELR) when they came back from an
    # unclean shutdown: the partition's last resort once all of them are back
    last_known_elr: tuple = ()
    # KIP-858: the directory of each replica, in `replicas` order (shorter: UNASSIGNED after)
    directories: tuple = ()

    def directory(self, replica: int):
        """The id of the log directory assigned to `replica`'s copy (UNASSIGNED_DIR if none)."""
        try:
            i = self.replicas.index(replica)
        except ValueError:
            return UNASSIGNED_DIR
        return self.directories[i] if i < len(self.directories) else UNASSIGNED_DIR

    @property
    def replication_factor(self) -> int:
        """Copies the partition is meant to have. During a reassignment (KIP-455) `replicas` is
        target + leaving: this is the smaller of the original and target counts, so a move never
        raises the min.insync.replicas cap (an RF-1 partition moving keeps its RF-1 rules)."""
        return len(self.replicas) - max(len(self.adding_replicas), len(self.removing_replicas))


@dataclasses.dataclass(frozen=True)
class TopicImage:
    name: str
    topic_id: uuid.UUID
    partitions: dict          # partition id → PartitionState (never mutated once published)


class MetadataImage:
    __slots__ = ("offset", "brokers", "topics", "topic_names", "configs", "next_producer_id",
                 "features", "acls", "scram", "quotas", "skipped", "pending", "voters",
                 "voter_change")

    def __init__(self):
        self.offset = -1
        self.brokers: dict[int, BrokerRegistration] = {}
        self.topics: dict[str, TopicImage] = {}
        self.topic_names: dict[uuid.UUID, str] = {}
        self.configs: dict[tuple[int, str], dict[str, str]] = {}
        self.next_producer_id = 0
        self.features: dict[str, int] = {}
        self.acls: dict[uuid.UUID, r.AccessControlEntryRecord] = {}
        self.scram: dict[tuple[str, int], r.UserScramCredentialRecord] = {}
        self.quotas: dict[tuple, dict[str, float]] = {}
        self.skipped = 0
        # records of an open metadata transaction (KIP-868), applied at its End; None: none open
        self.pending: tuple | None = None
        # the controller voter set from the last VotersRecord: node id → Voter; None while no
        # membership change was ever made (every node's static controller.quorum.voters holds)
        self.voters: dict | None = None
        self.voter_change: tuple = ()       # the change in flight (VotersRecord.change), or ()

    # -- queries ----------------------------------------------------------------------------------

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicImage | None:
        name = self.topic_names.get(topic_id)
        return self.topics.get(name) if name is not None else None

    def partition(self, topic: str, partition: int) -> PartitionState | None:
        t = self.topics.get(topic)
        return t.partitions.get(partition) if t else None

    def leaderless_counts(self) -> tuple[int, int]:
        """(offline, leaderless) partitions: no leader at all; no leader or a leader whose
        broker is fenced or unregistered (the /metrics gauges of brokers and controllers)."""
        offline = leaderless = 0
        brokers = self.brokers
        for t in self.topics.values():
            for p in t.partitions.values():
                if p.leader < 0:
                    offline += 1
                    leaderless += 1
                else:
                    b = brokers.get(p.leader)
                    if b is None or b.fenced:
                        leaderless += 1
        return offline, leaderless

    def replica_offline(self, p: PartitionState, broker_id: int) -> bool:
        """The copy of `p` on `broker_id` sits in a log directory that broker reported offline
        (Kafka's offline replica; a fenced broker is a different matter)."""
        b = self.brokers.get(broker_id)
        return b is not None and bool(b.log_dirs) and not b.dir_online(p.directory(broker_id))

    def usable_brokers(self) -> list[BrokerRegistration]:
        return sorted((b for b in self.brokers.values() if b.usable), key=lambda b: b.broker_id)

    def usable_ids(self) -> set[int]:
        """The usable brokers' ids, unsorted: what membership tests need (AlterPartition asks
        once per partition, thousands of times per request)."""
        return {b.broker_id for b in self.brokers.values() if b.usable}

    def topic_config(self, topic: str) -> dict[str, str]:
        return self.configs.get((TOPIC_RESOURCE, topic), {})

    def broker_config(self, broker_id: int | None = None) -> dict[str, str]:
        merged = dict(self.configs.get((BROKER_RESOURCE, ""), {}))
        if broker_id is not None:
            merged.update(self.configs.get((BROKER_RESOURCE, str(broker_id)), {}))
        return merged

    def partitions_led_by(self, broker_id: int):
        for t in self.topics.values():
            for p in t.partitions.values():
                if p.leader == broker_id:
                    yield t, p

    @property
    def in_transaction(self) -> bool:
        return self.pending is not None

    # -- replay -----------------------------------------------------------------------------------

    def apply(self, offset: int, record: r.Record) -> "MetadataImage":
        return self.apply_records((offset, rec) for rec in (record,))

    def apply_all(self, start_offset: int, records: list) -> "MetadataImage":
        """Records at consecutive offsets from `start_offset`, replayed as one batch."""
        return self.apply_records((start_offset + i, rec) for i, rec in enumerate(records))

    def apply_records(self, offset_records) -> "MetadataImage":
        """Replay `(offset, record)` pairs into a new image. Each shared dict (brokers, topics,
        a topic's partitions, ...) is copied at most once per call, so a batch of n records
        costs O(n + sizes of the dicts it touches), not O(n x size): a topic of 10,000
        partitions is created in one pass. Parts nothing touched stay shared with this image
        (brokers diff images by identity)."""
        new = copy.copy(self)
        writer = _Writer(new)
        for offset, record in offset_records:
            new.offset = offset
            writer.replay(record)
        new.pending = tuple(writer.pending) if writer.pending is not None else None
        return new

    def __copy__(self):
        new = MetadataImage.__new__(MetadataImage)
        for slot in self.__slots__:
            setattr(new, slot, getattr(self, slot))
        return new

    def __getstate__(self):
        return {s: getattr(self, s) for s in self.__slots__}

    def __setstate__(self, state):
        fresh = MetadataImage()
        for s in self.__slots__:        # a dump written before a slot existed has its default
            setattr(self, s, state.get(s, getattr(fresh, s)))

# -- snapshots --------------------------------------------------------------------------------

    def to_records(self) -> list[r.Record]:
        """The shortest record list that rebuilds an equal image (a snapshot)."""
        out: list[r.Record] = []
        for name, level in sorted(self.features.items()):
            out.append(r.FeatureLevelRecord(name, level))
        for b in sorted(self.brokers.values(), key=lambda b: b.broker_id):
            out.append(r.RegisterBrokerRecord(b.broker_id, b.incarnation_id, b.broker_epoch, b.host,
                                              b.port, b.rack, b.fenced, b.in_controlled_shutdown,
                                              b.listeners, b.log_dirs))
        for t in sorted(self.topics.values(), key=lambda t: t.name):
            out.append(r.TopicRecord(t.name, t.topic_id))
            for p in sorted(t.partitions.values(), key=lambda p: p.partition_id):
                out.append(r.PartitionRecord(t.topic_id, p.partition_id, p.replicas, p.isr, p.leader,
                                             p.leader_epoch, p.partition_epoch,
                                             p.removing_replicas, p.adding_replicas,
                                             p.leader_recovery_state, p.elr,
                                             p.last_known_elr, p.directories))
        for (rtype, rname), entries in sorted(self.configs.items()):
            for k, v in sorted(entries.items()):
                out.append(r.ConfigRecord(rtype, rname, k, v))
        if self.next_producer_id:
            out.append(r.ProducerIdsRecord(-1, -1, self.next_producer_id))
        out.extend(sorted(self.acls.values(), key=lambda a: a.acl_id))
        out.extend(v for _, v in sorted(self.scram.items()))
        for entity, values in sorted(self.quotas.items()):
            for k, v in sorted(values.items()):
                out.append(r.ClientQuotaRecord(entity, k, v))
        if self.voters is not None:
            out.append(r.VotersRecord(tuple(tuple(v) for _, v in sorted(self.voters.items())),
                                      self.voter_change))
        if self.pending is not None:        # a snapshot taken inside a metadata transaction
            out.append(r.BeginTransactionRecord())
            out.extend(self.pending)
        return out

    @classmethod
    def from_records(cls, records: list[r.Record], offset: int) -> "MetadataImage":
        return cls().apply_records((offset, rec) for rec in records)

    def same_state(self, other: "MetadataImage") -> bool:
        return self.to_records() == other.to_records()


# -- replay: a copy-on-write writer over one new image --------------------------------------------

class _Writer:
    """Applies records to `img` (a fresh shallow copy): the first write to a dict copies it, later
    writes in the same batch reuse the copy. Handlers check before they write, so a record that
    does not fit is skipped with the image untouched."""

    def __init__(self, img: MetadataImage):
        self.img = img
        self._fresh: set[str] = set()           # slots whose dict is this batch's own copy
        self._fresh_topics: set[str] = set()    # topics whose partitions dict is ours
        self.pending = list(img.pending) if img.pending is not None else None

    def dict(self, slot: str) -> dict:
        if slot not in self._fresh:
            setattr(self.img, slot, dict(getattr(self.img, slot)))
            self._fresh.add(slot)
        return getattr(self.img, slot)

    def partitions(self, topic: TopicImage) -> dict:
        """The writable partitions dict of `topic` (a new TopicImage on first write)."""
        if topic.name not in self._fresh_topics:
            self.dict("topics")[topic.name] = TopicImage(topic.name, topic.topic_id,
                                                         dict(topic.partitions))
            self._fresh_topics.add(topic.name)
        return self.img.topics[topic.name].partitions

    def new_topic(self, topic: TopicImage) -> None:
        self.dict("topics")[topic.name] = topic
        self._fresh_topics.add(topic.name)

    def drop_topic(self, name: str) -> None:
        del self.dict("topics")[name]
        self._fresh_topics.discard(name)

    def replay(self, record) -> None:
        kind = type(record)
        if kind is r.BeginTransactionRecord:
            if self.pending is not None:
                # only a controller that lost its predecessor's Abort could do this: the older
                # transaction can never end, so its records are dropped as an Abort would
                log.warning("metadata transaction begun inside another at offset %d: the open one "
                            "is dropped", self.img.offset)
                self.img.skipped += 1
            self.pending = []
        elif kind is r.EndTransactionRecord or kind is r.AbortTransactionRecord:
            if self.pending is None:
                self.img.skipped += 1
                return
            records, self.pending = self.pending, None
            if kind is r.EndTransactionRecord:
                for rec in records:             # all at the End's offset: that is when they apply
                    self._apply_one(rec)
        elif self.pending is not None:
            self.pending.append(record)
        else:
            self._apply_one(record)

    def _apply_one(self, record) -> None:
        try:
            handler = _HANDLERS.get(type(record))
            if handler is None or handler(self, record) is False:
                self.img.skipped += 1
        except Exception:  # noqa: BLE001 - replay must never raise; count and carry on
            log.exception("metadata record at offset %d could not be applied: %r",
                          self.img.offset, record)
            self.img.skipped += 1


# -- handlers: check, then write through the writer; return False to skip -----------------------

def _register_broker(w: _Writer, rec: r.RegisterBrokerRecord):
    reg = BrokerRegistration(rec.broker_id, rec.incarnation_id, rec.broker_epoch, rec.host,
                             rec.port, rec.rack, rec.fenced, rec.in_controlled_shutdown,
                             w.img.offset, tuple(rec.listeners), tuple(rec.log_dirs or ()))
    w.dict("brokers")[rec.broker_id] = reg


def _change_broker(w: _Writer, broker_id: int, epoch: int, **changes):
    b = w.img.brokers.get(broker_id)
    if b is None or b.broker_epoch != epoch:
        return False
    w.dict("brokers")[broker_id] = dataclasses.replace(b, **changes)


def _unregister_broker(w: _Writer, rec: r.UnregisterBrokerRecord):
    b = w.img.brokers.get(rec.broker_id)
    if b is None or b.broker_epoch != rec.broker_epoch:
        return False
    del w.dict("brokers")[rec.broker_id]


def _registration_change(w, rec: r.BrokerRegistrationChangeRecord):
    changes = {k: v for k, v in (("fenced", rec.fenced),
                                  ("in_controlled_shutdown", rec.in_controlled_shutdown),
                                  ("log_dirs", rec.log_dirs)) if v is not None}
    return _change_broker(w, rec.broker_id, rec.broker_epoch, **changes)


def _topic(w: _Writer, rec: r.TopicRecord):
    img = w.img
    if rec.name in img.topics or rec.topic_id in img.topic_names:
        return False
    w.new_topic(TopicImage(rec.name, rec.topic_id, {}))
    w.dict("topic_names")[rec.topic_id] = rec.name


def _partition(w: _Writer, rec: r.PartitionRecord):
    topic = w.img.topic_by_id(rec.topic_id)
    if topic is None:
        return False
    state = PartitionState(rec.partition_id, tuple(rec.replicas), tuple(rec.isr), rec.leader,
                           rec.leader_epoch, rec.partition_epoch, tuple(rec.removing_replicas),
                           tuple(rec.adding_replicas), rec.leader_recovery_state, tuple(rec.elr),
                           tuple(rec.last_known_elr), _directories(rec.directories, rec.replicas))
    w.partitions(topic)[state.partition_id] = state


def _partition_change(w: _Writer, rec: r.PartitionChangeRecord):
    topic = w.img.topic_by_id(rec.topic_id)
    old = topic.partitions.get(rec.partition_id) if topic else None
    if old is None:
        return False
    leader_changed = rec.leader is not None and rec.leader != old.leader
    replicas = tuple(rec.replicas) if rec.replicas is not None else old.replicas
    if rec.directories is not None:
        directories = _directories(rec.directories, replicas)
    elif rec.replicas is not None:      # a reassignment: kept replicas keep their directory
        directories = _directories(tuple(old.directory(b) for b in replicas), replicas)
    else:
        directories = old.directories
    state = PartitionState(
        old.partition_id,
        replicas,
        tuple(rec.isr) if rec.isr is not None else old.isr,
        rec.leader if rec.leader is not None else old.leader,
        old.leader_epoch + 1 if leader_changed else old.leader_epoch,
        old.partition_epoch + 1,
        _pick(rec.removing_replicas, old.removing_replicas),
        _pick(rec.adding_replicas, old.adding_replicas),
        rec.leader_recovery_state if rec.leader_recovery_state is not None
        else old.leader_recovery_state,
        _pick(rec.elr, old.elr),
        _pick(rec.last_known_elr, old.last_known_elr),
        directories)
    w.partitions(topic)[state.partition_id] = state


def _pick(new, old):
    return tuple(new) if new is not None else old


def _directories(directories, replicas) -> tuple:
    """A partition's directories as kept in the image: () when none is assigned (every record
    before JBOD, every partition never touched by a directory failure or move), else exactly
    one per replica."""
    dirs = tuple(directories or ())[:len(replicas)]
    if all(d == UNASSIGNED_DIR for d in dirs):
        return ()
    return dirs + (UNASSIGNED_DIR,) * (len(replicas) - len(dirs))


def _remove_topic(w: _Writer, rec: r.RemoveTopicRecord):
    img = w.img
    name = img.topic_names.get(rec.topic_id)
    if name is None:
        return False
    w.drop_topic(name)
    del w.dict("topic_names")[rec.topic_id]
    if (TOPIC_RESOURCE, name) in img.configs:
        del w.dict("configs")[(TOPIC_RESOURCE, name)]


def _config(w: _Writer, rec: r.ConfigRecord):
    key = (rec.resource_type, rec.resource_name)
    entries = dict(w.img.configs.get(key, {}))
    if rec.value is None:
        entries.pop(rec.name, None)
    else:
        entries[rec.name] = rec.value
    configs = w.dict("configs")
    if entries:
        configs[key] = entries
    else:
        configs.pop(key, None)


def _producer_ids(w: _Writer, rec: r.ProducerIdsRecord):
    if rec.next_producer_id <= w.img.next_producer_id:
        return False
    w.img.next_producer_id = rec.next_producer_id


def _feature(w: _Writer, rec: r.FeatureLevelRecord):
    w.dict("features")[rec.name] = rec.feature_level


def _acl(w: _Writer, rec: r.AccessControlEntryRecord):
    w.dict("acls")[rec.acl_id] = rec


def _remove_acl(w: _Writer, rec: r.RemoveAccessControlEntryRecord):
    if rec.acl_id not in w.img.acls:
        return False
    del w.dict("acls")[rec.acl_id]


def _scram(w: _Writer, rec: r.UserScramCredentialRecord):
    w.dict("scram")[(rec.name, rec.mechanism)] = rec


def _remove_scram(w: _Writer, rec: r.RemoveUserScramCredentialRecord):
    if (rec.name, rec.mechanism) not in w.img.scram:
        return False
    del w.dict("scram")[(rec.name, rec.mechanism)]


def _quota(w: _Writer, rec: r.ClientQuotaRecord):
    values = dict(w.img.quotas.get(rec.entity, {}))
    if rec.value is None:
        values.pop(rec.key, None)
    else:
        values[rec.key] = rec.value
    quotas = w.dict("quotas")
    if values:
        quotas[rec.entity] = values
    else:
        quotas.pop(rec.entity, None)        # an entity's last key removed: the entity is gone


def _voters(w: _Writer, rec: r.VotersRecord):
    voters = {}
    for item in rec.voters:
        voter = Voter(*item)
        voters[voter.node_id] = voter
    w.img.voters = voters
    w.img.voter_change = tuple(rec.change)


_HANDLERS = {
    r.VotersRecord: _voters,
    r.RegisterBrokerRecord: _register_broker,
    r.UnregisterBrokerRecord: _unregister_broker,
    r.FenceBrokerRecord: lambda w, rec: _change_broker(w, rec.broker_id, rec.broker_epoch, fenced=True),
    r.UnfenceBrokerRecord: lambda w, rec: _change_broker(w, rec.broker_id, rec.broker_epoch, fenced=False),
    r.BrokerRegistrationChangeRecord: _registration_change,
    r.TopicRecord: _topic,
    r.PartitionRecord: _partition,
    r.PartitionChangeRecord: _partition_change,
    r.RemoveTopicRecord: _remove_topic,
    r.ConfigRecord: _config,
    r.ProducerIdsRecord: _producer_ids,
    r.FeatureLevelRecord: _feature,
    r.AccessControlEntryRecord: _acl,
    r.RemoveAccessControlEntryRecord: _remove_acl,
    r.UserScramCredentialRecord: _scram,
    r.RemoveUserScramCredentialRecord: _remove_scram,
    r.ClientQuotaRecord: _quota,
    r.NoOpRecord: lambda w, rec: None,
}
