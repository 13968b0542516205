"""PartitionLog: appends, reads, indexes, time lookups, truncation, retention, recovery."""

import os

import pytest

from partition_server.log import LogConfig, PartitionLog
from wire.errors import ErrorCode, KafkaError
from wire.records.batch import RecordBatchHeader, build_batch, decode_batch, iter_batches

T0 = 1_700_000_000_000


def batch(n=3, ts=T0, size=10, key=b"k"):
    return build_batch([(key + b"%d" % i, b"v" * size, [], ts + i) for i in range(n)])


def offsets_in(data: bytes):
    return [r.offset for h in iter_batches(data) for r in decode_batch(h.bytes()).records]


def make(tmp_path, **cfg):
    return PartitionLog(str(tmp_path / "t-0"), LogConfig(**cfg))


def test_leader_append_assigns_offsets_and_epoch(tmp_path):
    plog = make(tmp_path)
    info = plog.append_as_leader(batch(3) + batch(2), leader_epoch=4, now_ms=T0)
    assert (info.first_offset, info.last_offset, info.batches, info.records) == (0, 4, 2, 5)
    assert plog.log_end_offset == 5
    data = plog.read(0, 1 << 20).read_bytes()
    hs = list(iter_batches(data))
    assert [(h.base_offset, h.partition_leader_epoch) for h in hs] == [(0, 4), (3, 4)]
    assert all(h.is_valid() for h in hs)
    assert offsets_in(data) == [0, 1, 2, 3, 4]
    assert plog.end_offset_for(4) == (4, 5)


def test_read_returns_whole_batches_at_least_one(tmp_path):
    plog = make(tmp_path)
    for _ in range(5):
        plog.append_as_leader(batch(2, size=100), 0, T0)
    one = RecordBatchHeader(plog.read(0, 1 << 20).read_bytes()).size_in_bytes
    assert plog.read(0, 1).size == one                   # larger than max_bytes, still one
    assert plog.read(0, one * 2 + 5).size == one * 2     # never a partial batch
    assert offsets_in(plog.read(3, 1 << 20).read_bytes())[0] == 2   # batch holding offset 3
    assert plog.read(0, 1 << 20, max_offset=4).size == one * 2      # stops at the high watermark
    assert plog.read(10, 100).size == 0                  # at the end: empty
    with pytest.raises(KafkaError) as e:
        plog.read(11, 100)
    assert e.value.code == ErrorCode.OFFSET_OUT_OF_RANGE


def test_rolls_segments_and_reads_across_boundaries(tmp_path):
    plog = make(tmp_path, segment_bytes=1000, index_interval_bytes=150)
    for i in range(40):
        plog.append_as_leader(batch(2, ts=T0 + 10 * i), 0, T0)
    assert len(plog.segments) >= 4
    seen = []
    offset = 0
    while offset < plog.log_end_offset:
        data = plog.read(offset, 300).read_bytes()
        got = offsets_in(data)
        seen += [o for o in got if o >= offset]
        offset = got[-1] + 1
    assert seen == list(range(80))
    # every segment boundary: the first offset of each segment reads from that segment
    for seg in plog.segments[1:]:
        assert offsets_in(plog.read(seg.base_offset, 10).read_bytes())[0] == seg.base_offset


def test_offset_for_timestamp_is_record_exact(tmp_path):
    plog = make(tmp_path, segment_bytes=600, index_interval_bytes=100)
    for i in range(20):
        plog.append_as_leader(batch(3, ts=T0 + 100 * i), 0, T0)
    assert plog.offset_for_timestamp(T0) == (0, T0)
    assert plog.offset_for_timestamp(T0 + 101) == (4, T0 + 101)     # inside a batch
    assert plog.offset_for_timestamp(T0 + 150) == (6, T0 + 200)
    assert plog.offset_for_timestamp(T0 + 10_000) is None
    assert plog.offset_for_timestamp(-1) == (60, -1)
    assert plog.offset_for_timestamp(-2) == (0, -1)
    assert plog.offset_for_timestamp(-3) == (59, T0 + 1902)


