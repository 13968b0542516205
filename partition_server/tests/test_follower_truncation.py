"""A follower that truncates its log keeps its idempotent-producer state equal to the log.

A follower's dedup window is what it answers retries with once it leads. Two truncation paths
left it describing another log:
- divergence (the leader's epoch ends earlier): the window was trimmed in place, so a producer
  whose last five batches were all cut was forgotten although its earlier batches remained: its
  next batch got UNKNOWN_PRODUCER_ID, which librdkafka answers by bumping its epoch (renumbering
  what it has not seen acknowledged) or, for a retry, by failing the producer;
- out of range (the leader's log is shorter, cut to its high watermark): the window was not
  trimmed at all, so a retry of a cut batch was answered "duplicate" at an offset that now holds
  other records: acknowledged, never written.
Both now reload the state from the newest snapshot below the new end plus the log after it
(Kafka's truncateAndReload). The tests drive the fetcher's own response handling."""

import types

from metadata_quorum.image import PartitionState as Registration
from partition_server.log import LogConfig, PartitionLog
from partition_server.purgatory import Purgatory
from partition_server.replica_manager import ReplicaManager
from partition_server.replication.fetcher import FetcherManager
from wire.errors import ErrorCode
from wire.records.batch import build_batch

PID = 7
NO_DIVERGENCE = types.SimpleNamespace(epoch=-1, end_offset=-1)


def _follower(tmp_path):
    rm = ReplicaManager(1, lambda t, p, cfg: PartitionLog(str(tmp_path / f"{t}-{p}"),
                                                            LogConfig()))
    reg = Registration(0, (0, 1), (0, 1), 0, 0, 0)
    rm.apply_partition("t", None, 0, list(reg.replicas), list(reg.isr), reg.leader,
                       reg.leader_epoch, reg.partition_epoch, {}, 1, 0)
    fm = FetcherManager(1, {}, rm, Purgatory(), image=lambda: None, security=None)
    return rm.get("t", 0), fm


def _response(records=None, error=ErrorCode.NONE, high_watermark=0, diverging=NO_DIVERGENCE):
    return types.SimpleNamespace(error_code=error, high_watermark=high_watermark,
                                 log_start_offset=0, diverging_epoch=diverging, records=records)


def _fetched(hosted, fm, sequences, epoch=0):
    """The leader's batches of producer PID, one record each, at the follower's log end."""
    for seq in sequences:
        base = hosted.log.log_end_offset
        data = build_batch([(None, b"%d" % seq, [], 0)], base_offset=base,
                           partition_leader_epoch=epoch, producer_id=PID, producer_epoch=0,
                           base_sequence=seq)
        assert fm._apply(hosted, _response(data, high_watermark=base), 0) is False


def test_divergence_that_cuts_a_whole_window_keeps_the_producers_earlier_batches(tmp_path):
    hosted, fm = _follower(tmp_path)
    _fetched(hosted, fm, range(0, 5), epoch=0)
    _fetched(hosted, fm, range(5, 10), epoch=1)   # all five in the window: an epoch to be cut
    # the new leader never had epoch 1: its epoch 0 ends at offset 5
    diverged = types.SimpleNamespace(epoch=0, end_offset=5)
    fm._apply(hosted, _response(diverging=diverged), 0)
    assert hosted.log.log_end_offset == 5
    retry = hosted.producers.check(PID, 0, 4, 4)              # batch 4 is still in the log
    assert retry.error == ErrorCode.DUPLICATE_SEQUENCE_NUMBER
    assert retry.duplicate_of.first_offset == 4
    assert hosted.producers.check(PID, 0, 5, 5).error == ErrorCode.NONE   # 5 comes next
    hosted.log.close()


def test_out_of_range_truncation_forgets_the_cut_batches(tmp_path):
    hosted, fm = _follower(tmp_path)
    _fetched(hosted, fm, range(10))
    # the leader's log ends at 7 (it was cut to its high watermark): we are out of range
    fm._apply(hosted, _response(error=ErrorCode.OFFSET_OUT_OF_RANGE, high_watermark=7), 0)
    assert hosted.log.log_end_offset == 7
    assert hosted.producers.check(PID, 0, 6, 6).duplicate_of.first_offset == 6
    # batch 7 is gone: its retry is appended, not answered as a duplicate at offset 7
    assert hosted.producers.check(PID, 0, 7, 7).error == ErrorCode.NONE
    assert hosted.producers.check(PID, 0, 8, 8).error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    hosted.log.close()


def test_a_truncation_below_every_producer_batch_costs_no_reload(tmp_path, monkeypatch):
    """Logs without idempotent batches past the cut (the common case) are not replayed."""
    hosted, fm = _follower(tmp_path)
    _fetched(hosted, fm, range(3))
    plain = build_batch([(None, b"x", [], 0)] * 4, base_offset=3, partition_leader_epoch=1)
    fm._apply(hosted, _response(plain, high_watermark=3), 0)
    reloads = []
    monkeypatch.setattr(type(hosted), "rebuild_producer_state", lambda self: reloads.append(1))
    fm._apply(hosted, _response(diverging=types.SimpleNamespace(epoch=0, end_offset=3)), 0)
    assert hosted.log.log_end_offset == 3 and reloads == []
    assert hosted.producers.check(PID, 0, 3, 3).error == ErrorCode.NONE
    hosted.log.close()
