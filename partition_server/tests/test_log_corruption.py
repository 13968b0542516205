"""Corruption: never silent garbage. The rules (README.md, "Recovery and corruption"):
- unflushed region after an unclean shutdown: recovery truncates at the first bad batch;
- below the recovery point, or after a clean shutdown: the batch is CRC-checked when first
  served and the read fails with CORRUPT_MESSAGE; batches before it stay readable;
- offset/time indexes that are missing, torn, non-monotonic, past the log or pointing at the
  wrong place are rebuilt from the batches; the leader-epoch checkpoint likewise.
"""

import os
import struct

import pytest

from partition_server.log import LogConfig, PartitionLog
from wire.errors import ErrorCode, KafkaError
from wire.records.batch import build_batch, decode_batch, iter_batches

T0 = 1_700_000_000_000


def make(tmp_path, **cfg):
    cfg.setdefault("segment_bytes", 2000)
    cfg.setdefault("index_interval_bytes", 100)
    return PartitionLog(str(tmp_path / "x-0"), LogConfig(**cfg))


def fill(plog, n=40, epoch=1):
    for i in range(n):
        recs = [(b"k", b"%d" % (2 * i + j), [], T0 + 10 * i + j) for j in range(2)]
        plog.append_as_leader(build_batch(recs), epoch + i // 20, T0)


def read_all(plog, start=None):
    out, offset = [], plog.log_start_offset if start is None else start
    while offset < plog.log_end_offset:
        data = plog.read(offset, 500).read_bytes()
        for h in iter_batches(data):
            out += [(r.offset, r.value) for r in decode_batch(h.bytes()).records]
            offset = h.next_offset
    return out


def expected(n=40):
    return [(o, b"%d" % o) for o in range(2 * n)]


def crash(plog):
    for seg in plog.segments:
        seg.abandon()


def test_flip_in_closed_segment_after_clean_shutdown_is_reported_not_served(tmp_path):
    plog = make(tmp_path, segment_bytes=1000)
    fill(plog)
    assert len(plog.segments) >= 3
    victim = plog.segments[1]
    hs = list(victim.iter_headers(0))
    middle = hs[len(hs) // 2]
    path = victim.path
    plog.close()
    with open(path, "r+b") as f:                       # a value byte inside one record
        f.seek(middle.pos + middle.size_in_bytes - 3)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0x55]))
    again = make(tmp_path, segment_bytes=1000)
    assert again.log_end_offset == 80                  # clean shutdown: nothing truncated
    offset, seen = 0, []
    with pytest.raises(KafkaError) as e:
        while offset < again.log_end_offset:
            data = again.read(offset, 500).read_bytes()
            for h in iter_batches(data):
                assert h.is_valid()                    # whatever is served is sound
                seen += [r.offset for r in decode_batch(h.bytes()).records]
                offset = h.next_offset
    assert e.value.code == ErrorCode.CORRUPT_MESSAGE
    assert seen == list(range(middle.base_offset))
    after = again.read(middle.next_offset, 500).read_bytes()   # past the bad batch: fine
    assert decode_batch(after).records[0].offset == middle.next_offset


def test_flip_below_recovery_point_after_unclean_shutdown_is_reported(tmp_path):
    plog = make(tmp_path)
    fill(plog)
    plog.flush()                                       # recovery point = log end
    first = plog.segments[0]
    os.pwrite(first.fd, b"\x00\x00\x00", 200)          # inside a batch of a fsynced segment
    crash(plog)
    again = make(tmp_path)
    assert again.log_end_offset == 80                  # trusted below the recovery point...
    with pytest.raises(KafkaError) as e:               # ...but never served as garbage
        read_all(again)
    assert e.value.code == ErrorCode.CORRUPT_MESSAGE


