"""Raftka's own tagged fields on Kafka messages (wire/codegen/raftka_extensions.json): only
tagged fields with Raftka's tag numbers are accepted, and a reader built from Kafka's schema
alone (what any Kafka implementation has) still reads the message, skipping them."""

import json
import uuid

import pytest

from wire.codegen.generator import SCHEMAS_DIR, load_extensions, render_module
from wire.messages.index_generated import REQUESTS

TOPIC_ID = uuid.UUID(int=0xABC)


def test_only_raftka_numbered_tagged_fields_are_accepted(tmp_path):
    bad = tmp_path / "ext.json"
    bad.write_text(json.dumps({"BrokerHeartbeatRequest": [
        {"name": "X", "type": "int32", "versions": "0+"}]}))
    with pytest.raises(ValueError, match="must be a tagged field"):
        load_extensions(bad)
    bad.write_text(json.dumps({"BrokerHeartbeatRequest": [
        {"name": "X", "type": "int32", "versions": "0+", "taggedVersions": "0+", "tag": "5"}]}))
    with pytest.raises(ValueError, match="tag >= 10000"):
        load_extensions(bad)
    assert "BrokerHeartbeatRequest" in load_extensions()


def test_a_kafka_only_reader_skips_the_extension():
    ours = REQUESTS[63]
    msg = ours(broker_id=4, broker_epoch=7, current_metadata_offset=99, want_fence=False,
               want_shut_down=True, raftka_load_report_full=True,
               raftka_partition_sizes=[ours.RaftkaTopicSizes(name="t", partitions=[
                   ours.RaftkaPartitionSize(partition_index=1, size_bytes=123)])],
               raftka_replica_log_info=[ours.RaftkaTopicLogInfo(topic_id=TOPIC_ID, partitions=[
                   ours.RaftkaPartitionLogInfo(partition_index=2, partition_epoch=9,
                                               last_written_leader_epoch=3,
                                               log_end_offset=1 << 40)])])
    _, text, _ = render_module(SCHEMAS_DIR / "BrokerHeartbeatRequest.json", {})
    assert "raftka" not in text
    namespace: dict = {}
    exec(compile(text, "kafka_only", "exec"), namespace)
    kafka_only = namespace["BrokerHeartbeatRequest"]
    for version in (0, 1):
        got = kafka_only.decode(msg.encode(version), version)
        assert (got.broker_id, got.broker_epoch, got.current_metadata_offset,
                got.want_shut_down) == (4, 7, 99, True)
        # and back: unknown tags are kept and written again, so nothing is lost in between
        again = ours.decode(got.encode(version), version)
        assert again.raftka_partition_sizes[0].partitions[0].size_bytes == 123
        info = again.raftka_replica_log_info[0]
        assert info.topic_id == TOPIC_ID and (
            info.partitions[0].partition_epoch, info.partitions[0].last_written_leader_epoch,
            info.partitions[0].log_end_offset) == (9, 3, 1 << 40)
