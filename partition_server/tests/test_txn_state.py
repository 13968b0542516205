"""Pure transaction state machine (txn/state.py) and the partition-side transaction tracking
(last stable offset, aborted transactions) of txn/producer_state.py."""

import pytest

from partition_server.txn import state as S
from partition_server.txn.producer_state import ProducerStateManager
from wire.errors import ErrorCode
from wire.records.batch import build_batch, build_end_txn_marker, iter_batches

TP1, TP2 = ("t", 0), ("t", 1)


def fresh(now=1000):
    r = S.init_producer_id(None, "tx", 60000, -1, -1, None, now)
    assert r.needs_new_producer_id
    r = S.init_producer_id(None, "tx", 60000, -1, -1, 42, now)
    assert r.error == ErrorCode.NONE
    return r.metadata


def test_happy_commit_path_and_record_round_trip():
    m = fresh()
    assert (m.producer_id, m.producer_epoch, m.state) == (42, 0, S.TxnState.EMPTY)
    err, m2 = S.add_partitions(m, 42, 0, [TP1], 2000)
    assert err == ErrorCode.NONE and m2.state is S.TxnState.ONGOING and m2.txn_start_ms == 2000
    err, m3 = S.add_partitions(m2, 42, 0, [TP2], 2500)
    assert m3.partitions == {TP1, TP2} and m3.txn_start_ms == 2000
    assert S.add_partitions(m3, 42, 0, [TP1], 2600) == (ErrorCode.NONE, None)   # nothing new
    r = S.end_txn(m3, 42, 0, True, 3000)
    p = r.metadata
    assert r.error == ErrorCode.NONE and p.state is S.TxnState.PREPARE_COMMIT
    assert S.TransactionMetadata.from_record("tx", p.to_record()) == p
    # while markers are written: retries and new work wait
    assert S.end_txn(p, 42, 0, True, 3001).error == ErrorCode.CONCURRENT_TRANSACTIONS
    assert S.add_partitions(p, 42, 0, [TP1], 3001)[0] == ErrorCode.CONCURRENT_TRANSACTIONS
    assert S.init_producer_id(p, "tx", 60000, -1, -1, None, 3001).error == \
        ErrorCode.CONCURRENT_TRANSACTIONS
    c = S.complete(p, 4000)
    assert c.state is S.TxnState.COMPLETE_COMMIT and not c.partitions
    assert S.end_txn(c, 42, 0, True, 4001) == S.EndResult()          # retried EndTxn
    assert S.end_txn(c, 42, 0, False, 4001).error == ErrorCode.INVALID_TXN_STATE
    err, again = S.add_partitions(c, 42, 0, [TP2], 5000)
    assert again.state is S.TxnState.ONGOING and again.partitions == {TP2}


def test_fencing_by_a_newer_producer_and_kip360_recovery():
    m = fresh()
    _, m = S.add_partitions(m, 42, 0, [TP1], 2000)
    r = S.init_producer_id(m, "tx", 60000, -1, -1, None, 2100)     # a second instance starts
    assert r.error == ErrorCode.CONCURRENT_TRANSACTIONS and r.abort_first
    aborting = S.fence_and_abort(m, 2100)
    assert aborting.state is S.TxnState.PREPARE_ABORT and aborting.producer_epoch == 1
    # the old producer (epoch 0) is fenced everywhere
    assert S.end_txn(aborting, 42, 0, True, 2200).error == ErrorCode.PRODUCER_FENCED
    assert S.add_partitions(aborting, 42, 0, [TP2], 2200)[0] == ErrorCode.PRODUCER_FENCED
    done = S.complete(aborting, 2300)
    r = S.init_producer_id(done, "tx", 60000, -1, -1, None, 2400)  # the new instance retries
    assert r.metadata.producer_epoch == 2 and r.metadata.state is S.TxnState.EMPTY
    new = r.metadata
    assert S.add_partitions(new, 42, 1, [TP1], 2500)[0] == ErrorCode.PRODUCER_FENCED
    # KIP-360: only the current (pid, epoch) may ask for a bump
    assert S.init_producer_id(new, "tx", 60000, 42, 0, None, 2600).error == ErrorCode.PRODUCER_FENCED
    ok = S.init_producer_id(new, "tx", 60000, 42, 2, None, 2600)
    assert ok.error == ErrorCode.NONE and ok.metadata.producer_epoch == 3


