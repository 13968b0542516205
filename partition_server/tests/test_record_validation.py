"""Per-record validation of produced batches (log/record_validation.py, KIP-467): a null key on
a compacted topic, timestamps outside message.timestamp.before/after.max.ms (or the deprecated
difference.max.ms); the whole batch refused with Kafka's messages, nothing appended; and the
ProduceResponse carrying record_errors."""

from __future__ import annotations

import types
import uuid

import pytest

from partition_server.log import LogConfig, PartitionLog
from partition_server.log.config import LogConfigError
from partition_server.log.record_validation import RecordValidationError
from wire.errors import ErrorCode
from wire.records.batch import Compression, build_batch

NOW = 1_700_000_000_000
HOUR = 3_600_000


def _log(tmp_path, **cfg) -> PartitionLog:
    props = {k.replace("_", "."): str(v) for k, v in cfg.items()}
    return PartitionLog(str(tmp_path / "t-3"), LogConfig.from_kafka(props), NOW)


def test_null_key_on_a_compacted_topic_refuses_the_batch(tmp_path):
    plog = _log(tmp_path, cleanup_policy="compact,delete")
    batch = build_batch([(b"k", b"v", None, NOW), (None, b"v", None, NOW), (b"k", b"v", None, NOW),
                         (None, b"v", None, NOW)], compression=Compression.ZSTD)
    with pytest.raises(RecordValidationError) as exc:
        plog.append_as_leader(batch, 0, NOW)
    msg = "Compacted topic cannot accept message without key in topic partition t-3"
    assert exc.value.code == ErrorCode.INVALID_RECORD
    assert exc.value.record_errors == [(1, msg), (3, msg)]
    assert str(exc.value) == (
        "One or more records have been rejected due to 2 record errors in total, and only "
        f"showing the first three errors at most: [RecordError(batchIndex=1, message='{msg}'), "
        f"RecordError(batchIndex=3, message='{msg}')]")
    assert plog.log_end_offset == 0                     # nothing of the batch appended
    plog.append_as_leader(build_batch([(b"k", b"v", None, NOW)]), 0, NOW)
    assert plog.log_end_offset == 1
    # a topic that does not compact takes null keys
    _log(tmp_path / "d").append_as_leader(build_batch([(None, b"v", None, NOW)]), 0, NOW)


def test_first_three_record_errors_in_the_message_all_in_the_list(tmp_path):
    plog = _log(tmp_path, cleanup_policy="compact")
    with pytest.raises(RecordValidationError) as exc:
        plog.append_as_leader(build_batch([(None, b"v", None, NOW)] * 5), 0, NOW)
    assert [i for i, _m in exc.value.record_errors] == [0, 1, 2, 3, 4]
    assert str(exc.value).count("RecordError(") == 3 and "5 record errors" in str(exc.value)


def test_timestamps_outside_before_and_after_limits(tmp_path):
    plog = _log(tmp_path, message_timestamp_before_max_ms=HOUR,
                message_timestamp_after_max_ms=60_000)
    ok = [(b"k", b"v", None, NOW - HOUR), (b"k", b"v", None, NOW + 60_000),
          (b"k", b"v", None, -1)]                       # no timestamp: not checked
    plog.append_as_leader(build_batch(ok), 0, NOW)
    bad = build_batch([(b"k", b"v", None, NOW), (b"k", b"v", None, NOW - HOUR - 1),
                       (b"k", b"v", None, NOW + 60_001)])
    with pytest.raises(RecordValidationError) as exc:
        plog.append_as_leader(bad, 0, NOW)
    assert exc.value.code == ErrorCode.INVALID_TIMESTAMP
    assert str(exc.value) == "One or more records have been rejected due to invalid timestamp"
    window = f"[{NOW - HOUR}, {NOW + 60_000}]"
    assert exc.value.record_errors == [
        (1, f"Timestamp {NOW - HOUR - 1} of message with offset 1 is out of range. "
            f"The timestamp should be within {window}"),
        (2, f"Timestamp {NOW + 60_001} of message with offset 2 is out of range. "
            f"The timestamp should be within {window}")]
    assert plog.log_end_offset == 3


def test_a_key_error_and_a_timestamp_error_make_it_invalid_timestamp(tmp_path):
    plog = _log(tmp_path, cleanup_policy="compact", message_timestamp_after_max_ms=0)
    with pytest.raises(RecordValidationError) as exc:
        plog.append_as_leader(build_batch([(None, b"v", None, NOW),
                                           (b"k", b"v", None, NOW + 1)]), 0, NOW)
    assert exc.value.code == ErrorCode.INVALID_TIMESTAMP
    assert [i for i, _m in exc.value.record_errors] == [0, 1]


