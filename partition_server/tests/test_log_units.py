"""Leader-epoch cache, LogConfig, flush policy and roll triggers."""

import os

import pytest

from partition_server.log import LogConfig, PartitionLog
from partition_server.log.config import NEVER, LogConfigError
from partition_server.log.epoch_cache import UNDEFINED, LeaderEpochCache
from wire.records.batch import build_batch

T0 = 1_700_000_000_000


def batch(n=2, ts=T0):
    return build_batch([(b"k", b"v" * 20, [], ts + i) for i in range(n)])


# -- leader-epoch cache ------------------------------------------------------------------------------

def test_epoch_cache_offset_for_leader_epoch_semantics(tmp_path):
    path = str(tmp_path / "leader-epoch-checkpoint")
    c = LeaderEpochCache(path)
    assert c.end_offset_for(0, 10) == UNDEFINED
    for epoch, start in ((2, 0), (4, 10), (7, 25)):
        c.assign(epoch, start)
    c.assign(3, 30)                                   # an older epoch never moves it back
    leo = 40
    assert c.end_offset_for(1, leo) == (1, 0)         # below the earliest: where history begins
    assert c.end_offset_for(-1, leo) == UNDEFINED
    assert c.end_offset_for(2, leo) == (2, 10)
    assert c.end_offset_for(3, leo) == (2, 10)        # largest epoch <= requested
    assert c.end_offset_for(6, leo) == (4, 25)
    assert c.end_offset_for(7, leo) == (7, 40)        # latest: the log end offset
    assert c.end_offset_for(99, leo) == (7, 40)
    assert c.epoch_for_offset(12) == 4 and c.epoch_for_offset(0) == 2
    reloaded = LeaderEpochCache(path)
    assert (reloaded.epochs, reloaded.start_offsets) == ([2, 4, 7], [0, 10, 25])
    assert not os.path.exists(path + ".tmp")


def test_epoch_cache_truncation_from_both_ends(tmp_path):
    c = LeaderEpochCache(str(tmp_path / "ckpt"))
    for epoch, start in ((1, 0), (2, 10), (3, 20)):
        c.assign(epoch, start)
    c.truncate_from_start(15)
    assert (c.epochs, c.start_offsets) == ([2, 3], [15, 20])
    c.truncate_from_end(20)
    assert (c.epochs, c.start_offsets) == ([2], [15])
    c.assign(5, 18)
    assert c.end_offset_for(3, 30) == (2, 18)
    c.assign(6, 12)                                   # overtakes: epoch 5 (and 2's tail) dropped
    assert c.epochs[-1] == 6 and c.start_offsets[-1] == 12
    loaded = LeaderEpochCache(str(tmp_path / "ckpt"))
    assert loaded.epochs == c.epochs and loaded.start_offsets == c.start_offsets


# -- config -------------------------------------------------------------------------------------------

def test_log_config_from_kafka_names_and_validation():
    cfg = LogConfig.from_kafka({"segment.bytes": "1000", "retention.ms": "-1",
                                "cleanup.policy": "compact,delete", "flush.messages": "1",
                                "min.cleanable.dirty.ratio": "0.1", "unrelated.key": "x"})
    assert cfg.segment_bytes == 1000 and cfg.retention_ms == -1
    assert cfg.cleanup_policy == ("compact", "delete") and cfg.fsync_every_append
    assert LogConfig().flush_messages == NEVER and not LogConfig().fsync_every_append
    for bad in ({"segment.bytes": "10"}, {"cleanup.policy": "shred"}, {"flush.messages": "0"},
                {"retention.ms": "-7"}, {"min.cleanable.dirty.ratio": "2"},
                {"message.timestamp.type": "Whenever"}, {"segment.bytes": "lots"}):
        with pytest.raises(LogConfigError):
            LogConfig.from_kafka(bad)


# -- flush policy -------------------------------------------------------------------------------------

def test_flush_policies_advance_the_recovery_point(tmp_path):
    every = PartitionLog(str(tmp_path / "a-0"), LogConfig(flush_messages=1))
    every.append_as_leader(batch(), 0, T0)
    assert every.recovery_point == 2 and every.active.unflushed_messages == 0
    by_count = PartitionLog(str(tmp_path / "b-0"), LogConfig(flush_messages=5))
    for _ in range(2):
        by_count.append_as_leader(batch(), 0, T0)
    assert by_count.recovery_point == 0
    by_count.append_as_leader(batch(), 0, T0)       # 6 records >= 5
    assert by_count.recovery_point == 6
    by_time = PartitionLog(str(tmp_path / "c-0"), LogConfig(flush_ms=1000), now_ms=T0)
    by_time.append_as_leader(batch(), 0, T0)
    by_time.maybe_flush(T0 + 999)
    assert by_time.recovery_point == 0
    by_time.maybe_flush(T0 + 1000)
    assert by_time.recovery_point == 2
    with open(os.path.join(by_time.directory, "recovery-point")) as f:
        assert f.read() == "2"
    never = PartitionLog(str(tmp_path / "d-0"), LogConfig())
    never.append_as_leader(batch(), 0, T0)
    never.maybe_flush(T0 + 10**9)
    assert never.recovery_point == 0
    never.close()                                   # close fsyncs and checkpoints
    assert never.recovery_point == 2


