"""Fetch v13-17 (what lets kafka-python infer Kafka 3.9): topics named by id, ReplicaState (v15),
KIP-951 leader endpoints (v16) — answered by the real handler over real logs, and the answer
encoded and decoded again at v17 by the generated codec."""

import types
import uuid

from partition_server.fetch_session import FetchSessionCache
from partition_server.handlers.fetch import handle_fetch
from partition_server.handlers.fetch_follower import close_session
from partition_server.log import LogConfig, PartitionLog
from partition_server.purgatory import Purgatory
from partition_server.replica_manager import ReplicaManager
from partition_server.replication.throttle import ReplicationQuotas
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
        endpoint = types.SimpleNamespace(broker_id=1, host="127.0.0.1", port=9193, rack=None)
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
    return types.SimpleNamespace(body=body, api_version=17)


async def test_fetch_v17_by_topic_id_with_leader_endpoints(tmp_path):
    b = Broker(tmp_path)
    resp = await handle_fetch(b, fetch_v17([(TOPIC_ID, [0, 1]), (UNKNOWN_ID, [0])]))
    # the wire bytes: records are file slices, written out as the connection would
    wire = b"".join(c if isinstance(c, bytes) else c.read()
                    for c in resp.encode_chunks(17))
    again = RESPONSES[ApiKey.FETCH].decode(wire, 17)
    got = {(t.topic_id, p.partition_index): p for t in again.responses for p in t.partitions}
    led = got[(TOPIC_ID, 0)]
    assert (led.error_code, led.high_watermark) == (ErrorCode.NONE, 3)
    assert [r.value for r in decode_batch(bytes(led.records)).records] == [b"v0", b"v1", b"v2"]
    moved = got[(TOPIC_ID, 1)]
    assert moved.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert (moved.current_leader.leader_id, moved.current_leader.leader_epoch) == (1, 4)
    assert [(n.node_id, n.host, n.port) for n in again.node_endpoints] == [(1, "127.0.0.1", 9193)]
    assert got[(UNKNOWN_ID, 0)].error_code == ErrorCode.UNKNOWN_TOPIC_ID
