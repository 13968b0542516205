"""Per-segment aborted-transaction index (`.txnindex`, log/txn_index.py): what a read_committed
Fetch reports, across segments, through truncation, retention, crashes and restarts."""

import os

from partition_server.log import LogConfig, PartitionLog
from partition_server.log.txn_index import ENTRY, AbortedTxn, TransactionIndex
from partition_server.txn import snapshot as snap
from wire.records.batch import build_batch, build_end_txn_marker


def test_index_append_collect_truncate_reload(tmp_path):
    path = str(tmp_path / "00000000000000000000.txnindex")
    idx = TransactionIndex(path)
    idx.append(AbortedTxn(1, 0, 10, 5))
    idx.append(AbortedTxn(2, 5, 20, 21))
    idx.append(AbortedTxn(2, 5, 20, 21))          # replayed: skipped
    idx.append(AbortedTxn(3, 1, 15, 16))          # behind the last marker: skipped too
    assert [t.producer_id for t in idx.entries] == [1, 2]
    # [12, 30): pid 1's marker is before 12; pid 2's LSO 21 < 30, so the search is not complete
    assert idx.collect(12, 30) == ([AbortedTxn(2, 5, 20, 21)], False)
    # [0, 8): both have data below 8; pid 2's LSO 21 >= 8 completes the search
    assert idx.collect(0, 8) == ([AbortedTxn(1, 0, 10, 5), AbortedTxn(2, 5, 20, 21)], True)
    assert idx.collect(0, 4) == ([AbortedTxn(1, 0, 10, 5)], True)
    idx.flush()
    assert TransactionIndex(path).entries == idx.entries
    idx.truncate_to(20)                           # pid 2's marker was cut
    assert TransactionIndex(path).entries == [AbortedTxn(1, 0, 10, 5)]
    with open(path, "ab") as f:                   # a torn entry from a crash
        f.write(b"\x00\x00\x00")
    assert TransactionIndex(path).entries == [AbortedTxn(1, 0, 10, 5)]
    assert os.path.getsize(path) == ENTRY.size
    idx.truncate_to(0)
    assert not os.path.exists(path)


def _log(tmp_path, **cfg):
    return PartitionLog(str(tmp_path / "t-0"), LogConfig(segment_bytes=300, **cfg))


def _data(plog, pid, seq, txn=True, n=2):
    return plog.append_as_leader(build_batch([(b"k", b"v" * 20, [], 0)] * n, producer_id=pid,
                                             producer_epoch=0, base_sequence=seq,
                                             is_transactional=txn), 0, 0)


def _marker(plog, state, pid, commit):
    info = plog.append_as_leader(build_end_txn_marker(commit, pid, 0, 0), 0, 0,
                                 origin="coordinator")
    state.end_txn(pid, 0, commit, info.first_offset)
    return info.first_offset


def _aborted(plog, start, upper):
    return [(t.producer_id, t.first_offset) for t in plog.collect_aborted_txns(start, upper)]


def test_an_abort_marker_many_segments_after_its_data_is_found(tmp_path):
    """pid 1's transaction starts in the first segment; its ABORT lands segments later. A fetch
    of the first segment alone must still report it, and one after the marker must not."""
    plog = _log(tmp_path)
    state = snap.rebuild(plog)
    first = _data(plog, 1, 0).first_offset
    state.begin_txn(1, first)
    seq = 0
    while len(plog.segments) < 4:
        seq += 2
        _data(plog, 2, seq - 2, txn=False)        # idempotent traffic rolls segments
    marker = _marker(plog, state, 1, False)
    files = [n for n in os.listdir(plog.directory) if n.endswith(".txnindex")]
    assert len(files) == 1 and plog.segments[-1].txn_index.entries     # marker's segment only
    assert _aborted(plog, 0, 2) == [(1, 0)]
    assert _aborted(plog, 0, plog.segments[1].base_offset) == [(1, 0)]
    assert _aborted(plog, marker + 1, marker + 5) == []
    # a committed transaction is never reported
    state.begin_txn(3, _data(plog, 3, 0).first_offset)
    _marker(plog, state, 3, True)
    assert _aborted(plog, 0, plog.log_end_offset) == [(1, 0)]
    plog.close()


def test_truncation_retention_and_delete_records_take_their_entries(tmp_path):
    plog = _log(tmp_path)
    state = snap.rebuild(plog)
    markers = []
    for pid in (1, 2, 3, 4):
        state.begin_txn(pid, _data(plog, pid, 0).first_offset)
        markers.append(_marker(plog, state, pid, False))
    assert [p for p, _ in _aborted(plog, 0, plog.log_end_offset)] == [1, 2, 3, 4]
    plog.truncate_to(markers[3])                  # a diverged follower loses pid 4's marker
    state = snap.rebuild(plog)                    # (what HostedPartition.truncated does)
    assert [p for p, _ in _aborted(plog, 0, plog.log_end_offset)] == [1, 2, 3]
    assert state.ongoing == {4: markers[2] + 1}
    doomed = plog.segments[0]
    plog.delete_records_before(plog.segments[1].base_offset)
    assert not os.path.exists(doomed.txn_index.path)
    left = [p for p, _ in _aborted(plog, plog.log_start_offset, plog.log_end_offset)]
    assert 1 not in left and 3 in left
    plog.close()


def test_aborts_survive_a_crash_and_a_restart(tmp_path):
    """Unclean shutdown: the index holds what was appended; the producer-state replay from the
    last snapshot re-adds nothing twice; a snapshot written before a legacy-format upgrade hands
    its aborted list to the index."""
    plog = _log(tmp_path)
    state = snap.rebuild(plog)
    state.begin_txn(1, _data(plog, 1, 0).first_offset)
    _marker(plog, state, 1, False)
    plog.flush_txn_indexes()
    snap.write_snapshot(plog.directory, state, plog.log_end_offset)
    state.begin_txn(2, _data(plog, 2, 0).first_offset)
    m2 = _marker(plog, state, 2, False)
    for seg in plog.segments:                     # crash: no clean-shutdown marker
        seg.abandon()
    again = _log(tmp_path)
    snap.rebuild(again)
    assert _aborted(again, 0, again.log_end_offset) == [(1, 0), (2, m2 - 2)]
    assert sum(len(s.txn_index.entries) for s in again.segments) == 2
    again.close()


def test_a_legacy_snapshot_moves_its_aborted_list_into_the_index(tmp_path):
    import msgpack
    plog = _log(tmp_path)
    state = snap.rebuild(plog)
    state.begin_txn(7, _data(plog, 7, 0).first_offset)
    marker = plog.append_as_leader(build_end_txn_marker(False, 7, 0, 0), 0, 0,
                                   origin="coordinator").first_offset
    # as an older version wrote it: aborts only in the snapshot, no .txnindex
    state.ongoing.clear()
    d = msgpack.unpackb(snap.encode(state, plog.log_end_offset))
    d["aborted"] = [[marker, 7, 0]]
    d["committed"] = []
    with open(os.path.join(plog.directory, f"{plog.log_end_offset:020d}.producer-snapshot"),
              "wb") as f:
        f.write(msgpack.packb(d))
    assert _aborted(plog, 0, plog.log_end_offset) == []
    snap.rebuild(plog)
    assert _aborted(plog, 0, plog.log_end_offset) == [(7, 0)]
    plog.close()
