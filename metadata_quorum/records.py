"""Metadata records: the only way cluster state changes (KIP-500, KIP-631).

Each record is a frozen dataclass with a type id (Kafka's metadata `apiKey` where one exists, so
the numbers are familiar) and a version. On the wire and in the Raft log a record is msgpack:
`[type_id, version, {field: value}]`; topic ids travel as 16 raw bytes. `decode_record` raises
`MetadataRecordError` — and only that — on anything it cannot read.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import ClassVar

import msgpack


class MetadataRecordError(ValueError):
    """Bytes that are not a metadata record this code understands."""


@dataclasses.dataclass(frozen=True)
class Record:
    TYPE: ClassVar[int] = -1
    VERSION: ClassVar[int] = 0


def _record(type_id: int, version: int = 0):
    def wrap(cls):
        cls = dataclasses.dataclass(frozen=True)(cls)
        cls.TYPE = type_id
        cls.VERSION = version
        RECORD_TYPES[type_id] = cls
        _FIELD_NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls))
        _FIELD_SET[cls] = frozenset(_FIELD_NAMES[cls])
        return cls
    return wrap


RECORD_TYPES: dict[int, type] = {}
# Each record type's field names, looked up once: `dataclasses.fields` per record was a quarter of
# a controller's Raft-thread time while it applied a 30,000-partition cluster's changes.
_FIELD_NAMES: dict[type, tuple[str, ...]] = {}     # in declaration order: stable encodings
_FIELD_SET: dict[type, frozenset[str]] = {}


@_record(0)
class RegisterBrokerRecord(Record):
    broker_id: int
    incarnation_id: str
    broker_epoch: int
    host: str
    port: int
    rack: str | None = None
    fenced: bool = True
    in_controlled_shutdown: bool = False
    listeners: tuple = ()       # ((name, host, port, security_protocol), ...) beyond host:port
    # KIP-858: ids (uuid) of the broker's online log directories; () from a broker that named
    # none, or in a log written before JBOD: then every directory counts as online
    log_dirs: tuple = ()


@_record(1)
class UnregisterBrokerRecord(Record):
    broker_id: int
    broker_epoch: int


@_record(2)
class TopicRecord(Record):
    name: str
    topic_id: uuid.UUID


@_record(3)
class PartitionRecord(Record):
    topic_id: uuid.UUID
    partition_id: int
    replicas: tuple
    isr: tuple
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0
    removing_replicas: tuple = ()       # reassignment in progress (KIP-455); empty otherwise
    adding_replicas: tuple = ()
    leader_recovery_state: int = 0      # 0 RECOVERED, 1 RECOVERING (KIP-704)
    elr: tuple = ()                     # eligible leader replicas (KIP-966), see replication_control
    last_known_elr: tuple = ()          # unclean-restarted former last copies (KIP-966)
    # KIP-858: per replica (same order as `replicas`) the id of the log directory holding it;
    # () or a short tuple (records written before JBOD): UNASSIGNED for the rest (image.py)
    directories: tuple = ()


@_record(4)
class ConfigRecord(Record):
    resource_type: int          # Kafka's ConfigResource types: 2 = topic, 4 = broker
    resource_name: str
    name: str
    value: str | None           # None deletes the override


@_record(5)
class PartitionChangeRecord(Record):
    """Only the fields that are not None change; every change bumps partition_epoch."""
    topic_id: uuid.UUID
    partition_id: int
    isr: tuple | None = None
    leader: int | None = None          # a new leader also bumps leader_epoch
    replicas: tuple | None = None
    removing_replicas: tuple | None = None
    adding_replicas: tuple | None = None
    leader_recovery_state: int | None = None
    elr: tuple | None = None
    last_known_elr: tuple | None = None
    directories: tuple | None = None   # KIP-858, parallel to the (new) replicas


@_record(7)
class FenceBrokerRecord(Record):
    broker_id: int
    broker_epoch: int


@_record(8)
class UnfenceBrokerRecord(Record):
    broker_id: int
    broker_epoch: int


@_record(9)
class RemoveTopicRecord(Record):
    topic_id: uuid.UUID


@_record(11)
class UserScramCredentialRecord(Record):
    name: str
    mechanism: int
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


@_record(12)
class FeatureLevelRecord(Record):
    name: str
    feature_level: int


@_record(14)
class ClientQuotaRecord(Record):
    entity: tuple                       # ((entity_type, entity_name|None), ...)
    key: str
    value: float | None


@_record(15)
class ProducerIdsRecord(Record):
    broker_id: int
    broker_epoch: int
    next_producer_id: int


@_record(17)
class BrokerRegistrationChangeRecord(Record):
    broker_id: int
    broker_epoch: int
    fenced: bool | None = None
    in_controlled_shutdown: bool | None = None
    log_dirs: tuple | None = None       # KIP-858: the online log directories now


@_record(18)
class AccessControlEntryRecord(Record):
    acl_id: uuid.UUID
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int


@_record(19)
class RemoveAccessControlEntryRecord(Record):
    acl_id: uuid.UUID


@_record(20)
class NoOpRecord(Record):
    pass


@_record(22)
class RemoveUserScramCredentialRecord(Record):
    name: str
    mechanism: int


# Metadata transactions (KIP-868): an operation too big for one Raft entry is written as several,
# between a Begin and an End; replay holds its records back until the End and drops them on an
# Abort (which a newly active controller writes for a transaction its predecessor left open).

@_record(23)
class BeginTransactionRecord(Record):
    name: str = ""


@_record(24)
class EndTransactionRecord(Record):
    pass


@_record(25)
class AbortTransactionRecord(Record):
    reason: str = ""


# The controller quorum's voter set (KIP-853's VotersRecord, a KRaft control record there): the
# whole set after a change, with each voter's endpoints, so controllers, brokers and a restarted
# or new controller read the same set from the log. `change` is the membership change in flight,
# ("add", node_id, raft "host:port", listener host, listener port) or ("remove", node_id), and
# () once it is complete or aborted; one at a time
# (metadata_quorum/controller/voter_control.py).

@_record(100)
class VotersRecord(Record):
    voters: tuple               # ((node_id, raft "host:port", listener host, listener port), ...)
    change: tuple = ()


_UUID_FIELDS = {"topic_id", "acl_id"}
_UUID_TUPLE_FIELDS = {"log_dirs", "directories"}       # tuples of uuids (KIP-858)
_UUID_ANY = frozenset(_UUID_FIELDS | _UUID_TUPLE_FIELDS)


def _to_wire(value):
    if isinstance(value, uuid.UUID):
        return value.bytes
    if isinstance(value, tuple):
        return [_to_wire(v) for v in value]
    return value


def encode_record(record: Record) -> bytes:
    # msgpack packs tuples as arrays itself: only uuid fields need converting
    fields = {name: getattr(record, name) for name in _FIELD_NAMES[type(record)]}
    for name in _UUID_ANY.intersection(fields):
        fields[name] = _to_wire(fields[name])
    return msgpack.packb([record.TYPE, record.VERSION, fields], use_bin_type=True)


def _from_wire(name: str, value):
    """A uuid field's value from its bytes (arrays already arrive as tuples: use_list=False)."""
    if name in _UUID_FIELDS:
        if not isinstance(value, bytes) or len(value) != 16:
            raise MetadataRecordError(f"{name} is not a 16-byte uuid")
        return uuid.UUID(bytes=value)
    if value is not None:
        if not isinstance(value, tuple) or \
                not all(isinstance(v, bytes) and len(v) == 16 for v in value):
            raise MetadataRecordError(f"{name} is not a list of 16-byte uuids")
        return tuple(uuid.UUID(bytes=v) for v in value)
    return value


