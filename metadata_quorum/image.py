"""The metadata image: cluster state as of one metadata offset, built only by replaying records.

Immutable: `apply(offset, record)` returns a new image sharing every part that did not change
(copy-on-write per concern, and per topic for partition changes), so brokers and the controller
can hand images across tasks without locks. Replay never raises: a record that does not fit the
image (a change to an unknown topic, a stale broker epoch) is skipped and counted in `skipped` —
an exception in the Raft applier would wedge every controller.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import uuid

from metadata_quorum import records as r

log = logging.getLogger(__name__)

TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4


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

    @property
    def usable(self) -> bool:
        """May lead partitions and count toward placement."""
        return not self.fenced and not self.in_controlled_shutdown


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


@dataclasses.dataclass(frozen=True)
class TopicImage:
    name: str
    topic_id: uuid.UUID
    partitions: dict          # partition id → PartitionState (never mutated once published)


class MetadataImage:
    __slots__ = ("offset", "brokers", "topics", "topic_names", "configs", "next_producer_id",
                 "features", "acls", "scram", "quotas", "skipped")

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

    # -- queries ----------------------------------------------------------------------------------

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicImage | None:
        name = self.topic_names.get(topic_id)
        return self.topics.get(name) if name is not None else None

    def partition(self, topic: str, partition: int) -> PartitionState | None:
        t = self.topics.get(topic)
        return t.partitions.get(partition) if t else None

    def usable_brokers(self) -> list[BrokerRegistration]:
        return sorted((b for b in self.brokers.values() if b.usable), key=lambda b: b.broker_id)

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

    # -- replay -----------------------------------------------------------------------------------

    def apply(self, offset: int, record: r.Record) -> "MetadataImage":
        new = copy.copy(self)
        new.offset = offset
        try:
            handler = _HANDLERS.get(type(record))
            if handler is None or handler(new, record) is False:
                new.skipped += 1
        except Exception:  # noqa: BLE001 - replay must never raise; count and carry on
            log.exception("metadata record at offset %d could not be applied: %r", offset, record)
            new = copy.copy(self)
            new.offset = offset
            new.skipped += 1
        return new

    def apply_all(self, start_offset: int, records: list) -> "MetadataImage":
        img = self
        for i, rec in enumerate(records):
            img = img.apply(start_offset + i, rec)
        return img

    def __copy__(self):
        new = MetadataImage.__new__(MetadataImage)
        for slot in self.__slots__:
            setattr(new, slot, getattr(self, slot))
        return new

    def __getstate__(self):
        return {s: getattr(self, s) for s in self.__slots__}

    def __setstate__(self, state):
        for s in self.__slots__:
            setattr(self, s, state[s])

    # -- snapshots --------------------------------------------------------------------------------

    def to_records(self) -> list[r.Record]:
        """The shortest record list that rebuilds an equal image (a snapshot)."""
        out: list[r.Record] = []
        for name, level in sorted(self.features.items()):
            out.append(r.FeatureLevelRecord(name, level))
        for b in sorted(self.brokers.values(), key=lambda b: b.broker_id):
            out.append(r.RegisterBrokerRecord(b.broker_id, b.incarnation_id, b.broker_epoch, b.host,
                                              b.port, b.rack, b.fenced, b.in_controlled_shutdown,
                                              b.listeners))
        for t in sorted(self.topics.values(), key=lambda t: t.name):
            out.append(r.TopicRecord(t.name, t.topic_id))
            for p in sorted(t.partitions.values(), key=lambda p: p.partition_id):
                out.append(r.PartitionRecord(t.topic_id, p.partition_id, p.replicas, p.isr, p.leader,
                                             p.leader_epoch, p.partition_epoch,
                                             p.removing_replicas, p.adding_replicas,
                                             p.leader_recovery_state, p.elr,
                                             p.last_known_elr))
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
        return out

    @classmethod
    def from_records(cls, records: list[r.Record], offset: int) -> "MetadataImage":
        img = cls()
        for rec in records:
            img = img.apply(offset, rec)
        return img

    def same_state(self, other: "MetadataImage") -> bool:
        return self.to_records() == other.to_records()


# -- handlers: mutate the (already copied) image; return False to skip ---------------------------

def _register_broker(img: MetadataImage, rec: r.RegisterBrokerRecord):
    img.brokers = dict(img.brokers)
    img.brokers[rec.broker_id] = BrokerRegistration(
        rec.broker_id, rec.incarnation_id, rec.broker_epoch, rec.host, rec.port, rec.rack,
        rec.fenced, rec.in_controlled_shutdown, img.offset, tuple(rec.listeners))


def _change_broker(img: MetadataImage, broker_id: int, epoch: int, **changes):
    b = img.brokers.get(broker_id)
    if b is None or b.broker_epoch != epoch:
        return False
    img.brokers = dict(img.brokers)
    img.brokers[broker_id] = dataclasses.replace(b, **changes)


def _unregister_broker(img: MetadataImage, rec: r.UnregisterBrokerRecord):
    b = img.brokers.get(rec.broker_id)
    if b is None or b.broker_epoch != rec.broker_epoch:
        return False
    img.brokers = dict(img.brokers)
    del img.brokers[rec.broker_id]


def _registration_change(img, rec: r.BrokerRegistrationChangeRecord):
    changes = {k: v for k, v in (("fenced", rec.fenced),
                                  ("in_controlled_shutdown", rec.in_controlled_shutdown)) if v is not None}
    return _change_broker(img, rec.broker_id, rec.broker_epoch, **changes)


def _topic(img: MetadataImage, rec: r.TopicRecord):
    if rec.name in img.topics or rec.topic_id in img.topic_names:
        return False
    img.topics = dict(img.topics)
    img.topics[rec.name] = TopicImage(rec.name, rec.topic_id, {})
    img.topic_names = dict(img.topic_names)
    img.topic_names[rec.topic_id] = rec.name


def _put_partition(img: MetadataImage, topic: TopicImage, state: PartitionState):
    parts = dict(topic.partitions)
    parts[state.partition_id] = state
    img.topics = dict(img.topics)
    img.topics[topic.name] = dataclasses.replace(topic, partitions=parts)


def _partition(img: MetadataImage, rec: r.PartitionRecord):
    topic = img.topic_by_id(rec.topic_id)
    if topic is None:
        return False
    _put_partition(img, topic, PartitionState(rec.partition_id, tuple(rec.replicas), tuple(rec.isr),
                                              rec.leader, rec.leader_epoch, rec.partition_epoch,
                                              tuple(rec.removing_replicas),
                                              tuple(rec.adding_replicas),
                                              rec.leader_recovery_state, tuple(rec.elr),
                                              tuple(rec.last_known_elr)))


def _partition_change(img: MetadataImage, rec: r.PartitionChangeRecord):
    topic = img.topic_by_id(rec.topic_id)
    old = topic.partitions.get(rec.partition_id) if topic else None
    if old is None:
        return False
    leader_changed = rec.leader is not None and rec.leader != old.leader
    _put_partition(img, topic, PartitionState(
        old.partition_id,
        tuple(rec.replicas) if rec.replicas is not None else old.replicas,
        tuple(rec.isr) if rec.isr is not None else old.isr,
        rec.leader if rec.leader is not None else old.leader,
        old.leader_epoch + 1 if leader_changed else old.leader_epoch,
        old.partition_epoch + 1,
        _pick(rec.removing_replicas, old.removing_replicas),
        _pick(rec.adding_replicas, old.adding_replicas),
        rec.leader_recovery_state if rec.leader_recovery_state is not None
        else old.leader_recovery_state,
        _pick(rec.elr, old.elr),
        _pick(rec.last_known_elr, old.last_known_elr)))


def _pick(new, old):
    return tuple(new) if new is not None else old


def _remove_topic(img: MetadataImage, rec: r.RemoveTopicRecord):
    name = img.topic_names.get(rec.topic_id)
    if name is None:
        return False
    img.topics = dict(img.topics)
    del img.topics[name]
    img.topic_names = dict(img.topic_names)
    del img.topic_names[rec.topic_id]
    if (TOPIC_RESOURCE, name) in img.configs:
        img.configs = dict(img.configs)
        del img.configs[(TOPIC_RESOURCE, name)]


def _config(img: MetadataImage, rec: r.ConfigRecord):
    key = (rec.resource_type, rec.resource_name)
    entries = dict(img.configs.get(key, {}))
    if rec.value is None:
        entries.pop(rec.name, None)
    else:
        entries[rec.name] = rec.value
    img.configs = dict(img.configs)
    if entries:
        img.configs[key] = entries
    else:
        img.configs.pop(key, None)


def _producer_ids(img: MetadataImage, rec: r.ProducerIdsRecord):
    if rec.next_producer_id <= img.next_producer_id:
        return False
    img.next_producer_id = rec.next_producer_id


def _feature(img: MetadataImage, rec: r.FeatureLevelRecord):
    img.features = dict(img.features)
    img.features[rec.name] = rec.feature_level


def _acl(img: MetadataImage, rec: r.AccessControlEntryRecord):
    img.acls = dict(img.acls)
    img.acls[rec.acl_id] = rec


def _remove_acl(img: MetadataImage, rec: r.RemoveAccessControlEntryRecord):
    if rec.acl_id not in img.acls:
        return False
    img.acls = dict(img.acls)
    del img.acls[rec.acl_id]


def _scram(img: MetadataImage, rec: r.UserScramCredentialRecord):
    img.scram = dict(img.scram)
    img.scram[(rec.name, rec.mechanism)] = rec


def _remove_scram(img: MetadataImage, rec: r.RemoveUserScramCredentialRecord):
    if (rec.name, rec.mechanism) not in img.scram:
        return False
    img.scram = dict(img.scram)
    del img.scram[(rec.name, rec.mechanism)]


def _quota(img: MetadataImage, rec: r.ClientQuotaRecord):
    img.quotas = dict(img.quotas)
    values = dict(img.quotas.get(rec.entity, {}))
    if rec.value is None:
        values.pop(rec.key, None)
    else:
        values[rec.key] = rec.value
    if values:
        img.quotas[rec.entity] = values
    else:
        img.quotas.pop(rec.entity, None)        # an entity's last key removed: the entity is gone


_HANDLERS = {
    r.RegisterBrokerRecord: _register_broker,
    r.UnregisterBrokerRecord: _unregister_broker,
    r.FenceBrokerRecord: lambda img, rec: _change_broker(img, rec.broker_id, rec.broker_epoch, fenced=True),
    r.UnfenceBrokerRecord: lambda img, rec: _change_broker(img, rec.broker_id, rec.broker_epoch, fenced=False),
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
    r.NoOpRecord: lambda img, rec: None,
}
