"""An idempotent producer's retries while the ISR is short of min.insync.replicas never make
librdkafka write a record twice.

Seen in the suite (test_live_jbod, a broker killed and restarted under an acks=all idempotent
librdkafka writer, min.insync.replicas=2 with the third replica offline): one record twice in
the log. The chain:
1. batch X reaches the new leader (replicated before the old one died, its answer lost);
2. with the ISR short, X's retry was refused NOT_ENOUGH_REPLICAS, which librdkafka reads as
   "not written", and so was the next batch R0;
3. the ISR grew back before R1, pipelined behind R0: R1 found a gap (R0) and got
   OUT_OF_ORDER_SEQUENCE_NUMBER;
4. librdkafka then takes every batch not acknowledged as lost, bumps its epoch and sends them
   again renumbered from 0: X a second time.
Now X's retry is answered from the dedup window first (its acks=all wait then holds it until
the ISR is whole again, or times out: "maybe written"), and a batch behind a gap this leader
opened by a retriable refusal gets that refusal again, not OUT_OF_ORDER_SEQUENCE_NUMBER."""

from partition_server.log import LogConfig, PartitionLog
from partition_server.replica_manager import ReplicaManager
from partition_server.txn.producer_state import REFUSAL_KEPT_MS, ProducerStateManager
from wire.errors import ErrorCode
from wire.records.batch import build_batch, iter_batches

PID, T0 = 42, 1_700_000_000_000


def _leader(tmp_path):
    rm = ReplicaManager(0, lambda t, p, cfg: PartitionLog(str(tmp_path / f"{t}-{p}"),
                                                            LogConfig()))
    _isr(rm, [0, 1], partition_epoch=0)
    return rm


def _isr(rm, isr, partition_epoch):
    rm.apply_partition("t", None, 0, [0, 1], isr, 0, 0, partition_epoch, {}, 2, T0)


def _produce(rm, seq, acks=-1):
    batch = build_batch([(None, b"%d" % seq, [], T0)], producer_id=PID, producer_epoch=0,
                        base_sequence=seq)
    return rm.append_records("t", 0, batch, acks, T0)


def test_retries_across_a_short_isr_never_open_a_gap(tmp_path):
    rm = _leader(tmp_path)
    x = _produce(rm, 0)
    assert x.error == ErrorCode.NONE and x.base_offset == 0
    _isr(rm, [0], partition_epoch=1)                     # the other replica left the ISR
    retry = _produce(rm, 0)                              # X's answer was lost: its retry
    assert retry.error == ErrorCode.NONE and retry.base_offset == 0     # from the window
    # its acks=all wait holds it (no high watermark moves below min.insync.replicas)
    assert rm.produce_completion("t", 0, retry.last_offset) is None
    assert _produce(rm, 1).error == ErrorCode.NOT_ENOUGH_REPLICAS       # R0: not written
    _isr(rm, [0, 1], partition_epoch=2)                  # the ISR grows back
    rm.get("t", 0).state.update_follower_fetch(1, 1, T0)
    assert rm.produce_completion("t", 0, retry.last_offset) == ErrorCode.NONE   # X: acked
    # R1 was in flight behind R0: the gap is R0, which the client sends again first
    assert _produce(rm, 2).error == ErrorCode.NOT_ENOUGH_REPLICAS
    assert [_produce(rm, s).base_offset for s in (0, 1, 2)] == [0, 1, 2]
    # once R0 is in, a real gap is out of order again
    assert _produce(rm, 4).error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert rm.get("t", 0).log.log_end_offset == 3
    rm.get("t", 0).log.close()


def test_a_follower_made_leader_between_two_requests_keeps_them_in_order(tmp_path):
    """librdkafka may learn of a new leader before the broker does: the first request is
    refused NOT_LEADER_OR_FOLLOWER, the broker applies its leadership, the second arrives."""
    rm = ReplicaManager(0, lambda t, p, cfg: PartitionLog(str(tmp_path / f"{t}-{p}"),
                                                            LogConfig()))
    rm.apply_partition("t", None, 0, [0, 1], [0, 1], 1, 0, 0, {}, 1, T0)    # follower of 1
    assert rm.append_records("t", 0, b"", 1, T0).error == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert _produce(rm, 0, acks=1).error == ErrorCode.NOT_LEADER_OR_FOLLOWER
    rm.apply_partition("t", None, 0, [0, 1], [0, 1], 0, 1, 1, {}, 1, T0)    # now the leader
    assert _produce(rm, 1, acks=1).error == ErrorCode.NOT_LEADER_OR_FOLLOWER  # not a gap error
    assert [_produce(rm, s, acks=1).base_offset for s in (0, 1)] == [0, 1]
    rm.get("t", 0).log.close()


