"""Replication throttles (replication/throttle.py, KIP-73): config parsing and validation, the
windowed rate holding its bound on a virtual clock, Kafka's "only throttled replicas out of the
ISR are held back", and the wiring into the follower's fetcher and the leader's fetch answer."""

import types
import uuid

from common.clock import steady_ms
from common.topic_configs import LONG_MAX, throttled_replicas
from metadata_quorum.controller.config_control import SET, incremental_alter
from metadata_quorum.image import BROKER_RESOURCE, TOPIC_RESOURCE, MetadataImage
from metadata_quorum import records as r
from partition_server.handlers.fetch_follower import leader_throttle
from partition_server.log.partition_log import PartitionLog
from partition_server.quotas import WindowConfig
from partition_server.replica_manager import ReplicaManager
from partition_server.replication.fetcher import FetcherManager
from partition_server.replication.throttle import (ALL, ReplicationQuota, ReplicationQuotas,
                                                   parse_rate, parse_throttled_replicas,
                                                   throttled_partitions)
from wire.errors import ErrorCode
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import RESPONSES
from wire.records.batch import build_batch


# -- configs --------------------------------------------------------------------------------------

def test_throttled_replicas_are_parsed_for_this_broker_only():
    assert parse_throttled_replicas("*", 3) == ALL
    assert parse_throttled_replicas(" 0:1, 1:2 ,2:1,", 1) == {0, 2}
    assert parse_throttled_replicas("0:1,1:2", 7) == frozenset()
    assert parse_throttled_replicas("", 1) == frozenset()
    configs = {"a": {"leader.replication.throttled.replicas": "0:1,3:1"},
               "b": {"leader.replication.throttled.replicas": "0:2"},
               "c": {"follower.replication.throttled.replicas": "*"}}
    assert throttled_partitions(configs, "leader.replication.throttled.replicas", 1) == \
        {"a": {0, 3}}
    assert throttled_partitions(configs, "follower.replication.throttled.replicas", 9) == \
        {"c": ALL}


def test_rates_and_replica_lists_are_validated_as_kafka_does():
    assert throttled_replicas("*") is None and throttled_replicas("") is None
    assert throttled_replicas("0:101,1:102") is None
    assert "literal '*'" in throttled_replicas("0-101")
    assert throttled_replicas("0:1,x") is not None
    assert parse_rate(str(LONG_MAX)) is None and parse_rate("1000") == 1000.0

    image = MetadataImage().apply(0, r.TopicRecord("t", uuid.uuid4()))
    records, code, msg = incremental_alter(image, BROKER_RESOURCE, "",
                                           [("leader.replication.throttled.rate", SET, "-5")])
    assert (records, code) == ([], ErrorCode.INVALID_CONFIG)
    assert msg.startswith("leader.replication.throttled.rate: must be >= 0")
    records, code, msg = incremental_alter(image, BROKER_RESOURCE, "",
                                           [("follower.replication.throttled.rate", SET, "fast")])
    assert code == ErrorCode.INVALID_CONFIG and "must be an integer" in msg
    records, code, msg = incremental_alter(
        image, TOPIC_RESOURCE, "t", [("follower.replication.throttled.replicas", SET, "0:a")])
    assert code == ErrorCode.INVALID_CONFIG and "[partitionId]:[brokerId]" in msg
    records, code, _ = incremental_alter(
        image, TOPIC_RESOURCE, "t", [("leader.replication.throttled.replicas", SET, "0:1,1:2")])
    assert code == ErrorCode.NONE and len(records) == 1
    records, code, _ = incremental_alter(image, BROKER_RESOURCE, "",
                                         [("leader.replication.throttled.rate", SET, "1048576")])
    assert code == ErrorCode.NONE and len(records) == 1


