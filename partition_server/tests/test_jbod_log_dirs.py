"""A broker's log directories (partition_server/log_dirs.py): directory ids, where logs are
found and placed, Kafka's duplicate-log error, interrupted moves cleaned up at start, a
directory unusable at start."""

from __future__ import annotations

import os
import uuid

import pytest

from partition_server.log_dirs import LOST_DIRECTORY_ID, LogDirError, LogDirs, read_meta


def _dirs(tmp_path, n=3):
    return [str(tmp_path / f"d{i}") for i in range(n)]


def test_each_directory_gets_an_id_kept_across_restarts(tmp_path):
    first = LogDirs(_dirs(tmp_path), 7)
    ids = [d.dir_id for d in first.dirs]
    assert len(set(ids)) == 3
    meta = read_meta(first.dirs[0].path)
    assert meta["node.id"] == "7" and meta["version"] == "1"
    assert uuid.UUID(meta["directory.id"]) == ids[0]
    assert [d.dir_id for d in LogDirs(_dirs(tmp_path), 7).dirs] == ids
    with pytest.raises(LogDirError, match="Stored node id 7 doesn't match previous node id 8"):
        LogDirs(_dirs(tmp_path), 8)
    with pytest.raises(LogDirError, match="Duplicate log directory"):
        LogDirs([_dirs(tmp_path)[0]] * 2, 7)


def test_new_logs_go_to_the_directory_with_fewest_and_found_logs_stay(tmp_path):
    paths = _dirs(tmp_path)
    os.makedirs(os.path.join(paths[2], "old-0"))
    dirs = LogDirs(paths, 1)
    assert dirs.place("old", 0).path == paths[2]
    placed = [dirs.place("t", p).path for p in range(5)]
    # d2 holds one already: d0, d1 first, then round the three
    assert placed[:2] == paths[:2] and sorted(placed[2:]) == sorted(paths)
    assert dirs.place("t", 0).path == paths[0]                      # stable
    dirs.set_future(("x", 0), dirs.dirs[0])                         # a future log counts too
    assert dirs.least_loaded() is not dirs.dirs[0]
    dirs.preferred[("new", 0)] = dirs.dirs[2]                       # AlterReplicaLogDirs before
    assert dirs.place("new", 0) is dirs.dirs[2]
    counts = [d.logs for d in dirs.dirs]
    dirs.forget("t", 0)
    assert ("t", 0) not in dirs.placement
    assert [d.logs for d in dirs.dirs] == [counts[0] - 1] + counts[1:]
    assert sum(counts) == len(dirs.placement) + len(dirs.futures) + 1


def test_a_partition_in_two_directories_is_kafkas_fatal_error(tmp_path):
    paths = _dirs(tmp_path, 2)
    for p in paths:
        os.makedirs(os.path.join(p, "orders-3"))
    with pytest.raises(LogDirError) as exc:
        LogDirs(paths, 1)
    assert str(exc.value).startswith(
        f"Duplicate log directories for orders-3 are found in both {paths[0]}/orders-3 and "
        f"{paths[1]}/orders-3.")
    assert "manually deleting one of the two directories" in str(exc.value)


def test_interrupted_moves_are_finished_or_kept_to_resume_at_start(tmp_path):
    paths = _dirs(tmp_path, 2)
    hex_id = uuid.uuid4().hex
    # a swap stopped between its renames: the current log renamed away, the future not yet
    os.makedirs(os.path.join(paths[0], f"a-0.{hex_id}-delete"))
    os.makedirs(os.path.join(paths[1], f"a-0.{hex_id}-future"))
    # a copy that never finished: the current log is still there
    os.makedirs(os.path.join(paths[0], "b-1"))
    os.makedirs(os.path.join(paths[1], f"b-1.{hex_id}-future"))
    dirs = LogDirs(paths, 1)
    assert sorted(os.listdir(paths[0])) == ["b-1", "meta.properties"]
    assert sorted(os.listdir(paths[1])) == ["a-0", f"b-1.{hex_id}-future", "meta.properties"]
    assert dirs.placement[("a", 0)].path == paths[1]
    assert dirs.placement[("b", 1)].path == paths[0]
    # the unfinished copy is kept for the mover to resume (log_dir_moves.py), as Kafka does
    assert dirs.resumable == {("b", 1): (dirs.dirs[1], os.path.join(paths[1],
                                                                   f"b-1.{hex_id}-future"))}
    assert dirs.futures[("b", 1)] is dirs.dirs[1]


def test_a_directory_unusable_at_start_is_offline_and_may_hold_unfound_logs(tmp_path):
    paths = _dirs(tmp_path, 2)
    with open(paths[1], "w") as f:          # a file where a directory should be
        f.write("not a directory")
    dirs = LogDirs(paths, 1)
    assert [d.online for d in dirs.dirs] == [True, False]
    assert dirs.offline_ids() == [LOST_DIRECTORY_ID] and dirs.dirs[1].error   # Kafka's LOST id
    # a partition not found in the online directory may live on the failed one: never
    # recreated empty elsewhere (Kafka's rule while a directory is offline)
    assert dirs.place("t", 0) is dirs.dirs[1]


def test_failing_every_directory_calls_for_a_shutdown(tmp_path):
    dirs = LogDirs(_dirs(tmp_path, 2), 1)
    calls = []
    dirs.on_all_failed = lambda: calls.append(True)
    assert dirs.fail(dirs.dirs[0], OSError("EIO")) is True
    assert dirs.fail(dirs.dirs[0], OSError("EIO")) is False and calls == []
    assert dirs.offline_ids() == [dirs.dirs[0].dir_id]
    assert dirs.least_loaded() is dirs.dirs[1]
    dirs.fail(dirs.dirs[1], OSError("EIO"))
    assert calls == [True]
    with pytest.raises(OSError):
        dirs.least_loaded()


def test_the_directory_of_a_log_is_remembered_and_the_memory_bounded(tmp_path, monkeypatch):
    from partition_server import log_dirs as log_dirs_mod
    monkeypatch.setattr(log_dirs_mod, "OF_LOG_MEMORY", 2)
    dirs = LogDirs(_dirs(tmp_path), 1)
    a, b = dirs.dirs[:2]
    assert dirs.of_log(os.path.join(a.path, "t-0")) is a
    assert dirs.of_log(os.path.join(b.path, "t-1")) is b
    assert dirs.of_log(str(tmp_path / "elsewhere" / "t-2")) is None
    assert len(dirs._of_log) == 1                   # the third path cleared the first two
    assert dirs.of_log(os.path.join(a.path, "t-0")) is a       # looked up again
