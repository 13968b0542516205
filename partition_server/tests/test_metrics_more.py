"""Issue #22 metrics beyond the alerting gauges: the request time split and connection counts
(common/request_metrics.py), traffic per topic, coordinator gauges, log flushes, segments and
disk (partition_server/broker_metrics.py), leader elections and commit time on a controller
(metadata_quorum/controller_stats.py)."""

import time
import types
import uuid

import trio

from common.request_metrics import BUCKETS_MS, RequestStats, add_remote_time
from metadata_quorum import records as r
from metadata_quorum.controller_stats import ControllerStats, elections
from metadata_quorum.image import MetadataImage, PartitionState, TopicImage
from partition_server.broker_metrics import (coordinator_families, forget_deleted_topics,
                                              log_families, traffic_families)
from partition_server.image_delta import diff_images
from partition_server.log import LogConfig, PartitionLog
from partition_server.log.segment import FLUSHES
from partition_server.purgatory import Purgatory
from partition_server.replica_manager import ReplicaManager
from partition_server.txn.state import TransactionMetadata, TxnState
from wire.messages.api_keys import ApiKey
from wire.records.batch import build_batch


def _families(fams) -> dict:
    return {name: dict(samples) for name, _, _, samples in fams}


async def test_queue_remote_local_and_send_times_are_split_per_api():
    stats = RequestStats()
    purgatory = Purgatory()

    async def dispatch(ctx, request):
        await trio.sleep(0.02)                                    # local work
        await purgatory.wait_until([("t", 0)], lambda: False, 0.3)   # parked: remote
        return types.SimpleNamespace(error_code=0)
    timed = stats.wrap(dispatch)
    assert timed.request_stats is stats           # what the socket edge records send time in
    # read 50 ms before its dispatch (the socket edge stamps it on time.perf_counter's clock)
    request = types.SimpleNamespace(api_key=ApiKey.PRODUCE, received_at=time.perf_counter() - 0.05)
    await timed(None, request)
    stats.record_send(ApiKey.PRODUCE, 0.003)
    add_remote_time(5.0)                          # outside any request: counted nowhere
    fams = _families(stats.families())

    def mean(part):
        h = fams[f"raftka_request_{part}_time_ms"]
        return float(h['_sum{api="Produce"}']) / h['_count{api="Produce"}']
    assert mean("queue") >= 50
    assert mean("remote") >= 300                  # the purgatory wait (its timeout)
    assert mean("local") >= 20                    # the work, the wait excluded:
    assert abs(mean("local") - (mean("total") - mean("remote"))) < 0.01
    assert mean("send") == 3.0
    hist = fams["raftka_request_remote_time_ms"]
    assert len([k for k in hist if k.startswith("_bucket")]) == len(BUCKETS_MS) + 1


def test_connection_counts_per_listener():
    stats = RequestStats()
    for _ in range(3):
        stats.connection_opened("PLAINTEXT")
    stats.connection_opened("INTERNAL")
    stats.connection_closed("PLAINTEXT")
    fams = _families(stats.families())
    assert fams["raftka_connections"] == {'{listener="INTERNAL"}': 1, '{listener="PLAINTEXT"}': 2}
    assert fams["raftka_connections_created_total"]['{listener="PLAINTEXT"}'] == 3
    assert fams["raftka_connections_closed_total"]['{listener="PLAINTEXT"}'] == 1


def _led(tmp_path, topics=("a", "b")) -> ReplicaManager:
    replicas = ReplicaManager(1, lambda t, p, cfg: PartitionLog(str(tmp_path / f"{t}-{p}"),
                                                                LogConfig()))
    for t in topics:
        replicas.apply_partition(t, None, 0, [1], [1], 1, 1, 1, {}, 1, 0)
    return replicas