def test_quotas_follow_the_image_configs_and_fall_back_to_the_static_rate():
    q = ReplicationQuotas(2, static_rates=(None, 5000.0))
    configs = {(TOPIC_RESOURCE, "t"): {"leader.replication.throttled.replicas": "0:2,1:3",
                                       "follower.replication.throttled.replicas": "*"},
               (BROKER_RESOURCE, ""): {"leader.replication.throttled.rate": "1000"}}
    q.update(configs, {"leader.replication.throttled.rate": "1000"}, TOPIC_RESOURCE)
    assert q.leader.bound == 1000.0 and q.follower.bound == 5000.0
    assert q.leader.is_throttled("t", 0) and not q.leader.is_throttled("t", 1)
    assert q.follower.is_throttled("t", 7) and not q.follower.is_throttled("u", 0)
    q.update({}, {}, TOPIC_RESOURCE)          # configs removed: nothing throttled
    assert not q.leader.is_throttled("t", 0) and q.leader.bound is None


# -- the rate --------------------------------------------------------------------------------------

def _copy(quota: ReplicationQuota, seconds: float, chunk: int, step_ms: int = 50):
    """A replica copying in fetches of `chunk` bytes every `step_ms` when not held back, on a
    virtual clock; returns bytes copied by each second."""
    copied, per_second, now = 0, [], 0
    while now < seconds * 1000:
        if not quota.should_throttle("t", 0, False, now):
            quota.record(chunk, now)
            copied += chunk
        now += step_ms
        if now % 1000 == 0:
            per_second.append(copied)
    return per_second


def test_the_bound_holds_evenly_after_the_initial_burst():
    bound, chunk = 200_000.0, 64 * 1024
    quota = ReplicationQuota(WindowConfig(11, 1000))
    quota.configure(bound, {"t": ALL})
    by_second = _copy(quota, 60, chunk)
    # an idle throttle's credit (num x size x bound) passes at the copier's speed (1.3 MB/s
    # here), then the bound holds
    assert by_second[0] > 5 * bound and by_second[2] >= 11 * bound
    for start, end in ((14, 60), (20, 33), (40, 45)):           # any span, not just long ones
        rate = (by_second[end - 1] - by_second[start - 1]) / (end - start)
        assert abs(rate - bound) / bound < 0.10, (start, end, rate)
    assert by_second[59] <= bound * (60 + 11) + chunk


def test_a_new_bound_starts_with_fresh_credit():
    quota = ReplicationQuota(WindowConfig(2, 1000))
    quota.configure(None, {"t": ALL})
    quota.record(10**9, 0)                       # sent while unlimited: owes nothing
    quota.configure(1000.0, {"t": ALL})
    assert not quota.is_quota_exceeded(1)
    quota.record(2500, 1)
    assert quota.is_quota_exceeded(2)
    assert not quota.is_quota_exceeded(600)      # 0.6 s refilled 600 of the 500 owed
    assert quota.recorded == 10**9 + 2500


def test_unlimited_in_sync_and_unlisted_replicas_are_never_held_back():
    quota = ReplicationQuota()
    quota.configure(None, {"t": ALL})
    quota.record(10**9, 0)
    assert not quota.should_throttle("t", 0, False, 10)            # no bound
    quota.configure(1.0, {"t": frozenset({0})})
    quota.record(100, 10)
    assert quota.is_quota_exceeded(10)
    assert quota.should_throttle("t", 0, False, 10)
    assert not quota.should_throttle("t", 0, True, 10)             # in the ISR
    assert not quota.should_throttle("t", 1, False, 10)            # not listed
    assert not quota.should_throttle("u", 0, False, 10)


# -- wiring: the follower's fetcher and the leader's answer ----------------------------------------

def _replicas(tmp_path, broker_id, isr, leader):
    plog = PartitionLog(str(tmp_path / f"b{broker_id}" / "t-0"))
    replicas = ReplicaManager(broker_id, lambda topic, partition, config: plog)
    replicas.apply_partition("t", uuid.uuid4(), 0, [0, 1], isr, leader, 1, 1, {}, 1, 0)
    return replicas, plog


def _exceeded(quota: ReplicationQuota, now_ms: float = 0) -> None:
    quota.configure(1000.0, {"t": ALL})
    quota.record(10**7, now_ms)


