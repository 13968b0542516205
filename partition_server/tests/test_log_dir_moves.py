"""JBOD in one process: a ReplicaManager over several log directories. AlterReplicaLogDirs
(log_dir_moves.py) copies a future log while the current one takes appends and truncations,
then swaps it in; one directory failing takes only its replicas offline; DescribeLogDirs
answers per directory with future logs; offline_replicas.pending says what to report."""

from __future__ import annotations

import os
import types
import uuid

import trio
import trio.testing

from metadata_quorum.image import MetadataImage
from metadata_quorum import records as r
from partition_server.handlers.log_dirs import (handle_alter_replica_log_dirs,
                                                handle_describe_log_dirs)
from partition_server.log import LogConfig, PartitionLog
from partition_server.log_dir_moves import ReplicaMover
from partition_server.log_dirs import LogDirs
from partition_server.offline_replicas import pending
from partition_server.replica_manager import ReplicaManager
from wire.errors import ErrorCode
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS
from wire.records.batch import build_batch

T0 = 1_700_000_000_000
TID = uuid.uuid4()


def _broker(tmp_path, n_dirs=2, broker_id=0):
    dirs = LogDirs([str(tmp_path / f"d{i}") for i in range(n_dirs)], broker_id)

    def opener(topic, partition, cfg):
        return PartitionLog(os.path.join(dirs.place(topic, partition).path,
                                         f"{topic}-{partition}"), LogConfig(), T0, lazy=True)
    rm = ReplicaManager(broker_id, opener)
    rm.log_dirs = dirs
    rm.storage_fault_file = "FAULT"
    rm.dir_moves = ReplicaMover(rm, dirs, None)
    return rm, dirs


def _lead(rm, partition, epoch=1, topic="t"):
    rm.apply_partition(topic, TID, partition, [0, 1], [0, 1], 0, epoch, epoch, {}, 1, T0)


def _append(rm, partition, n, topic="t"):
    batch = build_batch([(b"k%d" % i, b"v" * 50, [], T0) for i in range(n)])
    res = rm.append_records(topic, partition, batch, 1, T0)
    assert res.error == ErrorCode.NONE, res
    return res


def _values(plog):
    data = plog.read(plog.log_start_offset, 1 << 30, min_one=True).read_bytes()
    return len(data), plog.log_end_offset


def test_a_move_copies_while_appends_go_on_then_swaps(tmp_path):
    rm, dirs = _broker(tmp_path)
    _lead(rm, 0)
    _append(rm, 0, 100)
    src = dirs.placement[("t", 0)]
    dest = next(d for d in dirs.dirs if d is not src)
    mover = rm.dir_moves
    assert mover.alter(("t", 0), dest.path) == ErrorCode.NONE
    assert mover.alter(("t", 0), dest.path) == ErrorCode.NONE          # asked twice: one move
    move = mover.moves[("t", 0)]
    assert move.future.directory.startswith(dest.path) and move.future.directory.endswith("-future")
    mover._copy(rm.get("t", 0).log, move.future)
    _append(rm, 0, 50)                         # the current log grows meanwhile
    rm.get("t", 0).log.assign_epoch_start(2, rm.get("t", 0).log.log_end_offset)
    assert mover.lag(("t", 0)) == 50
    before = _values(rm.get("t", 0).log)
    mover._step(move)                          # catches up and swaps in one step
    hosted = rm.get("t", 0)
    assert ("t", 0) not in mover.moves and dirs.placement[("t", 0)] is dest
    assert hosted.log.directory == os.path.join(dest.path, "t-0")
    assert hosted.state.log is hosted.log
    assert _values(hosted.log) == before
    assert hosted.log.latest_epoch == 2        # an epoch with no batch yet came along
    assert [n for n in os.listdir(src.path) if n.startswith("t-0")] == [
        os.path.basename(mover._trash[0])]     # the old copy, renamed, waits for deletion
    assert _append(rm, 0, 5).base_offset == 150                         # serving from dest


def test_a_truncated_current_log_is_copied_again_from_its_start(tmp_path):
    rm, dirs = _broker(tmp_path)
    rm.apply_partition("t", TID, 0, [0, 1], [0, 1], 1, 1, 1, {}, 1, T0)   # a follower
    plog = rm.get("t", 0).log
    plog.append_as_follower(build_batch([(None, b"a", [], T0)] * 10, base_offset=0,
                                        partition_leader_epoch=1))
    dest = next(d for d in dirs.dirs if d is not dirs.placement[("t", 0)])
    rm.dir_moves.alter(("t", 0), dest.path)
    move = rm.dir_moves.moves[("t", 0)]
    rm.dir_moves._copy(plog, move.future)
    assert move.future.log_end_offset == 10
    plog.truncate_to(4)                        # diverged: the leader's epoch 2 took over at 4
    plog.append_as_follower(build_batch([(None, b"b", [], T0)] * 3, base_offset=4,
                                        partition_leader_epoch=2))
    rm.dir_moves._step(move)
    new = rm.get("t", 0).log
    assert new.directory.startswith(dest.path) and new.log_end_offset == 7
    assert new.end_offset_for(1) == (1, 4) and new.latest_epoch == 2