def test_difference_max_ms_stands_for_unset_limits_and_java_overflow(tmp_path):
    plog = _log(tmp_path, message_timestamp_difference_max_ms=1000,
                message_timestamp_after_max_ms=2**63 - 1)
    with pytest.raises(RecordValidationError) as exc:
        plog.append_as_leader(build_batch([(b"k", b"v", None, NOW + 1001)]), 0, NOW)
    assert exc.value.record_errors[0][1].endswith(f"within [{NOW - 1000}, {NOW + 1000}]")
    # only `before` set: `after` is Long.MAX_VALUE and Kafka's message shows now + MAX wrapped
    plog = _log(tmp_path / "b", message_timestamp_before_max_ms=10)
    with pytest.raises(RecordValidationError) as exc:
        plog.append_as_leader(build_batch([(b"k", b"v", None, NOW - 11)]), 0, NOW)
    assert exc.value.record_errors[0][1].endswith(
        f"within [{NOW - 10}, {NOW + 2**63 - 1 - 2**64}]")
    # LogAppendTime topics are stamped by the broker: no limit applies
    plog = _log(tmp_path / "l", message_timestamp_type="LogAppendTime",
                message_timestamp_before_max_ms=0)
    plog.append_as_leader(build_batch([(b"k", b"v", None, 5)]), 0, NOW)


def test_limits_are_validated():
    with pytest.raises(LogConfigError):
        LogConfig.from_kafka({"message.timestamp.after.max.ms": "-1"})


def test_coordinator_and_follower_appends_are_not_checked(tmp_path):
    plog = _log(tmp_path, cleanup_policy="compact")
    plog.append_as_leader(build_batch([(None, b"v", None, NOW)]), 0, NOW, origin="coordinator")
    plog.append_as_follower(build_batch([(None, b"v", None, NOW)], base_offset=1,
                                        partition_leader_epoch=0))
    assert plog.log_end_offset == 2


async def test_produce_response_carries_record_errors(tmp_path):
    from partition_server.handlers.produce import handle_produce
    from partition_server.replica_manager import ReplicaManager
    from wire.messages.api_keys import ApiKey
    from wire.messages.index_generated import REQUESTS, RESPONSES

    replicas = ReplicaManager(0, lambda topic, partition, cfg: PartitionLog(
        str(tmp_path / f"{topic}-{partition}"), LogConfig.from_kafka({"cleanup.policy": "compact"})))
    replicas.apply_partition("t", uuid.uuid4(), 3, [0], [0], 0, 1, 1, {}, 1, 0)
    pr = REQUESTS[ApiKey.PRODUCE]
    body = pr(acks=1, timeout_ms=1000, topic_data=[pr.TopicProduceData(name="t", partition_data=[
        pr.PartitionProduceData(index=3, records=build_batch([(None, b"v", None, NOW)]))])])
    hctx = types.SimpleNamespace(image=types.SimpleNamespace(topics={"t": None},
                                                             partition=lambda t, p: object()),
                                 replicas=replicas)
    resp = await handle_produce(hctx, types.SimpleNamespace(body=body, api_version=9))
    p = resp.responses[0].partition_responses[0]
    assert p.error_code == ErrorCode.INVALID_RECORD and p.base_offset == -1
    assert [(e.batch_index, e.batch_index_error_message) for e in p.record_errors] == [
        (0, "Compacted topic cannot accept message without key in topic partition t-3")]
    assert p.error_message.startswith("One or more records have been rejected due to 1 record")
    assert replicas.get("t", 3).log.log_end_offset == 0
    # both survive encoding at v8+, and v7 drops them (the fields start at v8)
    cls = RESPONSES[ApiKey.PRODUCE]
    again = cls.decode(resp.encode(9), 9).responses[0].partition_responses[0]
    assert again.record_errors[0].batch_index == 0 and again.error_message == p.error_message
    assert cls.decode(resp.encode(7), 7).responses[0].partition_responses[0].error_code == \
        ErrorCode.INVALID_RECORD


def test_a_client_batch_marked_log_append_time(tmp_path):
    from wire.records.batch import TimestampType
    lat = dict(timestamp_type=TimestampType.LOG_APPEND_TIME)
    # a LogAppendTime topic refuses it for every record: only the broker stamps
    plog = _log(tmp_path, message_timestamp_type="LogAppendTime")
    with pytest.raises(RecordValidationError) as exc:
        plog.append_as_leader(build_batch([(b"k", b"vv", None, NOW), (None, b"v", None, NOW)],
                                          **lat), 0, NOW)
    assert exc.value.code == ErrorCode.INVALID_TIMESTAMP
    assert exc.value.record_errors[0] == (0, (
        f"Invalid timestamp type in message DefaultRecord(offset=0, timestamp={NOW}, key=1 "
        "bytes, value=2 bytes). Producer should not set timestamp type to LogAppendTime."))
    assert [i for i, _m in exc.value.record_errors] == [0, 1] and plog.log_end_offset == 0
    # a CreateTime topic takes it when its records carry timestamps (Kafka's order of checks)
    _log(tmp_path / "c").append_as_leader(build_batch([(b"k", b"v", None, NOW)], **lat), 0, NOW)