def test_timeout_abort_lets_the_timed_out_producer_recover():
    m = fresh()
    _, m = S.add_partitions(m, 42, 0, [TP1], 2000)
    assert not S.timed_out(m, 2000 + 60000)
    assert S.timed_out(m, 2000 + 60001)
    done = S.complete(S.fence_and_abort(m, 70000), 70100)
    assert done.state is S.TxnState.COMPLETE_ABORT and done.producer_epoch == 1
    assert S.end_txn(done, 42, 0, True, 70200).error == ErrorCode.PRODUCER_FENCED
    r = S.init_producer_id(done, "tx", 60000, 42, 0, None, 70300)   # KIP-360 with its old epoch
    assert r.error == ErrorCode.NONE and r.metadata.producer_epoch == 2


def test_epoch_overflow_takes_a_new_producer_id():
    m = S.TransactionMetadata("tx", 42, S.MAX_EPOCH, 1000)
    r = S.init_producer_id(m, "tx", 1000, -1, -1, None, 1)
    assert r.needs_new_producer_id
    r = S.init_producer_id(m, "tx", 1000, -1, -1, 77, 1)
    assert (r.metadata.producer_id, r.metadata.producer_epoch) == (77, 0)
    assert r.metadata.last_producer_id == 42


def test_end_txn_v5_bumps_the_epoch_per_transaction():
    """KIP-890 part 2: every EndTxn v5 moves the producer to epoch + 1 (markers included); a
    retried EndTxn with the old epoch is answered as done; the old epoch is fenced."""
    m = fresh()
    _, m = S.add_partitions(m, 42, 0, [TP1], 2000)
    r = S.end_txn(m, 42, 0, True, 3000, bump=True)
    p = r.metadata
    assert r.error == ErrorCode.NONE and p.state is S.TxnState.PREPARE_COMMIT
    assert (p.producer_epoch, p.last_producer_epoch) == (1, 0)    # markers go out under epoch 1
    assert S.end_txn(p, 42, 0, True, 3001, bump=True).error == ErrorCode.CONCURRENT_TRANSACTIONS
    c = S.complete(p, 3100)
    assert c.producer_after_end() == (42, 1)
    assert S.end_txn(c, 42, 0, True, 3200, bump=True) == S.EndResult()     # retry: done
    assert S.end_txn(c, 42, 0, False, 3200, bump=True).error == ErrorCode.PRODUCER_FENCED
    # the old epoch can no longer add or verify partitions: a late write of the finished
    # transaction cannot join the next one
    assert S.add_partitions(c, 42, 0, [TP1], 3300)[0] == ErrorCode.PRODUCER_FENCED
    assert S.verify_partitions(c, 42, 0, [TP1]) == {TP1: ErrorCode.PRODUCER_FENCED}
    _, n = S.add_partitions(c, 42, 1, [TP1], 3400)
    r = S.end_txn(n, 42, 1, False, 3500, bump=True)
    assert r.metadata.state is S.TxnState.PREPARE_ABORT and r.metadata.producer_epoch == 2
    # without the bump (EndTxn v0-v4) the epoch stays
    _, n = S.add_partitions(S.complete(r.metadata, 3600), 42, 2, [TP1], 3700)
    assert S.end_txn(n, 42, 2, True, 3800).metadata.producer_epoch == 2
    assert S.TransactionMetadata.from_record("tx", p.to_record()) == p
    old = p.to_record()[:9]                                  # a record from before the field
    assert S.TransactionMetadata.from_record("tx", old).next_producer_id == -1


