"""Producer-state snapshots: a reopened log rebuilds from the newest snapshot plus the tail,
equal to a full replay; snapshots past the log end (truncation, lost tail) are never used."""

import os

from partition_server.log import LogConfig, PartitionLog
from partition_server.txn import snapshot as snap
from partition_server.txn.producer_state import rebuild_from_segments
from wire.records.batch import build_batch, build_end_txn_marker


def _open(tmp_path):
    return PartitionLog(str(tmp_path / "t-0"), LogConfig(segment_bytes=400))


def _data(plog, pid, seq, txn=True):
    plog.append_as_leader(build_batch([(b"k", b"v" * 20, [], 0)] * 2, producer_id=pid,
                                      producer_epoch=0, base_sequence=seq, is_transactional=txn),
                          0, 0)


def _marker(plog, pid, commit):
    plog.append_as_leader(build_end_txn_marker(commit, pid, 0, 0), 0, 0, origin="coordinator")


def _same(a, b):
    assert a.ongoing == b.ongoing
    assert list(a.finished) == list(b.finished)
    assert {p: (e.epoch, list(e.batches)) for p, e in a.producers.items()} == \
        {p: (e.epoch, list(e.batches)) for p, e in b.producers.items()}


def test_snapshot_plus_tail_equals_full_replay(tmp_path):
    plog = _open(tmp_path)
    _data(plog, 1, 0)
    _data(plog, 2, 0)
    _marker(plog, 1, False)
    state = snap.rebuild(plog)
    snap.write_snapshot(plog.directory, state, plog.log_end_offset)
    taken_at = plog.log_end_offset
    _data(plog, 1, 2)              # after the snapshot: a new transaction of pid 1
    _marker(plog, 2, True)
    _data(plog, 3, 0, txn=False)
    plog.close()
    plog = _open(tmp_path)
    assert snap.snapshot_offsets(plog.directory) == [taken_at]
    _same(snap.rebuild(plog), rebuild_from_segments(plog.segments))
    assert snap.rebuild(plog).ongoing == {1: taken_at}
    plog.close()


def test_snapshots_past_the_log_end_are_dropped(tmp_path):
    plog = _open(tmp_path)
    _data(plog, 1, 0)
    _marker(plog, 1, False)
    early = plog.log_end_offset
    snap.write_snapshot(plog.directory, snap.rebuild(plog), early)
    _data(plog, 1, 2)
    late_state = snap.rebuild(plog)
    snap.write_snapshot(plog.directory, late_state, plog.log_end_offset)
    assert len(snap.snapshot_offsets(plog.directory)) == 2
    plog.truncate_to(early)        # a diverged follower: the late snapshot covers cut records
    assert snap.snapshot_offsets(plog.directory) == [early]
    _data(plog, 2, 0)              # different records reach the old offsets
    _same(snap.rebuild(plog), rebuild_from_segments(plog.segments))
    assert snap.rebuild(plog).ongoing == {2: early}
    # a snapshot written past what survived a crash is ignored too
    snap.write_snapshot(plog.directory, late_state, plog.log_end_offset + 100)
    _same(snap.rebuild(plog), rebuild_from_segments(plog.segments))
    plog.truncate_fully_and_start_at(50)
    assert snap.snapshot_offsets(plog.directory) == []
    plog.close()


def test_unreadable_snapshot_falls_back_to_replay(tmp_path):
    plog = _open(tmp_path)
    _data(plog, 1, 0)
    path = os.path.join(plog.directory, f"{plog.log_end_offset:020d}.producer-snapshot")
    with open(path, "wb") as f:
        f.write(b"\x93garbage")
    _same(snap.rebuild(plog), rebuild_from_segments(plog.segments))
    plog.close()


def test_snapshot_keeps_producer_timestamps(tmp_path):
    plog = _open(tmp_path)
    _data(plog, 1, 0)
    state = snap.rebuild(plog)
    state.producers[1].last_ms = 1234
    _, back, _ = snap.decode(snap.encode(state, plog.log_end_offset))
    assert back.producers[1].last_ms == 1234
    plog.close()


def test_clean_close_snapshots_a_long_log_without_producers_so_start_skips_the_replay(
        tmp_path, monkeypatch):
    from types import SimpleNamespace

    from partition_server.log.segment import LogSegment
    from partition_server.txn.producer_state import ProducerStateManager
    plog = PartitionLog(str(tmp_path / "t-0"), LogConfig())
    small = SimpleNamespace(log=plog, producers=ProducerStateManager(), topic="t", partition=0,
                            offline=False)
    plog.append_as_leader(build_batch([(b"k", b"v" * 100, [], 0)]), 0, 0)
    snap.maybe_snapshot(small, {}, closing=True, fsync=False)
    assert snap.snapshot_offsets(plog.directory) == []         # short: replay is cheap
    for _ in range(snap.REPLAY_CHEAP_BYTES // 1000 + 10):      # plain (non-idempotent) data
        plog.append_as_leader(build_batch([(b"k", b"v" * 1000, [], 0)]), 0, 0)
    snap.maybe_snapshot(small, {}, closing=False)
    assert snap.snapshot_offsets(plog.directory) == []         # periodic: nothing to remember
    snap.maybe_snapshot(small, {}, closing=True, fsync=False)
    assert snap.snapshot_offsets(plog.directory) == [plog.log_end_offset]
    plog.close()
    scanned = []
    real = LogSegment.iter_headers
    monkeypatch.setattr(LogSegment, "iter_headers",
                        lambda self, pos=0: scanned.append(pos) or real(self, pos))
    again = PartitionLog(str(tmp_path / "t-0"), LogConfig())
    scanned.clear()
    state = snap.rebuild(again)
    assert scanned == [] and not state.producers               # no header replay at all
    _data(again, 7, 0)                                         # and the state still moves on
    assert 7 in snap.rebuild(again).producers
    again.close()