def test_a_refusal_covers_only_the_gap_it_opened():
    s = ProducerStateManager()
    s.update(PID, 0, 0, 0, 0, 0)
    batch = build_batch([(None, b"v", [], T0)], producer_id=PID, producer_epoch=0,
                        base_sequence=1)
    h = next(iter_batches(batch))
    refused = s.admit([(h, 1)], T0, ErrorCode.NOT_ENOUGH_REPLICAS)
    assert refused.error == ErrorCode.NOT_ENOUGH_REPLICAS
    assert s.check(PID, 0, 2, 2).error == ErrorCode.NOT_ENOUGH_REPLICAS   # behind seq 1
    assert s.check(PID, 1, 3, 3).error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER  # other epoch
    # a refused batch that was itself out of order is not remembered
    s2 = ProducerStateManager()
    s2.update(PID, 0, 0, 0, 0, 0)
    h5 = next(iter_batches(build_batch([(None, b"v", [], T0)], producer_id=PID,
                                       producer_epoch=0, base_sequence=5)))
    assert s2.admit([(h5, 5)], T0, ErrorCode.NOT_ENOUGH_REPLICAS).error != ErrorCode.NONE
    assert s2.check(PID, 0, 6, 6).error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    # the refused batch appended: the memory goes
    s.update(PID, 0, 1, 1, 1, 1)
    assert not s.refusals
    assert s.check(PID, 0, 3, 3).error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    # a refusal never followed up is forgotten by the periodic sweep
    s.admit([(h, 1)], T0, ErrorCode.NOT_ENOUGH_REPLICAS)   # seq 1 is a duplicate now: no memory
    assert not s.refusals
    h2 = next(iter_batches(build_batch([(None, b"v", [], T0)], producer_id=PID,
                                       producer_epoch=0, base_sequence=2)))
    s.admit([(h2, 2)], T0, ErrorCode.NOT_ENOUGH_REPLICAS)
    assert s.refusals
    s.expire_producers(T0 + REFUSAL_KEPT_MS + 1, expiration_ms=10**12)
    assert not s.refusals


def test_a_request_of_several_batches_with_one_held_is_refused_whole(tmp_path):
    """Only a request of one batch is answered from the window; with more, the held one makes
    the whole a DUPLICATE_SEQUENCE_NUMBER error (nothing appended, nothing claimed appended)."""
    rm = _leader(tmp_path)
    assert _produce(rm, 0, acks=1).base_offset == 0
    two = b"".join(bytes(build_batch([(None, b"%d" % seq, [], T0)], producer_id=PID,
                                     producer_epoch=0, base_sequence=seq)) for seq in (0, 1))
    res = rm.append_records("t", 0, two, 1, T0)
    assert res.error == ErrorCode.DUPLICATE_SEQUENCE_NUMBER and res.base_offset == -1
    assert rm.get("t", 0).log.log_end_offset == 1
    rm.get("t", 0).log.close()


def test_an_old_batch_behind_a_refusal_is_still_out_of_order():
    """A refusal covers batches ahead of it only. A retry of an old batch that left the window
    (its answer lost long ago) keeps Kafka's OUT_OF_ORDER_SEQUENCE_NUMBER: answered with the
    retriable refusal instead, our producer retried it, in order before everything else, until
    its delivery timeout (two minutes stalled in test_live_idempotence_faults), then resent."""
    s = ProducerStateManager()
    for seq in range(10):
        s.update(PID, 0, seq, seq, seq, seq)
    h = next(iter_batches(build_batch([(None, b"v", [], T0)], producer_id=PID,
                                      producer_epoch=0, base_sequence=10)))
    s.admit([(h, 10)], T0, ErrorCode.NOT_LEADER_OR_FOLLOWER)
    assert s.refusals
    assert s.check(PID, 0, 2, 2).error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER    # behind
    assert s.check(PID, 0, 11, 11).error == ErrorCode.NOT_LEADER_OR_FOLLOWER        # ahead