def test_truncate_to_and_epoch_cache(tmp_path):
    plog = make(tmp_path, segment_bytes=500)
    for epoch in (1, 1, 2, 2, 3):
        plog.append_as_leader(batch(2), epoch, T0)
    assert plog.end_offset_for(1) == (1, 4)
    assert plog.end_offset_for(2) == (2, 8)
    assert plog.end_offset_for(0) == (0, 0)
    plog.truncate_to(5)                       # the batch holding 5 starts at 4
    assert plog.log_end_offset == 4
    assert plog.latest_epoch == 1
    assert plog.end_offset_for(2) == (1, 4)
    plog.append_as_follower(build_batch([(b"x", b"y", [], T0)], base_offset=4,
                                        partition_leader_epoch=5))
    assert plog.log_end_offset == 5 and plog.latest_epoch == 5
    # an epoch that starts at the log end (a leader that appended nothing) is dropped by a
    # truncation to the log end, so our answer for it agrees with the real leader's
    plog.epoch_cache.assign(6, 5)
    assert plog.latest_epoch == 6
    plog.truncate_to(5)
    assert plog.latest_epoch == 5 and plog.log_end_offset == 5
    with pytest.raises(KafkaError):
        plog.append_as_follower(build_batch([(b"x", b"y", [], T0)], base_offset=2))


def test_truncate_fully_and_delete_records(tmp_path):
    plog = make(tmp_path, segment_bytes=400)
    for _ in range(10):
        plog.append_as_leader(batch(2), 1, T0)
    assert plog.delete_records_before(7) == 7
    assert plog.log_start_offset == 7 and plog.segments[0].base_offset <= 7
    with pytest.raises(KafkaError):
        plog.read(6, 100)
    plog.truncate_fully_and_start_at(100)
    assert (plog.log_start_offset, plog.log_end_offset) == (100, 100)
    assert plog.append_as_leader(batch(1), 2, T0).first_offset == 100


def test_retention_by_time_and_size_never_deletes_active(tmp_path):
    plog = make(tmp_path, segment_bytes=400, retention_ms=1000)
    for i in range(10):
        plog.append_as_leader(batch(2, ts=T0 + i), 1, T0)
    n = len(plog.segments)
    assert plog.apply_retention(now_ms=T0 + 500) == 0
    assert plog.apply_retention(now_ms=T0 + 10_000) == n - 1
    assert len(plog.segments) == 1 and plog.log_start_offset == plog.segments[0].base_offset
    plog2 = make(tmp_path / "b", segment_bytes=400, retention_ms=-1, retention_bytes=800)
    for i in range(10):
        plog2.append_as_leader(batch(2), 1, T0)
    plog2.apply_retention(T0)
    assert plog2.size_in_bytes - plog2.segments[0].size < 800 <= plog2.size_in_bytes + 400


def test_validation_errors(tmp_path):
    plog = make(tmp_path, max_message_bytes=200)
    good = bytearray(batch(1))
    bad_crc = bytearray(good)
    bad_crc[-1] ^= 1
    for data, code in ((bytes(bad_crc), ErrorCode.CORRUPT_MESSAGE),
                       (good[:40], ErrorCode.CORRUPT_MESSAGE),
                       (batch(3, size=300), ErrorCode.MESSAGE_TOO_LARGE)):
        with pytest.raises(KafkaError) as e:
            plog.append_as_leader(data, 0, T0)
        assert e.value.code == code
    assert plog.log_end_offset == 0


def test_log_append_time(tmp_path):
    plog = make(tmp_path, message_timestamp_type="LogAppendTime")
    info = plog.append_as_leader(batch(2), 0, now_ms=T0 + 777)
    assert info.log_append_time == T0 + 777
    rec = decode_batch(plog.read(0, 1000).read_bytes()).records
    assert [r.timestamp for r in rec] == [T0 + 777, T0 + 777]


