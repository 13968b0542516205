"""Metadata answers built once per topic change, not once per request (issue 17).

An all-topic Metadata request used to build a struct per partition of the cluster and encode
each of them again on every request: O(partitions) per request, ~0.2 s of the event loop at
30,000 partitions, during which the broker serves nothing else. Here a topic's answer piece is
built once and kept with the `TopicImage` it came from; the metadata image is copy-on-write
(metadata_quorum/image.py), so a topic that did not change keeps the same `TopicImage` object
and its piece is reused, while any change to one of its partitions (leader, ISR, replicas, a
new partition) gives a new `TopicImage` and so a new piece. The other input of a piece is the
set of live (unfenced) brokers with their online log directories, which decides
`offline_replicas` (a fenced broker's replicas, and those in a directory their broker reported
offline, KIP-858); it is part of the key.

Pieces also keep their wire encoding per (version, lenient): `MetadataAnswer` writes them as
bytes into the response instead of encoding every partition again. What is not in a piece is
built per request as before: the broker list (rewritten per listener by security/endpoints.py),
error entries for unknown topics, the selection and order of topics. Authorization
(security/enforce.py) filters the answer's topic list afterwards and never changes a piece.

A piece is shared by every answer that contains it, so it is frozen once built: setting one of
its fields raises (its partition structs are shared too; nothing changes them).
"""

from __future__ import annotations

import struct

from wire.errors import ErrorCode
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import RESPONSES
from wire.messages.runtime import EncodeError
from wire.primitives import uvarint_bytes

_Response = RESPONSES[ApiKey.METADATA]
_Topic = _Response.MetadataResponseTopic
_Partition = _Response.MetadataResponsePartition
_INT32 = struct.Struct(">i")


class CachedTopic(_Topic):
    """A MetadataResponseTopic shared between answers: frozen, with its encodings memoized."""
    __slots__ = ("_wire",)

    def __setattr__(self, name, value):
        if getattr(self, "_wire", None) is not None:
            raise AttributeError(f"a cached Metadata topic is shared between answers: "
                                 f"build a new MetadataResponseTopic to change {name}")
        object.__setattr__(self, name, value)

    @classmethod
    def frozen(cls, **fields) -> "CachedTopic":
        """Built without going through __setattr__ (a field at a time in Python would cost
        more than the rest of building a topic of one partition)."""
        self = cls.__new__(cls)
        for f in cls.FIELDS:
            object.__setattr__(self, f.name, fields.pop(f.name) if f.name in fields
                               else f.make_default())
        if fields:
            raise TypeError(f"{cls.__name__} has no field(s) {sorted(fields)}")
        object.__setattr__(self, "_unknown_tagged", None)
        object.__setattr__(self, "_wire", {})
        return self

    def encoded(self, version: int, flexible: bool, lenient: bool) -> bytes:
        key = (version, lenient)
        data = self._wire.get(key)
        if data is None:
            out = bytearray()
            _Topic._codec(version, flexible, lenient)[0](self, out, None)
            data = self._wire[key] = bytes(out)
        return data


class TopicPieces(tuple):
    """The pieces of an all-topic answer, in name order, with their joined encodings memoized:
    an unfiltered all-topic answer is then written as one bytes object. A tuple, so sharing it
    between answers is safe (authorization filters into a new list)."""

    def encoded(self, version: int, flexible: bool, lenient: bool) -> bytes:
        wire = self.__dict__.setdefault("wire", {})
        data = wire.get((version, lenient))
        if data is None:
            data = wire[(version, lenient)] = b"".join(
                t.encoded(version, flexible, lenient) for t in self)
        return data


class Live(frozenset):
    """The ids of the live brokers, and `registrations` of those that name their online log
    directories (so that a replica in an offline one is listed offline, as Kafka does)."""
    registrations: dict

    def offline(self, p) -> tuple:
        """`p`'s replicas that are offline: broker not live, or directory offline."""
        regs = self.registrations
        return tuple(r for r in p.replicas if r not in self or (
            p.directories and r in regs and not regs[r].dir_online(p.directory(r)))) or ()


def topic_answer(topic, live: Live) -> CachedTopic:
    """The answer piece for one topic of the image (`topic`: a TopicImage)."""
    parts = [_Partition(
        error_code=ErrorCode.NONE if p.leader >= 0 else ErrorCode.LEADER_NOT_AVAILABLE,
        partition_index=p.partition_id, leader_id=p.leader, leader_epoch=p.leader_epoch,
        replica_nodes=p.replicas, isr_nodes=p.isr,      # the image's tuples: shared, immutable
        offline_replicas=live.offline(p))
        for p in sorted(topic.partitions.values(), key=lambda p: p.partition_id)]
    return CachedTopic.frozen(error_code=0, name=topic.name, topic_id=topic.topic_id,
                              is_internal=topic.name.startswith("__"), partitions=parts)