def decode_record(data: bytes) -> Record:
    # Every controller decodes every committed record on its Raft thread (30,000 for one
    # broker's controlled shutdown at 30,000 partitions): msgpack builds the tuples, and only
    # uuid fields take a Python call.
    try:
        type_id, version, fields = msgpack.unpackb(data, raw=False, strict_map_key=False,
                                                   use_list=False)
        cls = RECORD_TYPES[type_id]
        if version > cls.VERSION:
            raise MetadataRecordError(f"{cls.__name__} version {version} is newer than ours")
        names = _FIELD_SET[cls]
        kwargs = {k: v for k, v in fields.items() if k in names}
        for k in _UUID_ANY.intersection(kwargs):
            kwargs[k] = _from_wire(k, kwargs[k])
        return cls(**kwargs)
    except MetadataRecordError:
        raise
    except Exception as exc:  # noqa: BLE001 - any malformed input becomes one error type
        raise MetadataRecordError(f"undecodable metadata record: {exc}") from None


def encode_batch(records: list[Record]) -> bytes:
    """Several records proposed atomically as one Raft entry."""
    return msgpack.packb([encode_record(r) for r in records], use_bin_type=True)


def split_batch(data: bytes) -> list[bytes]:
    """A Raft entry's encoded records, each still encoded."""
    try:
        items = msgpack.unpackb(data, raw=False)
    except Exception as exc:  # noqa: BLE001
        raise MetadataRecordError(f"undecodable record batch: {exc}") from None
    if not isinstance(items, list) or not all(isinstance(x, bytes) for x in items):
        raise MetadataRecordError("record batch is not a list of records")
    return items


def decode_batch(data: bytes) -> list[Record]:
    return [decode_record(item) for item in split_batch(data)]


