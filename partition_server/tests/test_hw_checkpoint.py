"""High watermark checkpoint (`replication-offset-checkpoint`): file format, atomic writes, and a
restarted replica starting from the checkpointed high watermark instead of 0."""

import os

from partition_server.log import LogConfig, PartitionLog
from partition_server.log.offset_checkpoint import (parse_checkpoint, read_checkpoint,
                                                    write_checkpoint)
from partition_server.replica_manager import ReplicaManager
from wire.records.batch import build_batch

T0 = 1_700_000_000_000


def test_round_trip_in_kafkas_text_format(tmp_path):
    path = str(tmp_path / "replication-offset-checkpoint")
    write_checkpoint(path, {("orders", 1): 99, ("orders", 0): 1234, ("a.b-c_d", 7): 0})
    assert open(path).read() == "0\n3\na.b-c_d 7 0\norders 0 1234\norders 1 99\n"
    assert read_checkpoint(path) == {("orders", 1): 99, ("orders", 0): 1234, ("a.b-c_d", 7): 0}
    assert not os.path.exists(path + ".tmp")


def test_missing_or_malformed_files_read_as_empty(tmp_path):
    path = str(tmp_path / "cp")
    assert read_checkpoint(path) == {}
    for text in ["", "0\n", "1\n0\n", "0\n2\nt 0 5\n", "0\n1\nt 0\n", "0\n1\nt x 5\n",
                 "0\n1\nt 0 -4\n", "zero\n0\n"]:
        with open(path, "w") as f:
            f.write(text)
        assert read_checkpoint(path) == {}, text
    assert parse_checkpoint("0\n0\n") == {}


def _manager(tmp_path, n_records: int) -> ReplicaManager:
    def opener(topic, partition, cfg):
        plog = PartitionLog(str(tmp_path / f"{topic}-{partition}"), LogConfig())
        if plog.log_end_offset == 0 and n_records:
            plog.append_as_leader(build_batch([(None, b"v%d" % i, [], T0) for i in range(n_records)]),
                                  leader_epoch=0, now_ms=T0)
        return plog
    return ReplicaManager(1, opener)


def test_restarted_leader_starts_from_the_checkpointed_high_watermark(tmp_path):
    rm = _manager(tmp_path, 10)
    rm.high_watermarks = {("t", 0): 7}
    # the followers (2, 3) in the ISR have not fetched yet: without a checkpoint this is 0
    rm.apply_partition("t", None, 0, [1, 2, 3], [1, 2, 3], 1, 5, 5, {}, 2, T0)
    assert rm.get("t", 0).state.high_watermark == 7

    fresh = _manager(tmp_path / "other", 10)
    fresh.apply_partition("t", None, 0, [1, 2, 3], [1, 2, 3], 1, 5, 5, {}, 2, T0)
    assert fresh.get("t", 0).state.high_watermark == 0


def test_checkpoint_is_clamped_to_the_log_end(tmp_path):
    rm = _manager(tmp_path, 4)
    rm.high_watermarks = {("t", 0): 50}       # e.g. the log lost an unflushed tail in a crash
    rm.apply_partition("t", None, 0, [1, 2], [1, 2], 2, 1, 1, {}, 1, T0)
    assert rm.get("t", 0).state.high_watermark == 4


def test_what_is_checkpointed(tmp_path):
    rm = _manager(tmp_path, 3)
    rm.high_watermarks = {("t", 0): 2, ("gone", 0): 9, ("later", 0): 5}
    rm.apply_partition("t", None, 0, [1], [1], 1, 1, 1, {}, 1, T0)       # sole replica: HW = LEO
    rm.apply_partition("gone", None, 0, [1], [1], 1, 1, 1, {}, 1, T0)
    rm.remove_partition("gone", 0, delete=True)
    # hosted partitions give their current HW, deleted ones are dropped, and partitions not
    # hosted yet (the image has not arrived) keep their old entry rather than being erased
    assert rm.high_watermarks_to_checkpoint() == {("t", 0): 3, ("later", 0): 5}
    rm.log_dir_failed = True
    assert rm.high_watermarks_to_checkpoint() is None


def test_many_leaderships_are_made_durable_with_one_sync_and_logs_open_ahead(tmp_path,
                                                                           monkeypatch):
    """A start hosting many partitions: their logs open ahead in threads (taken, not reopened,
    by apply_partition) and their new leader epochs are checkpointed without an fsync each, then
    synced once."""
    rm = _manager(tmp_path, 3)
    wanted = [("t", p, {}) for p in range(20)]
    rm.preopen(wanted, threads=3)
    assert len(rm._preopened) == 20
    calls = {"fsync": 0, "sync": 0}
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: calls.__setitem__("fsync", calls["fsync"] + 1)
                        or real_fsync(fd))
    monkeypatch.setattr(os, "sync", lambda: calls.__setitem__("sync", calls["sync"] + 1))
    with rm.batched_epoch_sync():
        for _, p, _ in wanted:
            rm.apply_partition("t", None, p, [1], [1], 1, 7, 7, {}, 1, T0)
    assert not rm._preopened                       # every log taken from the ones opened ahead
    assert calls == {"fsync": 0, "sync": 1}
    rm.close_all()
    with open(tmp_path / "t-3" / "leader-epoch-checkpoint") as f:
        assert f.read().split("\n")[2:] == ["0 0", "7 3", ""]
