"""The bounded open-segment-file cache (partition_server/log/file_cache.py) under the real log:
eviction, reopening on use, files held by readers never closed under them, and every log
operation (append, read, truncation, retention, compaction, flush, crash recovery, clean close)
correct on segments whose file was evicted."""

import os

import pytest

from partition_server.log import LogCleaner, LogConfig, PartitionLog
from partition_server.log.file_cache import (MIN_OPEN, OpenFileCache, SegmentGoneError,
                                             default_max_open_files)
from wire.records.batch import build_batch, decode_batch, iter_batches

T0 = 1_700_000_000_000
CAP = MIN_OPEN


def batch(i, key=b"k"):
    return build_batch([(key, b"value-%d" % i, [], T0 + i)])


def values(data: bytes) -> list[bytes]:
    return [r.value for h in iter_batches(data) for r in decode_batch(h.bytes()).records]


def open_fds_to(directory) -> int:
    """Descriptors of this process open on files under `directory`."""
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith(str(directory)):
                n += 1
        except OSError:
            pass
    return n


def make_logs(tmp_path, files, n=3 * CAP, **cfg):
    return [PartitionLog(str(tmp_path / f"t-{i}"), LogConfig(**cfg), T0, files=files)
            for i in range(n)]


def read_all(plog) -> list[bytes]:
    out, offset = [], plog.log_start_offset
    while offset < plog.log_end_offset:
        info = plog.read(offset, 1 << 20)
        out += values(info.read_bytes())
        offset = info.next_offset
    return out


def test_open_files_stay_bounded_and_every_log_works(tmp_path):
    files = OpenFileCache(CAP)
    logs = make_logs(tmp_path, files, segment_bytes=300)      # several segments each
    for round_ in range(6):
        for i, plog in enumerate(logs):
            plog.append_as_leader(batch(round_), 0, T0)
            assert files.cached <= CAP
            assert open_fds_to(tmp_path) <= CAP
    assert files.evictions > 0 and len(logs[0].segments) > 1
    for plog in logs:
        assert read_all(plog) == [b"value-%d" % r for r in range(6)]
        assert plog.offset_for_timestamp(T0 + 3)[0] == 3
    assert open_fds_to(tmp_path) <= CAP


def test_file_held_by_a_reader_is_not_closed_by_eviction(tmp_path):
    files = OpenFileCache(CAP)
    logs = make_logs(tmp_path, files)
    logs[0].append_as_leader(batch(7), 0, T0)
    rng = logs[0].read(0, 1 << 20).ranges[0]
    held = rng.open_file()                    # as a send in progress holds it
    inode = os.fstat(held.fd).st_ino
    for plog in logs[1:]:                     # evicts logs[0]'s segment from the cache
        plog.append_as_leader(batch(1), 0, T0)
    assert logs[0].active._file is None
    assert os.fstat(held.fd).st_ino == inode  # still open, still that file
    assert values(os.pread(held.fd, rng.size, rng.position)) == [b"value-7"]
    del held                                  # the last holder lets go: now it is closed
    assert open_fds_to(logs[0].active.path) == 0
    assert values(rng.read()) == [b"value-7"]  # a range planned before reopens the file