def test_bytes_and_messages_in_and_consumer_bytes_out_per_topic(tmp_path):
    replicas = _led(tmp_path)
    data = build_batch([(b"k", b"v" * 50, [], 1_700_000_000_000 + i) for i in range(4)])
    assert replicas.append_records("a", 0, bytearray(data), 1, 1_700_000_000_000).error == 0
    replicas.read("a", 0, 0, 1 << 20, -1, -1, -1, 0, True)              # a consumer
    replicas.read("a", 0, 0, 1 << 20, -1, 7, -1, 0, True)               # a follower: not out
    image = MetadataImage()
    image.topics = {"a": TopicImage("a", uuid.uuid4(), {})}              # "b" was deleted
    replicas.topic_traffic["b"] = [1, 1, 1]
    fams = _families(traffic_families(replicas.topic_traffic, image))
    assert fams["raftka_topic_bytes_in_total"] == {'{topic="a"}': len(data)}
    assert fams["raftka_topic_messages_in_total"] == {'{topic="a"}': 4}
    assert fams["raftka_topic_bytes_out_total"] == {'{topic="a"}': len(data)}
    assert "b" not in replicas.topic_traffic
    replicas.close_all()


def test_a_deleted_topics_counters_go_with_its_partitions_not_at_the_next_scrape():
    """A broker nobody scrapes must not keep a counter per topic it ever served: they go when
    the image change that deletes the topic is applied (a topic created again under the same
    name counts from 0, as Kafka's metrics of a new topic)."""
    def topic(name, topic_id):
        return TopicImage(name, topic_id, {p: PartitionState(p, (1,), (1,), 1, 0, 0)
                                           for p in range(2)})
    kept, deleted, recreated = topic("a", uuid.uuid4()), topic("b", uuid.uuid4()), \
        topic("c", uuid.uuid4())
    old, new = MetadataImage(), MetadataImage()
    old.topics = {"a": kept, "b": deleted, "c": recreated}
    new.topics = {"a": kept, "c": topic("c", uuid.uuid4())}
    traffic = {"a": [1, 1, 1], "b": [2, 2, 2], "c": [3, 3, 3]}
    forget_deleted_topics(traffic, diff_images(old, new).removed, old, new)
    assert traffic == {"a": [1, 1, 1]}
    partly = MetadataImage()                        # a partition moved away: the topic stays
    partly.topics = {"a": TopicImage("a", kept.topic_id, {0: kept.partitions[0]})}
    forget_deleted_topics(traffic, diff_images(new, partly).removed, new, partly)
    assert traffic == {"a": [1, 1, 1]}


def test_log_segments_size_flushes_and_disk(tmp_path):
    replicas = _led(tmp_path)
    data = build_batch([(b"k", b"v" * 10, [], 1_700_000_000_000)])
    replicas.append_records("a", 0, bytearray(data), 1, 1_700_000_000_000)
    flushes_before = sum(FLUSHES.hist[:-1])
    replicas.get("a", 0).log.flush()                                     # one real fsync
    fams = _families(log_families(replicas, str(tmp_path)))
    assert fams["raftka_log_segments"] == {"": 2}                        # one per log
    assert fams["raftka_log_size_bytes"] == {"": len(data)}
    assert fams["raftka_log_flush_time_ms"]["_count"] == flushes_before + 1
    total = fams["raftka_log_dir_total_bytes"][f'{{dir="{tmp_path}"}}']
    assert 0 < fams["raftka_log_dir_free_bytes"][f'{{dir="{tmp_path}"}}'] <= total
    replicas.close_all()