# -- rolling ------------------------------------------------------------------------------------------

def test_roll_by_size_time_and_index_full(tmp_path):
    size = PartitionLog(str(tmp_path / "s-0"), LogConfig(segment_bytes=300))
    for _ in range(6):
        size.append_as_leader(batch(), 0, T0)
    assert len(size.segments) >= 3 and all(s.size <= 300 for s in size.segments)
    names = sorted(n for n in os.listdir(size.directory) if n.endswith(".log"))
    assert names == ["%020d.log" % s.base_offset for s in size.segments]
    aged = PartitionLog(str(tmp_path / "t-0"), LogConfig(segment_ms=1000))
    aged.append_as_leader(batch(), 0, T0)
    aged.append_as_leader(batch(), 0, T0 + 999)
    assert len(aged.segments) == 1
    aged.append_as_leader(batch(), 0, T0 + 1000)
    assert len(aged.segments) == 2 and aged.active.base_offset == 4
    full = PartitionLog(str(tmp_path / "i-0"),
                        LogConfig(segment_index_bytes=16, index_interval_bytes=1))
    for _ in range(5):
        full.append_as_leader(batch(), 0, T0)
    assert len(full.segments) >= 2 and all(s.index.entries <= 2 for s in full.segments)


def test_index_lookup_at_segment_boundaries(tmp_path):
    plog = PartitionLog(str(tmp_path / "b-0"), LogConfig(segment_bytes=400, index_interval_bytes=1))
    for i in range(12):
        plog.append_as_leader(batch(ts=T0 + 10 * i), 0, T0)
    for seg in plog.segments:
        for off in (seg.base_offset, seg.next_offset - 1):
            h = seg.translate_offset(off)
            assert h.base_offset <= off <= h.last_offset
        assert seg.index.offsets[0] == seg.base_offset and seg.index.positions[0] == 0
        assert seg.translate_offset(seg.next_offset) is None
    last_of_first = plog.segments[0].next_offset - 1
    from wire.records.batch import decode_batch
    got = decode_batch(plog.read(last_of_first, 1).read_bytes()).records
    assert got[-1].offset == last_of_first
    # time index at a boundary: the first timestamp of the second segment
    second = plog.segments[1]
    assert plog.offset_for_timestamp(second.first_batch_timestamp - 1)[0] == second.base_offset


def test_control_batches_only_from_coordinator_origin(tmp_path):
    from wire.errors import ErrorCode, KafkaError
    from wire.records.batch import build_end_txn_marker
    plog = PartitionLog(str(tmp_path / "m-0"), LogConfig())
    marker = build_end_txn_marker(True, 5, 0, 1)
    with pytest.raises(KafkaError) as e:
        plog.append_as_leader(marker, 0, T0)
    assert e.value.code == ErrorCode.INVALID_RECORD
    info = plog.append_as_leader(marker, 0, T0, origin="coordinator")
    assert info.first_offset == 0 and plog.log_end_offset == 1


def test_close_is_idempotent_and_start_offset_never_passes_the_end(tmp_path):
    d = str(tmp_path / "z-0")
    plog = PartitionLog(d, LogConfig())
    for _ in range(3):
        plog.append_as_leader(batch(), 0, T0)
    plog.delete_records_before(6)
    plog.close()
    plog.close()
    seg_path = plog.segments[0].path
    os.truncate(seg_path, os.path.getsize(seg_path) - 5)       # a torn tail...
    os.unlink(os.path.join(d, ".clean-shutdown"))              # ...after an unclean stop
    again = PartitionLog(d, LogConfig())
    assert again.log_end_offset == 4 and again.log_start_offset == 4
    assert again.read(4, 100).size == 0


def test_broker_defaults_then_topic_overrides():
    cfg = LogConfig.from_broker_and_topic(
        {"log.retention.hours": "2", "log.segment.bytes": "5000", "log.index.interval.bytes": 64,
         "log.cleaner.delete.retention.ms": "10"},
        {"segment.bytes": "7000"})
    assert cfg.retention_ms == 7_200_000 and cfg.segment_bytes == 7000
    assert cfg.index_interval_bytes == 64 and cfg.delete_retention_ms == 10
