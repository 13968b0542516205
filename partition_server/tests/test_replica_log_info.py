"""The broker's side of KIP-966 unclean recovery (replica_log_info.py): which replicas report
their log end on heartbeats, and what they report, from real partition logs."""

import uuid

from metadata_quorum import records as r
from metadata_quorum.image import MetadataImage
from partition_server.log import LogConfig, PartitionLog
from partition_server.replica_log_info import ReplicaLogInfoReporter, by_topic
from partition_server.replica_manager import ReplicaManager
from wire.records.batch import build_batch

T0 = 1_700_000_000_000
TID, OTHER = uuid.UUID(int=1), uuid.UUID(int=2)


def _manager(tmp_path, batches):
    """Broker 1's replicas; partition ('t', 0) gets `batches` [(leader_epoch, n_records)]."""
    def opener(topic, partition, _cfg):
        plog = PartitionLog(str(tmp_path / f"{topic}-{partition}"), LogConfig())
        if (topic, partition) == ("t", 0) and plog.log_end_offset == 0:
            for epoch, n in batches:
                plog.append_as_leader(build_batch([(None, b"v", [], T0)] * n), epoch, T0)
        return plog
    rm = ReplicaManager(1, opener)
    for topic, partition in (("t", 0), ("t", 1), ("u", 0)):
        rm.apply_partition(topic, None, partition, [1, 2], [1, 2], 2, 1, 1, {}, 1, T0)
    return rm


def _image(*extra):
    recs = [r.RegisterBrokerRecord(b, f"i{b}", 10 + b, "h", 9000 + b, None, False)
            for b in (1, 2)]
    recs += [r.TopicRecord("t", TID), r.TopicRecord("u", OTHER),
             # t-0: nobody leads and nobody is in sync: a recovery wants our log end
             r.PartitionRecord(TID, 0, (1, 2), (), -1, 4, 9, last_known_elr=(2,)),
             # t-1: leaderless but the ISR still names a copy: no recovery (wait for it)
             r.PartitionRecord(TID, 1, (1, 2), (2,), -1, 4, 9),
             r.PartitionRecord(OTHER, 0, (1, 2), (), -1, 2, 5)]
    recs += list(extra)
    return MetadataImage.from_records(recs, len(recs))


def test_only_leaderless_replicas_with_empty_isr_and_elr_report_their_last_epoch_and_end(tmp_path):
    rm = _manager(tmp_path, [(0, 5), (3, 2)])
    reporter = ReplicaLogInfoReporter(1)
    got = reporter.report(_image(), rm.partitions)
    assert sorted(got) == sorted([(TID, 0, 9, 3, 7), (OTHER, 0, 5, -1, 0)])
    assert by_topic(got)[TID] == [(0, 9, 3, 7)]


def test_topics_with_strategy_none_report_nothing(tmp_path):
    rm = _manager(tmp_path, [(0, 5)])
    image = _image(r.ConfigRecord(2, "t", "unclean.recovery.strategy", "None"))
    assert ReplicaLogInfoReporter(1).report(image, rm.partitions) == [(OTHER, 0, 5, -1, 0)]
    image = _image(r.ConfigRecord(4, "", "unclean.recovery.strategy", "None"))
    assert ReplicaLogInfoReporter(1).report(image, rm.partitions) == []


def test_the_report_follows_the_log_and_skips_offline_logs(tmp_path):
    rm = _manager(tmp_path, [(0, 2), (1, 3)])
    reporter, image = ReplicaLogInfoReporter(1), _image()
    assert (TID, 0, 9, 1, 5) in reporter.report(image, rm.partitions)
    rm.get("t", 0).log.truncate_to(2)            # the epoch-1 batch is gone
    assert (TID, 0, 9, 0, 2) in reporter.report(image, rm.partitions)
    rm.get("t", 0).offline = True
    assert [x for x in reporter.report(image, rm.partitions) if x[0] == TID] == []


def test_more_leaderless_replicas_than_a_heartbeat_carries_report_in_turns(tmp_path,
                                                                          monkeypatch):
    """A heartbeat must stay small (load_report.py): past MAX_REPORTED replicas, each heartbeat
    carries the next MAX_REPORTED, round the list, and the controller keeps what it heard."""
    from partition_server import replica_log_info
    monkeypatch.setattr(replica_log_info, "MAX_REPORTED", 1)
    rm = _manager(tmp_path, [(0, 5)])
    reporter = ReplicaLogInfoReporter(1)
    turns = [reporter.report(_image(), rm.partitions) for _ in range(4)]
    assert all(len(t) == 1 for t in turns)
    assert sorted(turns[0] + turns[1]) == sorted([(TID, 0, 9, 0, 5), (OTHER, 0, 5, -1, 0)])
    assert turns[2:] == turns[:2]