def test_refusals_are_kafkas(tmp_path):
    rm, dirs = _broker(tmp_path)
    _lead(rm, 0)
    mover = rm.dir_moves
    assert mover.alter(("t", 0), "/no/such") == ErrorCode.LOG_DIR_NOT_FOUND
    assert mover.alter(("t", 9), dirs.dirs[1].path) == ErrorCode.REPLICA_NOT_AVAILABLE
    assert dirs.preferred[("t", 9)] is dirs.dirs[1]          # used once it is hosted here
    assert mover.alter(("t", 0), dirs.placement[("t", 0)].path) == ErrorCode.NONE   # already
    assert not mover.moves
    other = next(d for d in dirs.dirs if d is not dirs.placement[("t", 0)])
    rm.storage_failed(None, OSError("EIO"), other)
    assert mover.alter(("t", 0), other.path) == ErrorCode.KAFKA_STORAGE_ERROR


def test_one_failed_directory_takes_only_its_replicas_offline(tmp_path):
    rm, dirs = _broker(tmp_path)
    for p in range(4):
        _lead(rm, p)
        _append(rm, p, 3)
    failed = []
    rm.on_log_dir_failure = failed.append
    bad = dirs.placement[("t", 1)]
    open(os.path.join(bad.path, "FAULT"), "w").close()
    res = rm.append_records("t", 1, build_batch([(None, b"x", [], T0)]), 1, T0)
    assert res.error == ErrorCode.KAFKA_STORAGE_ERROR and failed == [bad]
    offline = {p for p in range(4) if rm.get("t", p).offline}
    assert offline == {p for p in range(4) if dirs.placement[("t", p)] is bad} and offline != {0, 1, 2, 3}
    good = next(p for p in range(4) if p not in offline)
    assert _append(rm, good, 1).error == ErrorCode.NONE          # the other directory serves
    assert not rm.log_dir_failed
    # what the broker reports: offline replicas the image still shows it leading
    image = MetadataImage().apply_all(0, [
        r.RegisterBrokerRecord(0, "i0", 1, "h", 1, None), r.RegisterBrokerRecord(1, "i1", 1, "h", 2, None),
        r.TopicRecord("t", TID)] + [r.PartitionRecord(TID, p, (0, 1), (0, 1), 0, 1, 1)
                                    for p in range(4)])
    assert pending(rm, image, 0) == {bad.dir_id: {TID: sorted(offline)}}
    # metrics: every directory's file system, and Kafka's OfflineLogDirectoryCount
    from partition_server.broker_metrics import log_families
    fams = {name: samples for name, _, _, samples in log_families(rm, [d.path for d in dirs.dirs])}
    assert fams["raftka_offline_log_directory_count"] == [("", 1)]
    assert [lbl for lbl, _ in fams["raftka_log_dir_free_bytes"]] == [
        f'{{dir="{d.path}"}}' for d in dirs.dirs]


def _describe(rm, dirs):
    cls = REQUESTS[ApiKey.DESCRIBE_LOG_DIRS]
    req = types.SimpleNamespace(body=cls(topics=None), api_version=4)
    hctx = types.SimpleNamespace(config={"log.dirs": [d.path for d in dirs.dirs]}, replicas=rm)
    return trio.run(handle_describe_log_dirs, hctx, req)


def test_describe_log_dirs_answers_per_directory_with_future_logs(tmp_path):
    rm, dirs = _broker(tmp_path)
    for p in range(2):
        _lead(rm, p)
        _append(rm, p, 20)
    src = dirs.placement[("t", 0)]
    dest = next(d for d in dirs.dirs if d is not src)
    cls = REQUESTS[ApiKey.ALTER_REPLICA_LOG_DIRS]
    resp = trio.run(handle_alter_replica_log_dirs, types.SimpleNamespace(replicas=rm),
                    types.SimpleNamespace(body=cls(dirs=[cls.AlterReplicaLogDir(
                        path=dest.path, topics=[cls.AlterReplicaLogDirTopic(
                            name="t", partitions=[0])])]), api_version=2))
    assert [(t.topic_name, p.partition_index, p.error_code) for t in resp.results
            for p in t.partitions] == [("t", 0, ErrorCode.NONE)]
    resp = _describe(rm, dirs)
    got = {(res.log_dir, t.name, p.partition_index, p.is_future_key): p.offset_lag
           for res in resp.results for t in res.topics for p in t.partitions}
    assert got[(src.path, "t", 0, False)] == 0
    assert got[(dest.path, "t", 0, True)] == 20           # the future: 20 records behind
    assert [res.log_dir for res in resp.results] == [d.path for d in dirs.dirs]
    assert all(res.total_bytes > 0 for res in resp.results)
    rm.storage_failed(None, OSError("EIO"), dest)          # the move stops with its directory
    assert not rm.dir_moves.moves
    by_dir = {res.log_dir: res for res in _describe(rm, dirs).results}
    assert by_dir[dest.path].error_code == ErrorCode.KAFKA_STORAGE_ERROR
    assert by_dir[src.path].error_code == ErrorCode.NONE and by_dir[src.path].topics


