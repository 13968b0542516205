"""Metadata answers from cached topic pieces (handlers/metadata_cache.py) are byte for byte the
answers built from scratch (the reference below is the handler as it was before the cache), at
every version, after every kind of image change, and per principal and listener."""

import uuid

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from common.network import ClientContext
from common.topic_configs import validate_topic_name
from metadata_quorum import records as r
from metadata_quorum.image import MetadataImage
from partition_server.handlers.cluster import CLUSTER_ID, handle_metadata, live_brokers
from partition_server.handlers.context import HandlerContext
from partition_server.security import authorizer as A
from partition_server.security.endpoints import rewrite
from partition_server.security.enforce import authorize_and_call
from wire.connection import Request
from wire.errors import ErrorCode
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS, RESPONSES

MD, MDQ = RESPONSES[ApiKey.METADATA], REQUESTS[ApiKey.METADATA]


def reference(image, req, broker_id=0):
    """The pre-cache handler (no auto-creation): every struct built per request."""
    brokers = live_brokers(image)
    requested = req.body.topics
    if requested is None or (req.api_version == 0 and not requested):
        names = sorted(image.topics)
    else:
        names = [(t.name if t.name is not None else image.topic_names.get(t.topic_id)) or ""
                 for t in requested]
    topics = []
    for name in names:
        topic = image.topics.get(name)
        if topic is None:
            code = ErrorCode.INVALID_TOPIC_EXCEPTION if validate_topic_name(name) else \
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            topics.append(MD.MetadataResponseTopic(error_code=code, name=name))
            continue
        live = {b.broker_id for b in brokers}
        parts = [MD.MetadataResponsePartition(
            error_code=ErrorCode.NONE if p.leader >= 0 else ErrorCode.LEADER_NOT_AVAILABLE,
            partition_index=p.partition_id, leader_id=p.leader, leader_epoch=p.leader_epoch,
            replica_nodes=list(p.replicas), isr_nodes=list(p.isr),
            offline_replicas=[x for x in p.replicas if x not in live])
            for p in sorted(topic.partitions.values(), key=lambda p: p.partition_id)]
        topics.append(MD.MetadataResponseTopic(error_code=0, name=name, topic_id=topic.topic_id,
                                               is_internal=name.startswith("__"),
                                               partitions=parts))
    controller = broker_id if not brokers else brokers[0].broker_id
    return MD(brokers=[MD.MetadataResponseBroker(node_id=b.broker_id, host=b.host, port=b.port,
                                                 rack=b.rack) for b in brokers],
              cluster_id=CLUSTER_ID, controller_id=controller, topics=topics)


class Cluster:
    """A metadata image changed by records, and a handler context reading it (as the broker:
    what Metadata does not use is None)."""

    def __init__(self, brokers=3):
        self.image = MetadataImage()
        self.authorizer = None
        self.broker_id, self.config = 0, {"auto.create.topics.enable": False}
        self.ids = {}
        self.apply(*[r.RegisterBrokerRecord(b, "inc", 1, "h", 9092 + b, None, False, False,
                                            (("EXTERNAL", "ext", 19092 + b, "PLAINTEXT"),))
                     for b in range(brokers)])
        self.hctx = HandlerContext.of(self)

    def __getattr__(self, name):
        return None

    def apply(self, *records):
        self.image = self.image.apply_all(self.image.offset + 1, list(records))

    def create(self, name, partitions=3, rf=3):
        tid = self.ids[name] = uuid.uuid4()
        self.apply(r.TopicRecord(name, tid), *[
            r.PartitionRecord(tid, p, [(p + i) % 3 for i in range(rf)],
                              [(p + i) % 3 for i in range(rf)], p % 3, 0, 0, (), (), 0, (), ())
            for p in range(partitions)])

    def change(self, name, partition, **kw):
        self.apply(r.PartitionChangeRecord(self.ids[name], partition, **kw))

    def answer(self, version=12, topics=None):
        req = Request(ApiKey.METADATA, version, 1, "t", None, MDQ(topics=topics), 0)
        return trio.run(handle_metadata, self.hctx, req), req


def same_bytes(cluster, version=12, topics=None):
    resp, req = cluster.answer(version, topics)
    want = reference(cluster.image, req).encode_chunks(version, lenient=True)
    assert resp.encode_chunks(version, lenient=True) == want
    return resp


@pytest.fixture
def cluster():
    c = Cluster()
    c.create("a", 4)
    c.create("b", 2)
    c.create("__consumer_offsets", 3)
    c.change("b", 1, leader=-1, isr=[])          # no leader: LEADER_NOT_AVAILABLE
    return c


@pytest.mark.parametrize("version", range(13))
def test_every_version_encodes_like_the_uncached_answer(cluster, version):
    same_bytes(cluster, version)
    same_bytes(cluster, version)                          # second time: from the memo
    asked = [MDQ.MetadataRequestTopic(name=n) for n in ("b", "nope", "bad name!", "a", "b")]
    if version >= 10:
        asked.append(MDQ.MetadataRequestTopic(name=None, topic_id=cluster.ids["a"]))
    same_bytes(cluster, version, asked)
    resp, _ = cluster.answer(version)
    data = resp.encode(version)          # strict encoding too, where the version allows it
    assert MD.decode(data, version) == MD.decode(reference(cluster.image, _).encode(version),
                                                 version)


