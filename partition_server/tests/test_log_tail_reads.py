"""Reads of just-appended batches are answered from the segment's in-memory tail
(segment.py `_tail`, no index or header preads); they must equal what a scan of the file finds,
whatever appends (leader and follower, with offset gaps), truncations, rolls and reopens came
before."""

from hypothesis import given, settings, strategies as st

from partition_server.log import LogConfig, PartitionLog
from partition_server.log import segment as segment_mod
from wire.records.batch import build_batch

T0 = 1_700_000_000_000


def _batch(n: int, base: int = 0):
    data = bytearray(build_batch([(b"k", b"v" * 30, [], T0 + i) for i in range(n)]))
    data[0:8] = base.to_bytes(8, "big")          # a follower's batch carries its offsets
    return bytes(data)


def _scan_read(seg, offset, max_bytes, max_offset, min_one):
    tail, seg._tail = seg._tail, []
    try:
        return seg.read(offset, max_bytes, max_offset, min_one)
    finally:
        seg._tail = tail


def _check_every_read(plog: PartitionLog) -> int:
    served_from_tail = 0
    for seg in plog.segments:
        for offset in range(seg.base_offset, seg.next_offset + 2):
            for max_bytes in (1, 150, 10_000):
                for max_offset in (None, offset + 1, seg.next_offset - 1):
                    for min_one in (True, False):
                        got = seg.read(offset, max_bytes, max_offset, min_one)
                        want = _scan_read(seg, offset, max_bytes, max_offset, min_one)
                        assert (got[1], got[0] and (got[0].position, got[0].size)) == \
                            (want[1], want[0] and (want[0].position, want[0].size))
        if seg._tail:
            served_from_tail += 1
    return served_from_tail


ops = st.lists(st.one_of(
    st.tuples(st.just("leader"), st.integers(1, 5)),
    st.tuples(st.just("follower"), st.integers(1, 5), st.integers(0, 3)),   # n, offset gap
    st.tuples(st.just("truncate"), st.integers(0, 40)),
    st.tuples(st.just("reopen"), st.just(0)),
), min_size=1, max_size=25)


@settings(max_examples=60)
@given(ops=ops, tail_batches=st.sampled_from([1, 2, 64]))
def test_tail_reads_equal_file_reads(tmp_path_factory, ops, tail_batches):
    old = segment_mod.TAIL_BATCHES
    segment_mod.TAIL_BATCHES = tail_batches
    d = str(tmp_path_factory.mktemp("tail") / "t-0")
    cfg = LogConfig(segment_bytes=700, index_interval_bytes=1)
    plog = PartitionLog(d, cfg)
    try:
        for op in ops:
            if op[0] == "leader":
                plog.append_as_leader(_batch(op[1]), 0, T0)
            elif op[0] == "follower":
                plog.append_as_follower(_batch(op[1], plog.log_end_offset + op[2]), T0)
            elif op[0] == "truncate":
                plog.truncate_to(min(op[1], plog.log_end_offset))
            else:
                plog.close()
                plog = PartitionLog(d, cfg)
            _check_every_read(plog)
    finally:
        segment_mod.TAIL_BATCHES = old
        plog.close()


def test_a_fresh_append_is_read_from_the_tail_without_the_file(tmp_path, monkeypatch):
    plog = PartitionLog(str(tmp_path / "t-0"), LogConfig())
    for _ in range(3):
        plog.append_as_leader(_batch(4), 0, T0)
    seg = plog.segments[-1]
    assert [e[0] for e in seg._tail] == [0, 4, 8]
    calls = []
    monkeypatch.setattr(seg, "iter_headers", lambda *a: calls.append(a) or iter(()))
    monkeypatch.setattr(seg, "index_lookup", lambda *a: calls.append(a) or 0)
    rng, next_offset = seg.read(4, 10_000, None, True)
    assert calls == [] and next_offset == 12 and rng.size == seg.size - rng.position
    plog.truncate_to(6)              # a truncation forgets the tail: back to the file
    assert seg._tail == []
    plog.close()