# A Raft entry carries at most this many bytes of records (plus msgpack framing): pysyncobj sends
# an entry at least its appendEntriesBatchSizeBytes long in pieces, and that path labels pieces by
# the wrong length (pieces go missing: "pickle data was truncated"), so no entry may reach it.
MAX_ENTRY_BYTES = 64 * 1024
# One record alone may not exceed this (it cannot be split); the Raft layer sets
# appendEntriesBatchSizeBytes well above it.
MAX_RECORD_BYTES = 1024 * 1024


_ITEM_OVERHEAD = 5          # msgpack's bin header of one record, at most
_LIST_OVERHEAD = 5          # and of the entry's list


class RecordTooLarge(MetadataRecordError):
    """One metadata record is larger than MAX_RECORD_BYTES (e.g. an absurd config value)."""


def encode_entries(records: list[Record], max_entry_bytes: int = MAX_ENTRY_BYTES) -> list[bytes]:
    """Raft entries for `records`, proposed in order. Records that fit in one entry are one
    entry, atomic as a Raft entry is. More become a metadata transaction (KIP-868): the first
    entry opens with a BeginTransactionRecord, the last closes with an EndTransactionRecord,
    and replay applies nothing of it before the End (see image.py)."""
    return [msgpack.packb(items, use_bin_type=True)
            for items, _ in entry_items(records, max_entry_bytes)]


def entry_items(records: list[Record], max_entry_bytes: int = MAX_ENTRY_BYTES
                ) -> list[tuple[list[bytes], list[Record]]]:
    """Each Raft entry for `records` (see encode_entries): its encoded records and the same
    records as objects (a transaction's Begin and End included)."""
    encoded = [encode_record(rec) for rec in records]
    for item in encoded:
        if len(item) > MAX_RECORD_BYTES:
            raise RecordTooLarge(f"a metadata record of {len(item)} bytes is over the "
                                 f"{MAX_RECORD_BYTES}-byte limit")
    if _LIST_OVERHEAD + sum(len(x) + _ITEM_OVERHEAD for x in encoded) <= max_entry_bytes:
        return [(encoded, list(records))]
    begin, end = BeginTransactionRecord(f"{len(records)} records"), EndTransactionRecord()
    items = [encode_record(begin)] + encoded + [encode_record(end)]
    objects = [begin] + list(records) + [end]
    entries, current, size, start = [], [], _LIST_OVERHEAD, 0
    for i, item in enumerate(items):
        if current and size + len(item) + _ITEM_OVERHEAD > max_entry_bytes:
            entries.append((current, objects[start:i]))
            current, size, start = [], _LIST_OVERHEAD, i
        current.append(item)
        size += len(item) + _ITEM_OVERHEAD
    entries.append((current, objects[start:]))
    return entries


# -- fenced entries: a pipelined controller's writes apply only on the state they were computed on

# The active controller computes a command's records against the committed image plus every
# record it proposed that has not committed yet, and proposes the next command without waiting
# (metadata_quorum/pipeline.py). Raft keeps a leader's entries in order, but pysyncobj forwards
# commands still queued when leadership moves to the next leader, which appends them after its
# own: such an entry was computed on a state that may never have happened. So each entry names
# the activation of the controller that wrote it (a random id, committed when it became active)
# and the metadata offset it expects to start at; MetadataLog applies it only if both still
# hold, deterministically on every node, and skips it otherwise. An activation entry (expected
# offset ACTIVATE) always applies and makes its id the current writer. Entries without a fence
# (journals written before fences existed) apply as they always did.

FENCE_TAG = 0
ACTIVATE = -1


def fence_entry(batch: bytes, activation: bytes, expected_offset: int) -> bytes:
    return msgpack.packb([FENCE_TAG, activation, expected_offset, batch], use_bin_type=True)


def unfence_entry(data: bytes) -> tuple[tuple[bytes, int] | None, list[bytes]]:
    """((activation, expected offset) or None for an unfenced entry, its encoded records)."""
    try:
        items = msgpack.unpackb(data, raw=False)
    except Exception as exc:  # noqa: BLE001
        raise MetadataRecordError(f"undecodable record batch: {exc}") from None
    if isinstance(items, list) and len(items) == 4 and items[0] == FENCE_TAG \
            and not isinstance(items[0], bool):
        _, activation, expected, batch = items
        if not isinstance(activation, bytes) or not isinstance(expected, int) \
                or not isinstance(batch, bytes):
            raise MetadataRecordError("malformed entry fence")
        return (activation, expected), split_batch(batch)
    if not isinstance(items, list) or not all(isinstance(x, bytes) for x in items):
        raise MetadataRecordError("record batch is not a list of records")
    return None, items