def test_the_follower_leaves_a_throttled_partition_out_until_the_rate_allows(tmp_path):
    replicas, plog = _replicas(tmp_path, 1, isr=[0], leader=0)
    quota = ReplicationQuota()
    fetcher = FetcherManager(1, {"replica.fetch.max.bytes": 1 << 20}, replicas,
                             types.SimpleNamespace(notify=lambda key: None),
                             image=lambda: None, security=None, quota=quota)
    fetcher.follow("t", 0, 0)
    assert [t.topic for t in fetcher._build([("t", 0)]).topics] == ["t"]   # not exceeded yet
    _exceeded(quota, steady_ms())                  # the fetcher's clock
    assert fetcher._build([("t", 0)]).topics == []                        # held back
    assert ("t", 0) in fetcher.held[0]
    # in the ISR it is fetched whatever the rate
    replicas.apply_partition("t", None, 0, [0, 1], [0, 1], 0, 1, 2, {}, 1, 0)
    assert [t.topic for t in fetcher._build([("t", 0)]).topics] == ["t"]

    # bytes appended for a throttled partition count toward the rate
    quota2 = fetcher.quota = ReplicationQuota()
    quota2.configure(None, {"t": ALL})
    cls = RESPONSES[ApiKey.FETCH]
    data = build_batch([(None, b"x" * 1000, None, 0)], base_offset=0, partition_leader_epoch=1)
    resp = cls(error_code=0, session_id=0, responses=[cls.FetchableTopicResponse(
        topic="t", partitions=[cls.PartitionData(partition_index=0, error_code=0,
                                                 high_watermark=1, log_start_offset=0,
                                                 records=data)])])
    fetcher._process(resp, fetcher._build([("t", 0)]), 0)
    assert plog.log_end_offset == 1 and quota2.recorded == len(data)

    # caught up with the leader's high watermark (1), though not in the ISR: in sync for the
    # throttle (Kafka's fetcher rule), so it keeps fetching and can join the ISR
    replicas.apply_partition("t", None, 0, [0, 1], [0], 0, 1, 3, {}, 1, 0)
    assert fetcher.caught_up == {("t", 0)}
    fetcher.quota = quota
    _exceeded(quota, steady_ms())
    assert [t.topic for t in fetcher._build([("t", 0)]).topics] == ["t"]
    fetcher.caught_up.clear()
    assert fetcher._build([("t", 0)]).topics == []


def test_the_leader_answers_a_throttled_follower_out_of_the_isr_with_no_records(tmp_path):
    replicas, plog = _replicas(tmp_path, 0, isr=[0], leader=0)
    plog.append_as_follower(build_batch([(None, b"y" * 500, None, 0)], base_offset=0,
                                        partition_leader_epoch=1))
    quotas = ReplicationQuotas(0)
    hctx = types.SimpleNamespace(replication_quotas=quotas, replicas=replicas)
    hosted = replicas.get("t", 0)

    def answer(now):
        res = replicas.read("t", 0, 0, 1 << 20, 1, 1, -1, now, min_one=True)
        return leader_throttle(hctx, ("t", 0), hosted, 1, res, now)

    assert answer(0).size > 0                          # not throttled: served, not recorded
    assert quotas.leader.recorded == 0
    quotas.leader.configure(1000.0, {"t": ALL})
    first = answer(1)
    assert first.size > 0 and quotas.leader.recorded == first.size   # recorded
    _exceeded(quotas.leader)
    held = answer(2)
    assert held.size == 0 and held.records == [] and held.error == ErrorCode.NONE
    assert held.high_watermark == first.high_watermark
    hosted.state.isr = (0, 1)                          # in sync: never held back
    assert answer(3).size > 0


def test_the_follower_long_polls_for_replica_fetch_wait_max_ms(tmp_path):
    """Kafka's `replica.fetch.wait.max.ms` sets the follower fetch's max_wait_ms (it was a fixed
    500 ms here whatever the setting); a config without it keeps Kafka's default, 500."""
    replicas, _ = _replicas(tmp_path, 1, isr=[0], leader=0)
    config = {"replica.fetch.max.bytes": 1 << 20, "replica.fetch.wait.max.ms": 250}
    fetcher = FetcherManager(1, config, replicas, types.SimpleNamespace(notify=lambda key: None),
                             image=lambda: None, security=None)
    fetcher.follow("t", 0, 0)
    assert fetcher._build([("t", 0)]).max_wait_ms == 250
    del config["replica.fetch.wait.max.ms"]
    assert fetcher._build([("t", 0)]).max_wait_ms == 500