def test_log_append_time_never_goes_back(tmp_path):
    """F15: a leader whose clock was stepped back (or a new leader whose clock is behind the old
    one's) stamps at least the largest timestamp in the log; a client's CreateTime from a day
    ahead, written before the switch to LogAppendTime, does not pin the stamps."""
    plog = make(tmp_path, message_timestamp_type="LogAppendTime")
    plog.append_as_leader(batch(1), 0, now_ms=T0 + 5000)
    info = plog.append_as_leader(batch(1), 0, now_ms=T0 - 3_600_000)      # an hour back
    assert info.log_append_time == T0 + 5000
    assert plog.append_as_leader(batch(1), 0, now_ms=T0 + 6000).log_append_time == T0 + 6000
    plog.close()
    again = make(tmp_path, message_timestamp_type="LogAppendTime")          # the next leader
    assert again.append_as_leader(batch(1), 1, now_ms=T0).log_append_time == T0 + 6000
    again.close()

    other = make(tmp_path / "future")
    other.append_as_leader(build_batch([(None, b"x", [], T0 + 10 * 86_400_000)]), 0, now_ms=T0)
    other.close()
    switched = make(tmp_path / "future", message_timestamp_type="LogAppendTime")
    assert switched.append_as_leader(batch(1), 0, now_ms=T0 + 1).log_append_time == T0 + 1


def test_clean_reopen_and_unclean_recovery(tmp_path):
    plog = make(tmp_path, segment_bytes=500)
    for i in range(12):
        plog.append_as_leader(batch(2), 1 + i // 6, T0)
    plog.close()
    again = make(tmp_path, segment_bytes=500)
    assert again.log_end_offset == 24 and again.latest_epoch == 2
    assert offsets_in(again.read(0, 1 << 20).read_bytes())[:2] == [0, 1]
    # simulate a crash: no marker, a torn tail and a corrupt index
    again.flush()
    active = again.active
    with open(active.path, "ab") as f:
        f.write(batch(2)[:50])
    with open(again.segments[0].index.path, "wb") as f:
        f.write(b"\x01\x02\x03")
    for seg in again.segments:
        seg.abandon()
    third = make(tmp_path, segment_bytes=500)
    assert third.log_end_offset == 24
    assert third.append_as_leader(batch(1), 3, T0).first_offset == 24
    assert offsets_in(third.read(0, 1 << 20).read_bytes())[:2] == [0, 1]


def test_mid_segment_corruption_below_recovery_point_is_not_served_silently(tmp_path):
    """Rule (README.md): after an unclean shutdown, recovery re-validates from the recovery
    point and truncates at the first bad batch (this test); a corrupt batch *below* it is
    reported as CORRUPT_MESSAGE when first read (test_log_corruption.py)."""
    plog = make(tmp_path)
    for _ in range(5):
        plog.append_as_leader(batch(2), 1, T0)
    seg = plog.active
    first_size = RecordBatchHeader(plog.read(0, 1).read_bytes()).size_in_bytes
    os.pwrite(seg.fd, b"\xff\xff", first_size * 2 + 40)   # inside the third batch's records
    for s in plog.segments:
        s.abandon()                                       # crash: no flush, no marker
    again = make(tmp_path)
    assert again.log_end_offset == 4                      # prefix: the first two batches
    assert offsets_in(again.read(0, 1 << 20).read_bytes()) == [0, 1, 2, 3]


def test_close_without_sync_marks_clean_only_when_asked(tmp_path):
    """A stopping broker closes many logs with close(sync=False), syncs the file system once,
    then marks each clean: the marker comes last, so a log closed but never marked is
    recovered (scanned) on open, and a marked one is trusted as it is."""
    from partition_server.log.recovery import CLEAN_SHUTDOWN
    plog = make(tmp_path, segment_bytes=500)
    d = tmp_path / "t-0"
    for i in range(12):
        plog.append_as_leader(batch(2), 1, T0)
    plog.close(sync=False)
    assert not (d / CLEAN_SHUTDOWN).exists()
    assert (d / "recovery-point").read_text() == "24"
    plog.mark_clean()
    assert (d / CLEAN_SHUTDOWN).exists()
    again = make(tmp_path, segment_bytes=500)
    assert again.log_end_offset == 24 and not (d / CLEAN_SHUTDOWN).exists()
    again.close(sync=False)                   # never marked: the next open recovers
    third = make(tmp_path, segment_bytes=500)
    assert third.log_end_offset == 24
    assert offsets_in(third.read(0, 1 << 20).read_bytes())[:2] == [0, 1]
