"""The executor's fetch-to-Arrow path agrees with wire.records' reference decoder (no cluster)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pa = pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from spark_connector.fetcher import arrow_schema, decode_fetched, to_arrow  # noqa: E402
from wire.errors import DecodeError  # noqa: E402
from wire.records.batch import (Compression, TimestampType, build_batch,  # noqa: E402
                                build_end_txn_marker, decode_batch)

# lengths past 8191 need three-byte varints: made from a size, not drawn byte by byte
blobs = st.one_of(st.none(), st.binary(max_size=300),
                  st.integers(8200, 8300).map(lambda n: bytes(range(256)) * (n // 256)))
records = st.lists(st.tuples(blobs, blobs,
                             st.lists(st.tuples(st.text(max_size=5), st.one_of(
                                 st.none(), st.binary(max_size=200))), max_size=3),
                             st.integers(0, 2**41)), min_size=1, max_size=20)


def rows(batch) -> list[dict]:
    return batch.to_pylist() if batch is not None else []


def arrow_of(raw, lo, hi, include_headers, aborted=None, topic="t", partition=3):
    cols, next_offset = decode_fetched(raw, lo, hi, include_headers, aborted)
    batch = to_arrow(cols, arrow_schema(include_headers), topic, partition) if cols.count \
        else None
    return batch, next_offset


@settings(max_examples=25, deadline=None)
@given(records, st.sampled_from([Compression.NONE, Compression.LZ4, Compression.ZSTD]),
       st.integers(0, 10**6), st.sampled_from(list(TimestampType)), st.data())
def test_arrow_batch_matches_decode_batch(recs, codec, base, ts_type, data):
    raw = build_batch(recs, base_offset=base, compression=codec, timestamp_type=ts_type)
    ref = decode_batch(raw).records
    lo = data.draw(st.integers(base - 1, base + len(recs)))
    hi = data.draw(st.integers(lo, base + len(recs) + 1))
    want = [r for r in ref if lo <= r.offset < hi]
    for include_headers in (True, False):
        batch, next_offset = arrow_of(raw, lo, hi, include_headers)
        assert next_offset == max(lo, min(base + len(recs), hi))
        got = rows(batch)
        assert [g["offset"] for g in got] == [r.offset for r in want]
        assert [g["key"] for g in got] == [r.key for r in want]
        assert [g["value"] for g in got] == [r.value for r in want]
        micros = batch.column("timestamp").cast(pa.int64()).to_pylist() if got else []
        assert micros == [r.timestamp * 1000 for r in want]
        assert all(g["timestampType"] == int(ts_type) and g["topic"] == "t"
                   and g["partition"] == 3 for g in got)
        if include_headers:
            assert [g["headers"] for g in got] == \
                [[{"key": k, "value": v} for k, v in r.headers] for r in want]
        if batch is not None:
            assert batch.schema == arrow_schema(include_headers)


def test_corrupt_batch_is_a_decode_error():
    raw = bytearray(build_batch([(b"k", b"v" * 50, [], 1)]))
    raw[-3] ^= 0xFF
    with pytest.raises(DecodeError, match="CRC"):
        decode_fetched(bytes(raw), 0, 10, False)


def test_long_batches_use_multi_byte_offset_deltas():
    recs = [(b"%d" % i, b"v" * (i % 300), [], 1_700_000_000_000 + i * 7919) for i in range(20000)]
    raw = build_batch(recs, base_offset=5)
    batch, next_offset = arrow_of(raw, 100, 19_000, False)
    ref = [r for r in decode_batch(raw).records if 100 <= r.offset < 19_000]
    assert next_offset == 19_000
    assert batch.column("offset").to_pylist() == [r.offset for r in ref]
    assert batch.column("value").to_pylist() == [r.value for r in ref]


def test_read_committed_drops_aborted_batches_and_moves_past_markers():
    """Producer 7 aborts its first transaction and commits its second; producer 8's
    transaction interleaves and commits. The aborted batch is dropped, the markers are not
    rows, and the next offset is past the last batch (marker included)."""
    def txn(pid, base, value):
        return build_batch([(None, value, [], 1)], base_offset=base, producer_id=pid,
                           producer_epoch=0, base_sequence=0, is_transactional=True)
    raw = b"".join([
        txn(7, 0, b"aborted"),
        txn(8, 1, b"eight"),
        build_end_txn_marker(False, 7, 0, 0, base_offset=2),
        txn(7, 3, b"committed"),
        build_end_txn_marker(True, 8, 0, 0, base_offset=4),
        build_end_txn_marker(True, 7, 0, 0, base_offset=5),
        build_batch([(b"k", b"plain", [], 1)], base_offset=6),
    ])
    batch, next_offset = arrow_of(raw, 0, 100, False, aborted=[(7, 0)])
    assert [(g["offset"], g["value"]) for g in rows(batch)] == \
        [(1, b"eight"), (3, b"committed"), (6, b"plain")]
    assert next_offset == 7
    # read_uncommitted sees every data record, never the markers
    batch, _ = arrow_of(raw, 0, 100, False)
    assert [g["offset"] for g in rows(batch)] == [0, 1, 3, 6]
    # a range ending inside the stream stops there
    batch, next_offset = arrow_of(raw, 1, 4, False, aborted=[(7, 0)])
    assert [g["offset"] for g in rows(batch)] == [1, 3] and next_offset == 4


def test_only_control_batches_still_advance():
    raw = build_end_txn_marker(True, 7, 0, 0, base_offset=10)
    cols, next_offset = decode_fetched(raw, 10, 50, False)
    assert cols.count == 0 and next_offset == 11


def test_truncated_tail_is_left_for_the_next_fetch():
    first = build_batch([(b"a", b"1", [], 1), (b"b", b"2", [], 1)], base_offset=0)
    second = build_batch([(b"c", b"3", [], 1)], base_offset=2)
    batch, next_offset = arrow_of(first + second[:-5], 0, 10, False)
    assert [g["offset"] for g in rows(batch)] == [0, 1] and next_offset == 2


class _FakeLog:
    """A partition log served as a leader would: whole batches from the one holding `offset`,
    at least one, then as many as fit `max_bytes`."""

    def __init__(self, batches: list[bytes], fail_at: int | None = None):
        from wire.records.batch import iter_batches as _iter
        self.batches = [(next(_iter(b)), b) for b in batches]
        self.fail_at, self.fetched = fail_at, []

    def fetch(self, topic, partition, offset, max_bytes=4 << 20, isolation_level=0,
              max_wait_ms=200):
        from spark_connector.kafka_io import FetchResult
        self.fetched.append(offset)
        if offset == self.fail_at:
            raise RuntimeError(f"fetch at {offset} failed")
        out = b""
        for h, raw in self.batches:
            if h.next_offset <= offset:
                continue
            if out and len(out) + len(raw) > max_bytes:
                break
            out += raw
        end = self.batches[-1][0].next_offset
        return FetchResult(0, end, end, 0, out, [])


def _read_with(monkeypatch, log, lo, hi, max_bytes):
    from spark_connector import fetcher, kafka_io
    from spark_connector.offsets import OffsetRange
    monkeypatch.setattr(kafka_io, "get_client", lambda cfg: log)
    return fetcher.read_range(kafka_io.ClientConfig("h:1"), OffsetRange("t", 0, lo, hi),
                              fetch_max_bytes=max_bytes)


def _log_of(n_batches, per_batch=10):
    return [build_batch([(b"k%d" % i, b"v" * 100, [], 1) for i in range(per_batch)],
                        base_offset=b * per_batch) for b in range(n_batches)]


def test_read_range_with_prefetch_reads_every_record_once(monkeypatch):
    log = _FakeLog(_log_of(40))
    size = len(log.batches[0][1])
    batches = list(_read_with(monkeypatch, log, 5, 395, max_bytes=3 * size))
    offsets = [o for b in batches for o in b.column("offset").to_pylist()]
    assert offsets == list(range(5, 395))
    # each fetch starts where the previous answer ended; none past the range
    assert log.fetched == sorted(set(log.fetched)) and log.fetched[0] == 5
    assert all(o < 395 for o in log.fetched)


def test_read_range_prefetch_error_reaches_the_task(monkeypatch):
    log = _FakeLog(_log_of(10), fail_at=30)
    size = len(log.batches[0][1])
    it = _read_with(monkeypatch, log, 0, 100, max_bytes=3 * size)
    assert next(it).num_rows == 30
    with pytest.raises(RuntimeError, match="fetch at 30 failed"):
        list(it)


def test_read_range_closed_early_does_not_hang(monkeypatch):
    log = _FakeLog(_log_of(10))
    size = len(log.batches[0][1])
    it = _read_with(monkeypatch, log, 0, 100, max_bytes=size)
    assert next(it).num_rows == 10
    it.close()                  # Spark stops reading (a limit, a killed task)
    assert len(log.fetched) <= 2
