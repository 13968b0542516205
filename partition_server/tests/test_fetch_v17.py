"""Fetch v13-17 (what lets kafka-python infer Kafka 3.9): topics named by id, ReplicaState (v15),
KIP-951 leader endpoints (v16) — answered by the real handler over real logs, and the answer
encoded and decoded again at v17 by the generated codec; ACLs (by topic name) applied to it."""

import types
import uuid

import trio

from common.network import ClientContext

from partition_server.fetch_session import FetchSessionCache
from partition_server.handlers.fetch import handle_fetch
from partition_server.handlers.fetch_follower import close_session
from partition_server.log import LogConfig, PartitionLog
from partition_server.purgatory import Purgatory
from partition_server.replica_manager import ReplicaManager
from partition_server.replication.throttle import ReplicationQuotas
from partition_server.security import authorizer as A
from partition_server.security.endpoints import rewrite
from partition_server.security.enforce import authorize_and_call
from wire.errors import ErrorCode
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS, RESPONSES
from wire.records.batch import build_batch, decode_batch

TOPIC_ID, UNKNOWN_ID = uuid.uuid4(), uuid.uuid4()
T0 = 1_700_000_000_000


class Broker:
    """What handle_fetch reads: broker 0 leads t-0, broker 1 leads t-1."""

    def __init__(self, tmp_path):
        def opener(topic, partition, cfg):
            return PartitionLog(str(tmp_path / f"{topic}-{partition}"), LogConfig())
        self.purgatory = Purgatory()
        self.replicas = ReplicaManager(0, opener)
        self.fetch_sessions = FetchSessionCache(on_close=close_session)
        self.replication_quotas = ReplicationQuotas(0)
        self.config = {}                    # Kafka's defaults (handlers/fetch.py fetch_limits)
        endpoint = types.SimpleNamespace(broker_id=1, host="127.0.0.1", port=9193, rack=None,
                                         listeners=[("PLAINTEXT", "127.0.0.1", 9193),
                                                    ("SSL", "127.0.0.2", 9194)])
        self.image = types.SimpleNamespace(
            topics={"t": object()}, topic_names={TOPIC_ID: "t"}, brokers={1: endpoint},
            partition=lambda topic, p: object() if topic == "t" and p in (0, 1) else None)
        self.replicas.apply_partition("t", TOPIC_ID, 0, [0], [0], 0, 3, 1, {}, 1, 0)
        self.replicas.apply_partition("t", TOPIC_ID, 1, [0, 1], [0, 1], 1, 4, 1, {}, 1, 0)
        rows = [(None, b"v%d" % i, [], T0) for i in range(3)]
        assert self.replicas.append_records("t", 0, build_batch(rows), -1, T0).error == 0


def fetch_v17(topics):
    cls = REQUESTS[ApiKey.FETCH]
    body = cls(replica_state=cls.ReplicaState(replica_id=-1, replica_epoch=-1),
               max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
               session_id=0, session_epoch=-1, rack_id="", forgotten_topics_data=[],
               topics=[cls.FetchTopic(topic_id=tid, partitions=[cls.FetchPartition(
                   partition=p, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                   log_start_offset=-1, partition_max_bytes=1 << 20) for p in parts])
                   for tid, parts in topics])
    return types.SimpleNamespace(body=body, api_version=17, api_key=ApiKey.FETCH)


def wire_v17(resp):
    """The response as a client decodes it: records are file slices, written out as the
    connection would."""
    data = b"".join(c if isinstance(c, bytes) else c.read() for c in resp.encode_chunks(17))
    return RESPONSES[ApiKey.FETCH].decode(data, 17)


async def test_fetch_v17_by_topic_id_with_leader_endpoints(tmp_path):
    b = Broker(tmp_path)
    resp = await handle_fetch(b, fetch_v17([(TOPIC_ID, [0, 1]), (UNKNOWN_ID, [0])]))
    again = wire_v17(resp)
    got = {(t.topic_id, p.partition_index): p for t in again.responses for p in t.partitions}
    led = got[(TOPIC_ID, 0)]
    assert (led.error_code, led.high_watermark) == (ErrorCode.NONE, 3)
    assert [r.value for r in decode_batch(bytes(led.records)).records] == [b"v0", b"v1", b"v2"]
    moved = got[(TOPIC_ID, 1)]
    assert moved.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert (moved.current_leader.leader_id, moved.current_leader.leader_epoch) == (1, 4)
    assert [(n.node_id, n.host, n.port) for n in again.node_endpoints] == [(1, "127.0.0.1", 9193)]
    assert got[(UNKNOWN_ID, 0)].error_code == ErrorCode.UNKNOWN_TOPIC_ID
    # a client on another listener is sent to the leader's address on that listener
    rewrite(b.image, "SSL", ApiKey.FETCH, resp)
    assert [(n.host, n.port) for n in resp.node_endpoints] == [("127.0.0.2", 9194)]


def test_read_acls_apply_to_topics_named_by_id(tmp_path):
    b = Broker(tmp_path)
    az = A.Authorizer([A.Acl(A.TOPIC, "t", A.LITERAL, "User:alice", "*", A.READ, A.ALLOW)])

    def fetch_as(principal):
        ctx = ClientContext("1.2.3.4:5", "PLAIN", "1.2.3.4", principal)
        resp = trio.run(authorize_and_call, az, ctx, fetch_v17([(TOPIC_ID, [0])]),
                        lambda q: handle_fetch(b, q), b.image.topic_names)
        [topic] = wire_v17(resp).responses
        return topic.topic_id, topic.partitions[0]

    topic_id, allowed = fetch_as("User:alice")
    assert (topic_id, allowed.error_code, allowed.high_watermark) == (TOPIC_ID, 0, 3)
    topic_id, denied = fetch_as("User:bob")
    assert (topic_id, denied.error_code) == (TOPIC_ID, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    assert denied.records == b""            # empty, not null: librdkafka refuses a null set