def test_flip_after_recovery_point_truncates_to_a_prefix(tmp_path):
    plog = make(tmp_path)
    fill(plog, 10)
    plog.flush()
    fill(plog, 10)                                     # offsets 20..39 unflushed, same epochs
    seg = plog.active
    h = [h for h in seg.iter_headers(0) if h.base_offset == 26][0]
    os.pwrite(seg.fd, b"\xff", h.pos + 70)
    crash(plog)
    again = make(tmp_path)
    assert again.log_end_offset == 26
    got = read_all(again)
    assert [o for o, _ in got] == list(range(26))
    assert again.append_as_leader(build_batch([(b"k", b"z", [], T0)]), 2, T0).first_offset == 26


@pytest.mark.parametrize("damage", ["torn", "garbage", "shifted", "past_end", "missing"])
def test_damaged_offset_index_is_rebuilt(tmp_path, damage):
    plog = make(tmp_path)
    fill(plog)
    seg = plog.segments[1]
    path, n = seg.index.path, seg.index.entries
    assert n >= 3
    plog.close()
    data = bytearray(open(path, "rb").read())
    if damage == "torn":
        data = data[:-3]
    elif damage == "garbage":
        data[:8] = b"\xff" * 8
    elif damage == "shifted":      # still monotonic, points into the middle of a batch
        rel, pos = struct.unpack_from(">II", data, 8)
        struct.pack_into(">II", data, 8, rel, pos + 5)
    elif damage == "past_end":
        struct.pack_into(">II", data, len(data) - 8, 1 << 20, 1 << 30)
    if damage == "missing":
        os.unlink(path)
    else:
        open(path, "wb").write(bytes(data))
    again = make(tmp_path)
    assert read_all(again) == expected()
    for o in range(0, 80, 7):                           # every lookup lands on the right batch
        first = decode_batch(again.read(o, 1).read_bytes()).records
        assert first[0].offset <= o <= first[-1].offset
    idx = again.segments[1].index
    assert idx.entries >= 3 and os.path.getsize(idx.path) == idx.entries * 8


def test_damaged_time_index_is_rebuilt(tmp_path):
    plog = make(tmp_path)
    fill(plog)
    truth = {ts: plog.offset_for_timestamp(ts) for ts in range(T0, T0 + 420, 13)}
    seg = plog.segments[1]
    path = seg.time_index.path
    plog.close()
    data = bytearray(open(path, "rb").read())
    assert len(data) >= 24
    ts, rel = struct.unpack_from(">qI", data, 0)
    struct.pack_into(">qI", data, 0, ts - 5, rel + 2)  # still monotonic, but wrong
    open(path, "wb").write(bytes(data))
    again = make(tmp_path)
    assert {ts: again.offset_for_timestamp(ts) for ts in truth} == truth


def test_corrupt_epoch_checkpoint_is_rebuilt_from_batches(tmp_path):
    plog = make(tmp_path)
    fill(plog)
    assert plog.end_offset_for(1) == (1, 40)
    path = os.path.join(plog.directory, "leader-epoch-checkpoint")
    plog.close()
    open(path, "w").write("0\n5\n1 0\n")
    again = make(tmp_path)
    assert again.end_offset_for(1) == (1, 40) and again.end_offset_for(2) == (2, 80)


def test_each_stored_byte_is_crc_checked_once_per_process(tmp_path, monkeypatch):
    from partition_server.log import segment as segment_mod
    plog = make(tmp_path, segment_bytes=1 << 20)
    fill(plog, 10)
    plog.close()
    again = make(tmp_path, segment_bytes=1 << 20)
    checked = []
    real = segment_mod.LogSegment._verify
    monkeypatch.setattr(segment_mod.LogSegment, "_verify",
                        lambda self, start, size: (checked.append((start, size)),
                                                   real(self, start, size)))
    fill(again, 5)                                     # appended in this process: trusted
    tail = again.read(20, 1 << 20)
    assert checked == [] and tail.size > 0
    read_all(again)                                    # stored before the restart: checked...
    n = len(checked)
    assert n > 0
    read_all(again)                                    # ...once
    assert len(checked) == n