def test_end_txn_v5_at_epoch_overflow_moves_to_a_new_producer_id():
    m = S.TransactionMetadata("tx", 42, S.MAX_EPOCH, 1000)
    _, m = S.add_partitions(m, 42, S.MAX_EPOCH, [TP1], 2000)
    r = S.end_txn(m, 42, S.MAX_EPOCH, True, 3000, bump=True)
    assert r.needs_new_producer_id
    p = S.end_txn(m, 42, S.MAX_EPOCH, True, 3000, bump=True, fresh_pid=77).metadata
    # markers: the old id at the last epoch; the producer: the new id at epoch 0
    assert (p.producer_id, p.producer_epoch, p.next_producer_id) == (42, S.MAX_EPOCH + 1, 77)
    assert p.producer_after_end() == (77, 0)
    assert S.TransactionMetadata.from_record("tx", p.to_record()) == p
    c = S.complete(p, 3100)
    assert (c.producer_id, c.producer_epoch, c.last_producer_id) == (77, 0, 42)
    assert c.producer_after_end() == (77, 0)
    assert S.end_txn(c, 42, S.MAX_EPOCH, True, 3200, bump=True) == S.EndResult()   # retried
    assert S.add_partitions(c, 77, 0, [TP1], 3300)[1].state is S.TxnState.ONGOING


def test_errors_and_invalid_transitions():
    m = fresh()
    assert S.add_partitions(m, 7, 0, [TP1], 1)[0] == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert S.add_partitions(None, 7, 0, [TP1], 1)[0] == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert S.end_txn(m, 42, 0, True, 1).error == ErrorCode.INVALID_TXN_STATE        # nothing open
    assert S.validate_timeout(0, 900000) == ErrorCode.INVALID_TRANSACTION_TIMEOUT
    assert S.validate_timeout(900001, 900000) == ErrorCode.INVALID_TRANSACTION_TIMEOUT
    with pytest.raises(S.InvalidTransition):
        m.transition(S.TxnState.COMPLETE_COMMIT, 1)
    _, on = S.add_partitions(m, 42, 0, [TP1], 2)
    assert S.verify_partitions(on, 42, 0, [TP1, TP2]) == {TP1: ErrorCode.NONE,
                                                         TP2: ErrorCode.INVALID_TXN_STATE}
    assert S.verify_partitions(on, 42, 1, [TP1]) == {TP1: ErrorCode.PRODUCER_FENCED}
    assert S.verify_partitions(m, 42, 0, [TP1]) == {TP1: ErrorCode.INVALID_TXN_STATE}


# -- partition side ---------------------------------------------------------------------------------

def _header(data):
    return next(iter_batches(memoryview(data)))


def _data(pid, epoch, seq, offset, n=2, txn=True):
    return _header(build_batch([(b"k", b"v", [], 0)] * n, base_offset=offset, producer_id=pid,
                               producer_epoch=epoch, base_sequence=seq, is_transactional=txn))


def _marker(pid, epoch, commit, offset):
    return _header(build_end_txn_marker(commit, pid, epoch, 0, base_offset=offset))


def test_last_stable_offset_and_aborted_ranges():
    s = ProducerStateManager()
    aborts = []
    s.on_abort = lambda *a: aborts.append(a)
    s.update_from_header(_data(1, 0, 0, 0))            # pid 1: 0-1
    s.update_from_header(_data(2, 0, 0, 2))            # pid 2: 2-3
    assert s.last_stable_offset(4) == 0
    s.update_from_header(_marker(1, 0, False, 4))      # abort pid 1
    assert s.last_stable_offset(5) == 2
    s.update_from_header(_data(3, 0, 0, 5, txn=False))  # idempotent only: never unstable
    s.update_from_header(_marker(2, 0, True, 7))       # commit pid 2
    assert s.last_stable_offset(8) == 8 and s.last_stable_offset(6) == 6
    # (pid, first offset, marker, LSO right after the abort: pid 2 still open at 2)
    assert aborts == [(1, 0, 4, 2)]
    # (a truncation that cuts the abort marker reopens the transaction: the state is reloaded
    # from the log, test_log_txn_index.py)


def test_marker_with_a_newer_epoch_fences_late_writes():
    s = ProducerStateManager()
    s.update_from_header(_data(1, 0, 0, 0))
    s.update_from_header(_marker(1, 1, False, 2))      # coordinator aborted under epoch 1
    assert s.check(1, 0, 2, 3).error == ErrorCode.INVALID_PRODUCER_EPOCH
    assert s.check(1, 1, 0, 0).error == ErrorCode.NONE