def _fill(rm, batches, partition=0):
    for _ in range(batches):
        _append(rm, partition, 100)            # ~6 KB a batch


def test_a_move_interrupted_by_a_stop_resumes_from_its_future_log(tmp_path):
    rm, dirs = _broker(tmp_path)
    _lead(rm, 0)
    _fill(rm, 40)
    src = dirs.placement[("t", 0)]
    dest = next(d for d in dirs.dirs if d is not src)
    assert rm.dir_moves.alter(("t", 0), dest.path) == ErrorCode.NONE
    move = rm.dir_moves.moves[("t", 0)]
    rm.dir_moves._copy(rm.get("t", 0).log, move.future, 50_000)
    copied = move.future.log_end_offset
    assert 0 < copied < rm.get("t", 0).log.log_end_offset
    future_dir = move.future.directory
    move.future.close()                        # the broker stops here
    before = _values(rm.get("t", 0).log)
    rm.close_all()
    rm, dirs = _broker(tmp_path)               # and starts again
    assert dirs.resumable[("t", 0)] == (dirs.by_path(dest.path), future_dir)
    _lead(rm, 0)
    assert rm.dir_moves._resume(("t", 0))      # hosted: the copy carries on where it was
    move = rm.dir_moves.moves[("t", 0)]
    assert move.future.directory == future_dir and move.future.log_end_offset == copied
    assert not dirs.resumable
    rm.dir_moves._step(move)
    hosted = rm.get("t", 0)
    assert hosted.log.directory == os.path.join(dest.path, "t-0") and dirs.placement[("t", 0)] \
        .path == dest.path
    assert _values(hosted.log) == before
    # only what the future lacked was copied after the restart
    assert 0 < rm.dir_moves.copied < before[0]


def test_an_interrupted_move_of_a_partition_no_longer_ours_is_deleted(tmp_path):
    rm, dirs = _broker(tmp_path)
    _lead(rm, 0)
    _fill(rm, 2)
    dest = next(d for d in dirs.dirs if d is not dirs.placement[("t", 0)])
    rm.dir_moves.alter(("t", 0), dest.path)
    future_dir = rm.dir_moves.moves[("t", 0)].future.directory
    rm.dir_moves.moves[("t", 0)].future.close()
    rm.close_all()
    rm, dirs = _broker(tmp_path)
    assert ("t", 0) in dirs.resumable
    rm.dir_moves.drop_unhosted_futures()       # caught up: t-0 is not hosted here any more
    assert not dirs.resumable and ("t", 0) not in dirs.futures
    assert rm.dir_moves._trash == [future_dir]


def _run_move(rm, dest, rate, change_at=None, new_rate=None):
    """Run the mover under trio's virtual clock until the swap: (seconds taken, bytes)."""
    mover = rm.dir_moves
    mover.set_rate(rate)
    out = {}

    async def main():
        start = trio.current_time()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(mover.run)
            assert mover.alter(("t", 0), dest.path) == ErrorCode.NONE
            if change_at is not None:
                await trio.sleep(change_at)
                out["at_change"], out["changed_at"] = mover.copied, trio.current_time() - start
                mover.set_rate(new_rate)
            while mover.swapped == 0:
                await trio.sleep(0.05)
            out["seconds"] = trio.current_time() - start
            nursery.cancel_scope.cancel()
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    return out


def test_replica_alter_log_dirs_io_max_bytes_per_second_bounds_the_copy(tmp_path):
    rm, dirs = _broker(tmp_path)
    _lead(rm, 0)
    _fill(rm, 100)
    size = rm.get("t", 0).log.size_in_bytes
    assert size > 500_000
    dest = next(d for d in dirs.dirs if d is not dirs.placement[("t", 0)])
    rate = 100_000
    out = _run_move(rm, dest, rate)
    # the bucket starts with one second's credit, then copies at `rate`
    assert rm.dir_moves.copied == size
    assert (size - rate) / rate <= out["seconds"] <= (size - rate) / rate + 1.0, out