def test_groups_and_transactions_by_state():
    classic = {"g1": types.SimpleNamespace(state=types.SimpleNamespace(value="Stable")),
               "g2": types.SimpleNamespace(state=types.SimpleNamespace(value="Stable")),
               "g3": types.SimpleNamespace(state=types.SimpleNamespace(value="Empty"))}
    groups = types.SimpleNamespace(state=types.SimpleNamespace(groups=classic),
                                   consumer=types.SimpleNamespace(groups={
                                       "k": types.SimpleNamespace(state="Reconciling")}))
    txns = {"a": TransactionMetadata("a", 1, 0, 60000, TxnState.ONGOING),
            "b": TransactionMetadata("b", 2, 0, 60000, TxnState.ONGOING),
            "c": TransactionMetadata("c", 3, 0, 60000, TxnState.COMPLETE_COMMIT)}
    fams = _families(coordinator_families(groups, txns))
    assert fams["raftka_group_coordinator_groups"] == {
        '{type="classic",state="Empty"}': 1, '{type="classic",state="Stable"}': 2,
        '{type="consumer",state="Reconciling"}': 1}
    assert fams["raftka_transaction_coordinator_transactions"] == {
        '{state="CompleteCommit"}': 1, '{state="Ongoing"}': 2}
    # without replays under way (a coordinator without `loads`: not reported)
    assert fams["raftka_coordinator_partitions_loading"] == {}
    groups.loads = types.SimpleNamespace(running={0: object(), 7: object()})
    txn_loads = types.SimpleNamespace(running={})
    fams = _families(coordinator_families(groups, txns, txn_loads))
    assert fams["raftka_coordinator_partitions_loading"] == {
        '{coordinator="group"}': 2, '{coordinator="transaction"}': 0}


def test_leader_elections_clean_unclean_and_what_is_not_one():
    image = MetadataImage()
    tid = uuid.uuid4()
    image.topics = {"t": TopicImage("t", tid, {
        p: PartitionState(p, (1, 2, 3), (1, 2), 1, 0, 0) for p in range(5)})}
    image.topic_names = {tid: "t"}
    changes = [r.PartitionChangeRecord(tid, 0, leader=2),            # in the ISR: clean
               r.PartitionChangeRecord(tid, 1, leader=3),            # not in the ISR: unclean
               r.PartitionChangeRecord(tid, 2, leader=-1),           # offline: no election
               r.PartitionChangeRecord(tid, 3, leader=1),            # same leader
               r.PartitionChangeRecord(tid, 4, isr=(1,)),            # ISR only
               r.PartitionChangeRecord(uuid.uuid4(), 0, leader=1)]   # unknown topic
    assert elections(image, changes) == (1, 1)
    stats = ControllerStats()
    stats.committed(0.004, (1, 1))
    stats.committed(0.2, (2, 0))
    fams = _families(stats.families())
    assert fams["raftka_controller_leader_elections_total"] == {
        '{kind="clean"}': 3, '{kind="unclean"}': 1}
    commit = fams["raftka_controller_commit_time_ms"]
    assert commit['_bucket{le="5"}'] == 1 and commit['_bucket{le="250"}'] == 2
    assert commit["_count"] == 2 and commit["_sum"] == "204.000"


async def test_each_partition_error_of_a_produce_answer_counts():
    from wire.messages.index_generated import RESPONSES
    cls = RESPONSES[ApiKey.PRODUCE]
    answer = cls(responses=[cls.TopicProduceResponse(name="t", partition_responses=[
        cls.PartitionProduceResponse(index=0, error_code=0),
        cls.PartitionProduceResponse(index=1, error_code=19),     # NOT_ENOUGH_REPLICAS
        cls.PartitionProduceResponse(index=2, error_code=19),
        cls.PartitionProduceResponse(index=3, error_code=6)])])   # NOT_LEADER_OR_FOLLOWER
    stats = RequestStats()

    async def dispatch(ctx, request):
        return answer if request.api_key == ApiKey.PRODUCE else None
    await stats.wrap(dispatch)(None, types.SimpleNamespace(api_key=ApiKey.PRODUCE))
    await stats.wrap(dispatch)(None, types.SimpleNamespace(api_key=ApiKey.PRODUCE))
    await stats.wrap(dispatch)(None, types.SimpleNamespace(api_key=ApiKey.METADATA))   # no answer
    fams = _families(stats.families())
    assert fams["raftka_request_errors_total"] == {
        '{api="Produce",error="NOT_LEADER_OR_FOLLOWER"}': 2,
        '{api="Produce",error="NOT_ENOUGH_REPLICAS"}': 4}
    assert fams["raftka_requests_total"] == {'{api="Produce"}': 2, '{api="Metadata"}': 1}