def test_a_change_rebuilds_only_that_topic_and_never_serves_stale_leaders(cluster):
    first = cluster.answer()[0]
    pieces = {t.name: t for t in first.topics}
    built = cluster.hctx.metadata_cache.built
    cluster.change("a", 2, leader=0, isr=[0])             # leader and ISR change of one partition
    resp = same_bytes(cluster)
    assert cluster.hctx.metadata_cache.built == built + 1
    got = {t.name: t for t in resp.topics}
    assert got["b"] is pieces["b"] and got["a"] is not pieces["a"]
    p2 = got["a"].partitions[2]
    assert (p2.leader_id, list(p2.isr_nodes), p2.leader_epoch) == (0, [0], 1)
    # the old answer object is untouched: what it encoded stays what it was
    assert pieces["a"].partitions[2].leader_id == 2

    cluster.apply(r.FenceBrokerRecord(1, 1))               # offline replicas of every topic
    resp = same_bytes(cluster)
    assert all(1 in p.offline_replicas for t in resp.topics for p in t.partitions
               if 1 in p.replica_nodes)
    cluster.apply(r.UnfenceBrokerRecord(1, 1))
    resp = same_bytes(cluster)
    assert not any(p.offline_replicas for t in resp.topics for p in t.partitions)


def test_deleted_and_recreated_topics_and_new_partitions(cluster):
    same_bytes(cluster)
    old_id = cluster.ids["a"]
    cluster.apply(r.RemoveTopicRecord(old_id))
    assert "a" not in {t.name for t in same_bytes(cluster).topics}
    cluster.create("a", 1)
    resp = same_bytes(cluster)
    a = next(t for t in resp.topics if t.name == "a")
    assert a.topic_id == cluster.ids["a"] != old_id and len(a.partitions) == 1
    cluster.apply(r.PartitionRecord(cluster.ids["a"], 1, [0, 1], [0, 1], 0, 0, 0, (), (), 0,
                                    (), ()))
    a = next(t for t in same_bytes(cluster).topics if t.name == "a")
    assert [p.partition_index for p in a.partitions] == [0, 1]


def test_cached_pieces_are_frozen(cluster):
    piece = cluster.answer()[0].topics[0]
    with pytest.raises(AttributeError):
        piece.error_code = 29
    with pytest.raises(AttributeError):
        piece.partitions = []


def test_each_principal_sees_only_its_topics_and_each_listener_its_addresses(cluster):
    az = A.Authorizer([A.Acl(A.TOPIC, "a", A.LITERAL, "User:alice", "*", A.DESCRIBE, A.ALLOW),
                       A.Acl(A.TOPIC, "b", A.LITERAL, "User:bob", "*", A.DESCRIBE, A.ALLOW)])

    def ask(principal, listener="PLAIN", topics=None):
        ctx = ClientContext("1.2.3.4:5", listener, "1.2.3.4", principal)
        req = Request(ApiKey.METADATA, 12, 1, "t", None, MDQ(topics=topics), 0)
        resp = trio.run(authorize_and_call, az, ctx, req,
                        lambda q: handle_metadata(cluster.hctx, q))
        if listener != "PLAIN":
            rewrite(cluster.image, listener, ApiKey.METADATA, resp)
        return MD.decode(resp.encode(12), 12)

    for _ in range(2):                   # the second round is served from the cache
        assert [t.name for t in ask("User:alice").topics] == ["a"]
        assert [t.name for t in ask("User:bob", "EXTERNAL").topics] == ["b"]
        assert [t.name for t in ask("User:eve").topics] == []
        named = ask("User:bob", topics=[MDQ.MetadataRequestTopic(name="a"),
                                        MDQ.MetadataRequestTopic(name="b")])
        assert {t.name: t.error_code for t in named.topics} == {"a": 29, "b": 0}
    assert {(b.host, b.port) for b in ask("User:bob", "EXTERNAL").brokers} == \
        {("ext", 19092 + b) for b in range(3)}
    assert {(b.host, b.port) for b in ask("User:alice").brokers} == \
        {("h", 9092 + b) for b in range(3)}
    # nothing the filters did leaked into the shared pieces
    same_bytes(cluster)


ops = st.lists(st.tuples(st.sampled_from(["leader", "isr", "fence", "unfence", "delete",
                                          "create", "grow", "ask"]),
                         st.integers(0, 5), st.integers(-1, 2)), max_size=25)


@settings(max_examples=60, deadline=None)
@given(ops)
def test_random_changes_never_serve_a_stale_answer(steps):
    c = Cluster()
    for i in range(3):
        c.create(f"t{i}", 3)
    fenced = set()
    for op, k, b in steps:
        name = f"t{k % 4}"
        if op in ("leader", "isr", "grow", "delete") and name not in c.ids:
            op = "create"
        if op == "leader":
            c.change(name, k % 3, leader=b)
        elif op == "isr":
            c.change(name, k % 3, isr=[x for x in range(3) if x != b])
        elif op == "fence" and b >= 0 and b not in fenced:
            c.apply(r.FenceBrokerRecord(b, 1))
            fenced.add(b)
        elif op == "unfence" and b in fenced:
            c.apply(r.UnfenceBrokerRecord(b, 1))
            fenced.discard(b)
        elif op == "delete":
            c.apply(r.RemoveTopicRecord(c.ids.pop(name)))
        elif op == "create" and name not in c.ids:
            c.create(name, k % 3 + 1)
        elif op == "grow":
            n = len(c.image.topics[name].partitions)
            c.apply(r.PartitionRecord(c.ids[name], n, [0], [0], 0, 0, 0, (), (), 0, (), ()))
        elif op == "ask":
            same_bytes(c, version=k + 7, topics=[MDQ.MetadataRequestTopic(name=name)])
        same_bytes(c, version=(k * 3) % 13)