def test_a_changed_rate_reaches_the_move_in_progress(tmp_path):
    rm, dirs = _broker(tmp_path)
    _lead(rm, 0)
    _fill(rm, 100)
    size = rm.get("t", 0).log.size_in_bytes
    dest = next(d for d in dirs.dirs if d is not dirs.placement[("t", 0)])
    out = _run_move(rm, dest, 20_000, change_at=2.0, new_rate=None)
    assert out["at_change"] <= 20_000 * 3 + 8192            # bound: 1 s credit + 2 s of rate
    assert out["at_change"] < size
    assert out["seconds"] - out["changed_at"] < 1.0          # unlimited: done at once
    assert rm.dir_moves.copied == size


def test_the_swap_carries_the_producer_state_and_aborted_transactions_across(tmp_path):
    """The future's producer state follows the copy, so the swap replays nothing: it equals a
    replay of the new log, ABORT markers included (read_committed answers the same)."""
    import shutil
    from partition_server.txn import snapshot as producer_snapshot
    from wire.records.batch import build_end_txn_marker
    rm, dirs = _broker(tmp_path)
    _lead(rm, 0)
    plog = rm.get("t", 0).log

    def data(pid, seq, txn):
        plog.append_as_leader(build_batch([(b"k", b"v" * 20, [], T0)] * 3, producer_id=pid,
                                          producer_epoch=0, base_sequence=seq,
                                          is_transactional=txn), 1, T0)
    for round_ in range(20):
        data(1, round_ * 3, False)                                  # idempotent
        data(2, round_ * 3, True)                                   # transactional
        plog.append_as_leader(build_end_txn_marker(round_ % 2 == 0, 2, 0, 1), 1, T0,
                              origin="coordinator")                 # commit / abort in turn
    data(3, 0, True)                                                # still open at the swap
    dest = next(d for d in dirs.dirs if d is not dirs.placement[("t", 0)])
    mover = rm.dir_moves
    mover.alter(("t", 0), dest.path)
    move = mover.moves[("t", 0)]
    while ("t", 0) in mover.moves:
        mover._step(move, 2000)                                     # many small steps
    carried, new = rm.get("t", 0).producers, rm.get("t", 0).log
    assert carried is move.producers                                # kept up, not replayed
    copy = str(tmp_path / "copy" / "t-0")
    shutil.copytree(new.directory, copy)
    replayed_log = PartitionLog(copy, LogConfig(), T0)
    replayed = producer_snapshot.rebuild(replayed_log)
    assert carried.producers.keys() == replayed.producers.keys() == {1, 2, 3}
    for pid in (1, 2, 3):
        assert carried.producers[pid] == replayed.producers[pid], pid
    assert carried.ongoing == replayed.ongoing and 3 in carried.ongoing
    end = new.log_end_offset
    aborted = [(t.producer_id, t.first_offset) for t in new.collect_aborted_txns(0, end)]
    assert len(aborted) == 10 and aborted == [
        (t.producer_id, t.first_offset) for t in replayed_log.collect_aborted_txns(0, end)]
    assert carried.on_abort == new.add_aborted_txn


def test_the_copy_loop_resumes_off_the_event_loop_with_the_futures_producer_state(tmp_path):
    from wire.records.batch import build_end_txn_marker
    rm, dirs = _broker(tmp_path)
    _lead(rm, 0)
    plog = rm.get("t", 0).log
    for i in range(10):
        plog.append_as_leader(build_batch([(b"k", b"v" * 20, [], T0)] * 3, producer_id=5,
                                          producer_epoch=0, base_sequence=i * 3,
                                          is_transactional=True), 1, T0)
        plog.append_as_leader(build_end_txn_marker(False, 5, 0, 1), 1, T0, origin="coordinator")
    dest = next(d for d in dirs.dirs if d is not dirs.placement[("t", 0)])
    rm.dir_moves.alter(("t", 0), dest.path)
    move = rm.dir_moves.moves[("t", 0)]
    rm.dir_moves._copy(plog, move.future, 500, move)
    rm.close_all()                                  # a clean stop keeps the future
    rm, dirs = _broker(tmp_path)
    _lead(rm, 0)
    trio.run(rm.dir_moves._resume_off_loop, ("t", 0))
    move = rm.dir_moves.moves[("t", 0)]
    assert move.producers is not None and 0 < move.future.log_end_offset
    while ("t", 0) in rm.dir_moves.moves:
        rm.dir_moves._step(move, 500)
    hosted = rm.get("t", 0)
    assert hosted.producers is move.producers and hosted.log.directory.startswith(dest.path)
    assert len(hosted.log.collect_aborted_txns(0, hosted.log.log_end_offset)) == 10
    assert hosted.producers.producers[5].last_seq == 29
