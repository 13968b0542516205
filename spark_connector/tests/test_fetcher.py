"""The executor's column decoder agrees with wire.records' reference decoder."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_connector.fetcher import _Columns, decode_into
from wire.errors import DecodeError
from wire.records.batch import Compression, TimestampType, build_batch, decode_batch, iter_batches

# lengths past 8191 need three-byte varints: made from a size, not drawn byte by byte
blobs = st.one_of(st.none(), st.binary(max_size=300),
                  st.integers(8200, 8300).map(lambda n: bytes(range(256)) * (n // 256)))
records = st.lists(st.tuples(blobs, blobs,
                             st.lists(st.tuples(st.text(max_size=5), st.one_of(
                                 st.none(), st.binary(max_size=200))), max_size=3),
                             st.integers(0, 2**41)), min_size=1, max_size=20)


@settings(max_examples=25, deadline=None)
@given(records, st.sampled_from([Compression.NONE, Compression.LZ4, Compression.ZSTD]),
       st.integers(0, 10**6), st.sampled_from(list(TimestampType)), st.data())
def test_decode_into_matches_decode_batch(recs, codec, base, ts_type, data):
    raw = build_batch(recs, base_offset=base, compression=codec, timestamp_type=ts_type)
    h = next(iter_batches(raw))
    ref = decode_batch(raw).records
    lo = data.draw(st.integers(base - 1, base + len(recs)))
    hi = data.draw(st.integers(lo, base + len(recs) + 1))
    want = [r for r in ref if lo <= r.offset < hi]
    for include_headers in (True, False):
        cols = _Columns()
        decode_into(cols, h, lo, hi, include_headers)
        assert cols.offsets == [r.offset for r in want]
        assert cols.keys == [r.key for r in want]
        assert cols.values == [r.value for r in want]
        assert cols.timestamps == [r.timestamp for r in want]
        assert cols.ts_types == [int(ts_type)] * len(want)
        if include_headers:
            assert cols.headers == [[{"key": k, "value": v} for k, v in r.headers] for r in want]


def test_corrupt_batch_is_a_decode_error():
    raw = bytearray(build_batch([(b"k", b"v" * 50, [], 1)]))
    raw[-3] ^= 0xFF
    with pytest.raises(DecodeError, match="CRC"):
        decode_into(_Columns(), next(iter_batches(bytes(raw))), 0, 10, False)


def test_long_batches_use_multi_byte_offset_deltas():
    recs = [(b"%d" % i, b"v" * (i % 300), [], 1_700_000_000_000 + i * 7919) for i in range(20000)]
    raw = build_batch(recs, base_offset=5)
    cols = _Columns()
    decode_into(cols, next(iter_batches(raw)), 100, 19_000, False)
    ref = [r for r in decode_batch(raw).records if 100 <= r.offset < 19_000]
    assert cols.offsets == [r.offset for r in ref] and cols.values == [r.value for r in ref]
    assert cols.timestamps == [r.timestamp for r in ref]