def test_truncation_flush_crash_recovery_and_clean_close_on_evicted_segments(tmp_path):
    files = OpenFileCache(CAP)
    logs = make_logs(tmp_path, files, segment_bytes=300)
    for plog in logs:
        for i in range(8):
            plog.append_as_leader(batch(i), 0, T0)
    for plog in logs:
        plog.truncate_to(5)                   # most of these files were evicted
        plog.append_as_leader(batch(50), 0, T0)
        plog.flush()
    for plog in logs[: len(logs) // 2]:       # half crash (no close, no marker) ...
        for seg in plog.segments:
            seg.abandon()
    for plog in logs[len(logs) // 2:]:        # ... half close cleanly
        plog.close()
    assert open_fds_to(tmp_path) == 0
    files2 = OpenFileCache(CAP)
    expect = [b"value-%d" % i for i in range(5)] + [b"value-50"]
    again = make_logs(tmp_path, files2, segment_bytes=300)
    assert [read_all(p) for p in again] == [expect] * len(again)


def test_retention_of_an_evicted_or_open_segment(tmp_path):
    files = OpenFileCache(CAP)
    logs = make_logs(tmp_path, files, segment_bytes=300, retention_ms=1000,
                     file_delete_delay_ms=500)
    for plog in logs:
        for i in range(8):
            plog.append_as_leader(batch(i), 0, T0)
    planned = [plog.read(0, 1 << 20).ranges[0] for plog in logs]   # reads not yet sent
    old = [r.read() for r in planned]
    held = planned[-1].open_file()            # the last log's first segment is being sent
    deleted = [plog.apply_retention(T0 + 10_000) for plog in logs]
    assert all(d > 0 for d in deleted)
    assert files.pinned <= CAP // 2
    assert os.pread(held.fd, planned[-1].size, planned[-1].position) == old[-1]
    outcomes = set()
    for rng, data in zip(planned[:-1], old):
        try:
            outcomes.add(rng.read() == data)  # the deleted file's bytes, never others
        except SegmentGoneError:
            outcomes.add("gone")              # evicted before the deletion: the send fails
    assert outcomes <= {True, "gone"}
    for plog in logs:
        plog.apply_retention(T0 + 20_000)     # past file.delete.delay.ms: reaped
        assert read_all(plog)[-1] == b"value-7"
    assert files.pinned == 0
    del held
    for plog in logs:
        plog.close()
    assert open_fds_to(tmp_path) == 0


def test_compaction_swap_never_serves_the_copy_through_the_old_segment(tmp_path):
    files = OpenFileCache(CAP)
    logs = make_logs(tmp_path, files, segment_bytes=200, cleanup_policy="compact",
                     min_cleanable_dirty_ratio=0.01)
    for plog in logs:
        for i in range(12):
            plog.append_as_leader(batch(i, key=b"k%d" % (i % 2)), 0, T0)
    planned = [plog.read(0, 1 << 20).ranges[0] for plog in logs]
    old = [r.read() for r in planned]
    olds = [plog.segments[0] for plog in logs]
    for plog in logs:
        LogCleaner(plog).run_until_idle(T0)
        assert read_all(plog)[-2:] == [b"value-10", b"value-11"]
    assert all(plog.segments[0] is not seg for plog, seg in zip(logs, olds))   # swapped
    outcomes = set()
    for rng, data in zip(planned, old):
        try:
            assert rng.read() == data         # the old inode, kept open for this send ...
            outcomes.add("old")
        except SegmentGoneError:
            outcomes.add("gone")              # ... or evicted before the swap: the send fails
    assert outcomes and outcomes <= {"old", "gone"}


def test_cache_unit_behaviour(tmp_path):
    class Owner:
        def __init__(self, path):
            self.path, self._file, self.gone = path, None, False
    files = OpenFileCache(CAP)
    owners = []
    for i in range(CAP + 4):
        p = tmp_path / f"f{i}"
        p.write_bytes(b"x%d" % i)
        owners.append(Owner(str(p)))
    for o in owners:
        files.acquire(o)
    assert files.cached == CAP and files.evictions == 4
    assert all(o._file is None for o in owners[:4])           # least recently used went first
    files.acquire(owners[4])                                   # touch: now most recent
    files.acquire(owners[0])                                   # reopen: evicts owners[5]
    assert owners[4]._file is not None and owners[5]._file is None
    files.pin(owners[4])
    assert files.pinned == 1 and files.cached == CAP - 1
    assert files.acquire(owners[4]).fd >= 0                    # pinned: kept, still usable
    files.release(owners[4])
    with pytest.raises(SegmentGoneError):
        files.acquire(owners[4])                               # gone: never reopened by path
    for o in owners:
        files.release(o)
    assert open_fds_to(tmp_path) == 0


def test_default_bound_is_half_the_open_file_limit():
    import resource
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert default_max_open_files(0) == max(MIN_OPEN, soft // 2)
    assert default_max_open_files(5000) == 5000
    assert default_max_open_files(3) == MIN_OPEN


def test_an_empty_log_reopens_after_a_clean_close_without_rebuilding(tmp_path, caplog):
    plog = PartitionLog(str(tmp_path / "t-0"), LogConfig(), T0)
    plog.close()
    again = PartitionLog(str(tmp_path / "t-0"), LogConfig(), T0)
    assert "rebuilding" not in caplog.text
    assert again.log_end_offset == 0
    again.append_as_leader(batch(1), 0, T0)
    assert read_all(again) == [b"value-1"]
    again.close()
