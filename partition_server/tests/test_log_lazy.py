"""Lazily created logs (`PartitionLog(..., lazy=True)`, log/README.md "Lazily created logs"): a
new partition's directory and files appear with its first write; until then nothing is on disk,
and a close, a crash or a restart leaves an empty log, as the eager log would."""

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from partition_server.log import LogConfig, PartitionLog
from partition_server.log.file_cache import OpenFileCache
from partition_server.replica_manager import ReplicaManager
from partition_server.replication.partition import Role
from wire.errors import KafkaError
from wire.records.batch import build_batch, decode_batch, iter_batches


def batch(values, base_offset=0, ts=1_700_000_000_000):
    return build_batch([(None, v, [], ts + i) for i, v in enumerate(values)],
                       base_offset=base_offset)


def values(plog, start=0):
    data = plog.read(start, 1 << 20).read_bytes()
    return [rec.value for h in iter_batches(data) for rec in decode_batch(h.bytes()).records]


def test_an_unwritten_lazy_log_creates_nothing_and_answers_as_an_empty_log(tmp_path):
    d = tmp_path / "t-0"
    plog = PartitionLog(str(d), lazy=True)
    plog.assign_epoch_start(4, 0)
    plog.flush()
    plog.maybe_flush(10**12)
    assert plog.apply_retention(10**12) == 0
    assert (plog.log_start_offset, plog.log_end_offset, plog.latest_epoch) == (0, 0, 4)
    assert plog.end_offset_for(4) == (4, 0)
    assert plog.read(0, 100).size == 0
    assert plog.offset_for_timestamp(0) is None
    assert plog.offset_for_timestamp(-1) == (0, -1)
    with pytest.raises(KafkaError):
        plog.read(1, 100)
    plog.close()
    plog.mark_clean()
    assert not d.exists()
    again = PartitionLog(str(d), lazy=True)
    assert (again.log_end_offset, again.latest_epoch, again.materialized) == (0, -1, False)
    again.delete()
    assert not d.exists()


def test_the_first_append_creates_the_directory_with_the_epochs_held_until_then(tmp_path):
    d = tmp_path / "t-0"
    plog = PartitionLog(str(d), lazy=True)
    plog.assign_epoch_start(2, 0, fsync=False)
    plog.assign_epoch_start(3, 0)
    info = plog.append_as_leader(batch([b"a", b"b"]), 3, 0)
    assert (info.first_offset, info.last_offset) == (0, 1)
    assert plog.materialized and (d / "00000000000000000000.log").exists()
    assert (d / "leader-epoch-checkpoint").read_text() == "0\n2\n2 0\n3 0\n"
    plog.append_as_leader(batch([b"c"]), 3, 0)
    plog.close()
    assert (d / ".clean-shutdown").exists()
    reopened = PartitionLog(str(d), lazy=True)
    assert reopened.materialized and reopened.log_end_offset == 3
    assert reopened.latest_epoch == 3 and values(reopened) == [b"a", b"b", b"c"]


def test_a_crash_after_the_first_append_recovers_the_record_and_its_epoch(tmp_path):
    """A real process killed after an fsynced first append (flush.messages=1): the record and
    the epoch are back after a lazy reopen (the checkpoint, written unsynced, or else rebuilt
    from the batch's partition leader epoch)."""
    d = tmp_path / "t-0"
    child = textwrap.dedent("""
        import sys
        from partition_server.log import LogConfig, PartitionLog
        from wire.records.batch import build_batch
        plog = PartitionLog(sys.argv[1], LogConfig(flush_messages=1), lazy=True)
        plog.assign_epoch_start(7, 0, fsync=False)
        plog.append_as_leader(build_batch([(None, b"x", [], 1)]), 7, 0)
        print("durable", flush=True)
        sys.stdin.read()
    """)
    proc = subprocess.Popen([sys.executable, "-c", child, str(d)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True,
                            cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    try:
        assert proc.stdout.readline().strip() == "durable"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    assert not (d / ".clean-shutdown").exists()
    plog = PartitionLog(str(d), lazy=True)
    assert plog.log_end_offset == 1 and values(plog) == [b"x"] and plog.latest_epoch == 7
    plog.close()
    (d / "leader-epoch-checkpoint").unlink()          # lost: rebuilt from the batch
    assert PartitionLog(str(d), lazy=True).latest_epoch == 7


def test_follower_appends_and_a_reset_to_a_later_start_materialize_the_log(tmp_path):
    follower = PartitionLog(str(tmp_path / "f-0"), lazy=True)
    follower.append_as_follower(batch([b"a"], base_offset=0))
    assert follower.materialized and values(follower) == [b"a"]
    reset = PartitionLog(str(tmp_path / "r-0"), lazy=True)
    reset.truncate_fully_and_start_at(50)
    assert reset.materialized and (reset.log_start_offset, reset.log_end_offset) == (50, 50)
    reset.close()
    assert PartitionLog(str(tmp_path / "r-0"), lazy=True).log_start_offset == 50


def test_lazy_opens_an_existing_directory_as_usual(tmp_path):
    d = str(tmp_path / "t-0")
    eager = PartitionLog(d)
    eager.append_as_leader(batch([b"a"]), 1, 0)
    eager.close()
    plog = PartitionLog(d, lazy=True)
    assert plog.materialized and values(plog) == [b"a"] and plog.latest_epoch == 1


def test_a_replica_manager_hosting_new_partitions_writes_nothing_until_a_record_comes(tmp_path):
    files = OpenFileCache(64)

    def opener(topic, partition, cfg):
        return PartitionLog(str(tmp_path / f"{topic}-{partition}"),
                            LogConfig.from_kafka(cfg), 0, files=files, lazy=True)
    rm = ReplicaManager(0, opener)
    rm.preopen([("t", p, {}) for p in range(3)], threads=2)
    with rm.batched_epoch_sync():
        roles = [rm.apply_partition("t", "id", p, [0, 1], [0, 1], p % 2, 5, 0, {}, 1, 0)
                 for p in range(3)]
    assert roles == [Role.LEADER, Role.FOLLOWER, Role.LEADER]
    assert os.listdir(tmp_path) == []
    assert rm.get("t", 0).log.latest_epoch == 5
    assert rm.append_records("t", 0, batch([b"v"]), acks=1, now_ms=0).error == 0
    assert sorted(os.listdir(tmp_path)) == ["t-0"]
    assert (tmp_path / "t-0" / "leader-epoch-checkpoint").read_text() == "0\n1\n5 0\n"
    rm.close_all()
    assert sorted(os.listdir(tmp_path)) == ["t-0"]
    assert (tmp_path / "t-0" / ".clean-shutdown").exists()