class MetadataCache:
    """One broker's pieces: topic name → (TopicImage, live brokers, piece). A piece is served
    only for the very TopicImage object and the same live set it was built from."""

    def __init__(self):
        self._pieces: dict[str, tuple] = {}
        self._names: tuple = (None, [])       # (image.topics dict, its names sorted)
        self._live: Live = self._make_live([])
        self._all: tuple = (None, None, TopicPieces())   # (image.topics, live, pieces)
        self.built = 0                        # pieces built (tests, bench)

    def sorted_names(self, image) -> list[str]:
        """`sorted(image.topics)`, sorted again only when the topics dict changed."""
        if self._names[0] is not image.topics:
            self._names = (image.topics, sorted(image.topics))
        return self._names[1]

    @staticmethod
    def _make_live(brokers) -> Live:
        live = Live(b.broker_id for b in brokers)
        live.registrations = {b.broker_id: b for b in brokers if b.log_dirs}
        return live

    def live(self, brokers) -> Live:
        """The live set of these (unfenced) BrokerRegistrations, the same object while neither
        it nor their log directories change (so keys compare fast)."""
        brokers = list(brokers)
        ids = frozenset(b.broker_id for b in brokers)
        dirs = {b.broker_id: b.log_dirs for b in brokers if b.log_dirs}
        if ids != self._live or dirs != {i: b.log_dirs for i, b in
                                         self._live.registrations.items()}:
            self._live = self._make_live(brokers)
        return self._live

    def topic(self, image, topic, live: frozenset) -> CachedTopic:
        hit = self._pieces.get(topic.name)
        if hit is not None and hit[0] is topic and hit[1] is live:
            return hit[2]
        piece = topic_answer(topic, live)
        self.built += 1
        self._pieces[topic.name] = (topic, live, piece)
        if len(self._pieces) > 2 * len(image.topics) + 64:
            # deleted topics: drop their pieces (rarely: amortized over many lookups)
            self._pieces = {n: v for n, v in self._pieces.items() if n in image.topics}
        return piece


    def all_topics(self, image, live: frozenset) -> TopicPieces:
        """Every topic's piece in name order; rebuilt (from the per-topic pieces) when the
        image's topics dict or the live set changed."""
        topics, was_live, pieces = self._all
        if topics is image.topics and was_live is live:
            return pieces
        pieces = TopicPieces(self.topic(image, image.topics[n], live)
                             for n in self.sorted_names(image))
        self._all = (image.topics, live, pieces)
        return pieces


def _tail_size(version: int, flexible: bool) -> int | None:
    """Bytes after the topics array in a MetadataResponse at `version` (fixed-size fields and
    an empty tagged-field section); None if the schema has anything else there."""
    fields = _Response.FIELDS
    after = [f for f in fields[[f.name for f in fields].index("topics") + 1:]
             if f.present(version)]
    if any(f.type != "int32" or f.is_tagged(version) for f in after):
        return None
    if flexible and any(f.is_tagged(version) for f in fields if f.present(version)):
        return None
    return 4 * len(after) + (1 if flexible else 0)


class MetadataAnswer(_Response):
    """A MetadataResponse whose cached topics are written from their memoized bytes: the rest
    of the message is encoded as usual with an empty topic list, and the topics array is put in
    its place. Same bytes as a MetadataResponse with the same fields (tested per version)."""
    __slots__ = ()

    def encode_into(self, out: bytearray, version: int, opaque: list | None = None,
                    lenient: bool = False) -> None:
        flexible = self.is_flexible(version)
        tail = _tail_size(version, flexible) if self.check_version(version) else None
        if tail is None or self._unknown_tagged:
            return self._plain().encode_into(out, version, opaque, lenient)
        topics = self.topics
        object.__setattr__(self, "topics", [])
        try:
            super().encode_into(out, version, opaque, lenient)
        finally:
            object.__setattr__(self, "topics", topics)
        empty = 1 if flexible else 4
        cut = len(out) - tail - empty
        suffix = bytes(out[cut + empty:])
        del out[cut:]
        out += uvarint_bytes(len(topics) + 1) if flexible else _INT32.pack(len(topics))
        if type(topics) is TopicPieces:
            out += topics.encoded(version, flexible, lenient)
            out += suffix
            return
        enc = None
        for t in topics:
            if type(t) is CachedTopic:
                out += t.encoded(version, flexible, lenient)
                continue
            if enc is None:
                enc = _Topic._codec(version, flexible, lenient)[0]
            try:
                enc(t, out, opaque)
            except (struct.error, TypeError, AttributeError, UnicodeEncodeError,
                    OverflowError) as exc:
                raise EncodeError(f"{self.NAME} v{version}: {exc}") from None
        out += suffix

    def _plain(self):
        return _Response(**{f.name: getattr(self, f.name) for f in self.FIELDS})
