"""The consumer protocol's embedded encodings (JoinGroup metadata and SyncGroup assignment).

A classic group's broker treats member metadata and assignments as opaque bytes; consumers agree
on them among themselves. Kafka frames both as an int16 version followed by the
ConsumerProtocolSubscription / ConsumerProtocolAssignment struct at that version. A newer peer
may send a version we do not know: like Java's ConsumerProtocol we read the fields we know (the
schemas only ever append fields) and ignore the rest, so a mixed group keeps working.

Sticky user data (StickyAssignorUserData, Java and librdkafka): the member's previous assignment
as [(topic, [partition])] plus, from V1, the generation that assignment came from. The
cooperative-sticky assignor sends only the generation (an int32) because owned partitions travel
in the subscription itself (version >= 1).
"""

from __future__ import annotations

import dataclasses
import struct

from wire.errors import DecodeError
from wire.messages.consumer_protocol_assignment_generated import ConsumerProtocolAssignment
from wire.messages.consumer_protocol_subscription_generated import ConsumerProtocolSubscription

PROTOCOL_TYPE = "consumer"
SUBSCRIPTION_VERSION = 3       # rack id (KIP-881); owned partitions from v1, generation from v2
ASSIGNMENT_VERSION = 3
NO_GENERATION = -1

TopicPartition = tuple[str, int]


@dataclasses.dataclass
class Subscription:
    """One member's JoinGroup metadata, decoded."""
    topics: list[str]
    user_data: bytes | None = None
    owned_partitions: list[TopicPartition] = dataclasses.field(default_factory=list)
    generation_id: int = NO_GENERATION
    rack_id: str | None = None
    group_instance_id: str | None = None     # from JoinGroup, not from these bytes
    version: int = SUBSCRIPTION_VERSION


@dataclasses.dataclass
class Assignment:
    partitions: list[TopicPartition] = dataclasses.field(default_factory=list)
    user_data: bytes | None = None


def _group(tps) -> dict[str, list[int]]:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in tps:
        by_topic.setdefault(topic, []).append(partition)
    return {t: sorted(ps) for t, ps in sorted(by_topic.items())}


def _version_and_body(data: bytes, latest: int) -> tuple[int, int]:
    if data is None or len(data) < 2:
        raise DecodeError("consumer protocol bytes shorter than their version")
    (version,) = struct.unpack_from(">h", data, 0)
    if version < 0:
        raise DecodeError(f"negative consumer protocol version {version}")
    return version, min(version, latest)


def encode_subscription(sub: Subscription) -> bytes:
    version = sub.version
    msg = ConsumerProtocolSubscription(
        topics=list(sub.topics), user_data=sub.user_data,
        owned_partitions=[ConsumerProtocolSubscription.TopicPartition(topic=t, partitions=ps)
                          for t, ps in _group(sub.owned_partitions).items()],
        generation_id=sub.generation_id, rack_id=sub.rack_id)
    return struct.pack(">h", version) + msg.encode(version)


def decode_subscription(data: bytes) -> Subscription:
    version, readable = _version_and_body(data, ConsumerProtocolSubscription.VALID_VERSIONS[1])
    try:
        msg, _ = ConsumerProtocolSubscription.decode_from(memoryview(data), 2, readable)
    except DecodeError:
        raise
    except Exception as exc:       # a short or garbled peer buffer
        raise DecodeError(f"bad consumer subscription: {exc}") from None
    owned = [(tp.topic, p) for tp in (msg.owned_partitions or []) for p in tp.partitions]
    return Subscription(topics=list(msg.topics), user_data=msg.user_data, owned_partitions=owned,
                        generation_id=msg.generation_id if readable >= 2 else NO_GENERATION,
                        rack_id=msg.rack_id if readable >= 3 else None, version=version)


def encode_assignment(a: Assignment, version: int = ASSIGNMENT_VERSION) -> bytes:
    msg = ConsumerProtocolAssignment(
        assigned_partitions=[ConsumerProtocolAssignment.TopicPartition(topic=t, partitions=ps)
                             for t, ps in _group(a.partitions).items()],
        user_data=a.user_data)
    return struct.pack(">h", version) + msg.encode(version)


def decode_assignment(data: bytes) -> Assignment:
    """An empty buffer is an empty assignment (the broker sends b"" to members the leader left
    out, and after a failed SyncGroup)."""
    if not data:
        return Assignment()
    _, readable = _version_and_body(data, ConsumerProtocolAssignment.VALID_VERSIONS[1])
    try:
        msg, _ = ConsumerProtocolAssignment.decode_from(memoryview(data), 2, readable)
    except DecodeError:
        raise
    except Exception as exc:
        raise DecodeError(f"bad consumer assignment: {exc}") from None
    return Assignment([(tp.topic, p) for tp in msg.assigned_partitions for p in tp.partitions],
                      msg.user_data)


# -- sticky user data --------------------------------------------------------------------------

def _pack_string(out: bytearray, s: str) -> None:
    raw = s.encode()
    out += struct.pack(">h", len(raw)) + raw


def encode_sticky_user_data(owned: list[TopicPartition], generation: int) -> bytes:
    """StickyAssignorUserData V1: [topic string, [int32 partition]] then int32 generation."""
    out = bytearray()
    grouped = _group(owned)
    out += struct.pack(">i", len(grouped))
    for topic, parts in grouped.items():
        _pack_string(out, topic)
        out += struct.pack(">i", len(parts))
        for p in parts:
            out += struct.pack(">i", p)
    out += struct.pack(">i", generation)
    return bytes(out)


def decode_sticky_user_data(data: bytes | None) -> tuple[list[TopicPartition], int]:
    """(previous assignment, generation) from either sticky flavour; a peer's garbage yields
    nothing rather than failing the whole rebalance (stickiness is a preference, not a rule).

    Java and librdkafka write the struct bare; kafka-python 3.x puts an int16 version in front.
    The bare form is tried first and must account for every byte, then the prefixed one."""
    if not data:
        return [], NO_GENERATION
    data = bytes(data)
    if len(data) == 4:                                  # cooperative-sticky: generation only
        return [], struct.unpack(">i", data)[0]
    for start in (0, 2):
        parsed = _parse_sticky(data, start)
        if parsed is not None:
            return parsed
    return [], NO_GENERATION


def _parse_sticky(data: bytes, pos: int) -> tuple[list[TopicPartition], int] | None:
    try:
        (n_topics,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if n_topics < 0 or n_topics > len(data):
            return None
        owned: list[TopicPartition] = []
        for _ in range(n_topics):
            (slen,) = struct.unpack_from(">h", data, pos)
            pos += 2
            if slen < 0 or pos + slen > len(data):
                return None
            topic = data[pos:pos + slen].decode()
            pos += slen
            (n_parts,) = struct.unpack_from(">i", data, pos)
            pos += 4
            if n_parts < 0 or pos + 4 * n_parts > len(data):
                return None
            owned += [(topic, p) for p in struct.unpack_from(f">{n_parts}i", data, pos)]
            pos += 4 * n_parts
        if pos == len(data):                            # V0: no generation
            return owned, NO_GENERATION
        if pos + 4 == len(data):
            return owned, struct.unpack_from(">i", data, pos)[0]
        return None
    except (struct.error, UnicodeDecodeError):
        return None


def encode_generation_user_data(generation: int) -> bytes:
    return struct.pack(">i", generation)