def test_transaction_state_is_rebuilt_from_the_log_after_a_restart(tmp_path):
    """Open and aborted transactions spread over several segments come back from a reopened
    log exactly as they were tracked on append (the producer state replay of recovery)."""
    from partition_server.log import LogConfig, PartitionLog
    from partition_server.txn.producer_state import rebuild_from_segments

    from partition_server.txn import snapshot
    plog = PartitionLog(str(tmp_path / "t-0"), LogConfig(segment_bytes=300))
    live = ProducerStateManager()
    live.on_abort = plog.add_aborted_txn

    def data(pid, seq, txn=True):
        info = plog.append_as_leader(build_batch([(b"k", b"v" * 20, [], 0)] * 2, producer_id=pid,
                                                 producer_epoch=0, base_sequence=seq,
                                                 is_transactional=txn), 0, 0)
        live.update(pid, 0, seq, seq + 1, info.first_offset, info.last_offset)
        if txn:
            live.begin_txn(pid, info.first_offset)

    def marker(pid, commit):
        info = plog.append_as_leader(build_end_txn_marker(commit, pid, 0, 0), 0, 0,
                                     origin="coordinator")
        live.end_txn(pid, 0, commit, info.first_offset)

    data(1, 0)
    data(2, 0)
    data(1, 2)
    marker(1, False)          # pid 1 aborted: offsets 0-1 and 4-5
    data(3, 0, txn=False)
    marker(2, True)
    data(1, 4)                # pid 1 again: open
    assert len(plog.segments) > 2
    plog.close()
    reopened = PartitionLog(str(tmp_path / "t-0"), LogConfig(segment_bytes=300))
    rebuilt = rebuild_from_segments(reopened.segments)
    assert rebuilt.ongoing == live.ongoing == {1: 10}
    assert list(rebuilt.finished) == list(live.finished)
    # the abort is in the .txnindex of the segment holding its marker (offset 6), LSO 2
    assert [(t.producer_id, t.first_offset, t.last_offset, t.last_stable_offset)
            for t in reopened.collect_aborted_txns(0, 20)] == [(1, 0, 6, 2)]
    snapshot.rebuild(reopened)                    # replay re-adds nothing twice
    assert len(reopened.collect_aborted_txns(0, 20)) == 1
    assert rebuilt.last_stable_offset(100) == 10
    assert {p: e.last_seq for p, e in rebuilt.producers.items()} == \
        {p: e.last_seq for p, e in live.producers.items()}
    reopened.close()


def test_idle_producers_expire_unless_in_a_transaction():
    s = ProducerStateManager()
    s.update(1, 0, 0, 0, 0, 0, timestamp_ms=1000)
    s.update(2, 0, 0, 0, 1, 1, timestamp_ms=1000)
    s.begin_txn(2, 1)
    s.update(3, 0, 0, 0, 2, 2, timestamp_ms=5000)
    assert s.expire_producers(now_ms=7000, expiration_ms=3000) == [1]
    assert set(s.producers) == {2, 3}                 # 2 has an open transaction
    assert s.check(1, 0, 1, 1).error == ErrorCode.UNKNOWN_PRODUCER_ID


def test_a_producer_last_seen_in_a_bumped_marker_expires_with_its_coordinator_epoch():
    """A marker with a bumped epoch (KIP-890 part 2 bumps it every transaction; a coordinator's
    abort does too) makes a new entry: it carries the marker's time, so it expires, and the
    markers' coordinator epoch goes with it (both were kept for the log's life)."""
    s = ProducerStateManager()
    s.update_from_header(_data(1, 0, 0, 0))                      # timestamp 0
    s.update_from_header(_header(build_end_txn_marker(True, 1, 1, 5, base_offset=2,
                                                      timestamp_ms=1000)))
    assert s.producers[1].epoch == 1 and s.producers[1].last_ms == 1000
    assert s.expire_producers(now_ms=3500, expiration_ms=3000) == []
    assert s.expire_producers(now_ms=4001, expiration_ms=3000) == [1]
    assert s.producers == {} and s.coordinator_epochs == {}


def test_markers_from_an_older_coordinator_are_fenced():
    s = ProducerStateManager()
    s.update_from_header(_data(1, 0, 0, 0))
    s.update_from_header(_header(build_end_txn_marker(True, 1, 0, 5, base_offset=2)))
    assert s.coordinator_epochs == {1: 5}
    assert s.marker_fenced(1, 4) and not s.marker_fenced(1, 5) and not s.marker_fenced(2, 0)
