"""wire.records.columns: columnar decode checked against decode_batch (the reference), both the
C body decoder (when built) and the pure-Python one, and fed to pyarrow as Arrow buffers."""

import struct
from array import array

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wire.errors import DecodeError
from wire.records import columns
from wire.records.batch import (Compression, TimestampType, build_batch, build_end_txn_marker,
                                decode_batch, iter_batches)
from wire.records.columns import RecordColumns, decode_columns

IMPLS = ["python"] + (["c"] if columns.speedups is not None else [])


@pytest.fixture(params=IMPLS)
def impl(request, monkeypatch):
    fn = columns._decode_body if request.param == "python" else columns._decode_body_c
    monkeypatch.setattr(columns, "_decode_one", fn)
    return request.param


def _ints(buf: bytes, code: str) -> list:
    a = array(code)
    a.frombytes(buf)
    return a.tolist()            # the test machines are little-endian (checked below)


def _binary(c: RecordColumns, which: str) -> list:
    validity = getattr(c, f"{which}_validity")
    arr = pa.Array.from_buffers(pa.binary(), c.count, [
        None if validity is None else pa.py_buffer(validity),
        pa.py_buffer(getattr(c, f"{which}_offsets")), pa.py_buffer(getattr(c, f"{which}_data"))])
    arr.validate(full=True)
    return arr.to_pylist()


def _as_rows(c: RecordColumns) -> list:
    """Rows (offset, timestamp, type, key, value, headers) out of the columns, via pyarrow."""
    assert len(c.offsets) == len(c.timestamps) == 8 * c.count
    assert len(c.timestamp_types) == 4 * c.count
    assert len(c.key_offsets) == len(c.value_offsets) == 4 * (c.count + 1)
    for v in (c.key_validity, c.value_validity):
        assert v is None or len(v) == (c.count + 7) // 8
    keys, values = _binary(c, "key"), _binary(c, "value")
    headers = c.headers if c.headers is not None else [None] * c.count
    assert len(headers) == c.count
    return list(zip(_ints(c.offsets, "q"), _ints(c.timestamps, "q"),
                    _ints(c.timestamp_types, "i"), keys, values, headers))


def _reference(data: bytes, lo=0, hi=2**63 - 1, include_headers=False, max_records=None,
               keep=None) -> list:
    rows = []
    for h in iter_batches(data):
        if h.is_control or (keep is not None and not keep(h)):
            continue
        b = decode_batch(h.buf, h.pos)
        for r in b.records:
            if lo <= r.offset < hi:
                rows.append((r.offset, r.timestamp, int(h.timestamp_type), r.key, r.value,
                             r.headers if include_headers else None))
    return rows if max_records is None else rows[:max_records]


def test_machine_is_little_endian_for_these_checks():
    assert struct.pack("=i", 1) == struct.pack("<i", 1)


def test_small_fetch_and_pyarrow_buffers(impl):
    data = (build_batch([(b"k", b"v", [("h", b"x")], 5), (None, b"vv", [], 6),
                         (b"k3", None, [("n", None)], 7)])
            + build_end_txn_marker(True, 1, 0, 0, base_offset=3)
            + build_batch([(b"a", b"", [], 9)], base_offset=4, compression=Compression.ZSTD))
    c = decode_columns(data + data[:40], include_headers=True)   # plus a truncated tail
    assert c.count == 4
    assert _as_rows(c) == [(0, 5, 0, b"k", b"v", [("h", b"x")]), (1, 6, 0, None, b"vv", []),
                           (2, 7, 0, b"k3", None, [("n", None)]), (4, 9, 0, b"a", b"", [])]
    assert c.key_validity == bytes([0b1101]) and c.value_validity == bytes([0b1011])
    assert decode_columns(data).headers is None


def test_no_nulls_means_no_validity_and_empty_input(impl):
    c = decode_columns(build_batch([(b"k", b"v", [], 1)] * 3))
    assert c.key_validity is None and c.value_validity is None
    empty = decode_columns(b"")
    assert empty.count == 0 and empty.key_offsets == b"\0\0\0\0" and empty.offsets == b""
    assert _as_rows(empty) == []


def test_log_append_time_uses_max_timestamp(impl):
    data = build_batch([(b"k", b"v", [], 100), (b"k", b"v", [], 50)],
                       timestamp_type=TimestampType.LOG_APPEND_TIME)
    rows = _as_rows(decode_columns(data))
    assert [(r[1], r[2]) for r in rows] == [(100, 1), (100, 1)]


def test_corrupt_batch_raises_decode_error(impl):
    data = bytearray(build_batch([(b"k", b"v" * 20, [], 1)]))
    data[-3] ^= 0xFF
    with pytest.raises(DecodeError, match="CRC"):
        decode_columns(bytes(data))
    # records that do not fill the batch (CRC fixed up): the same error decode_batch gives
    good = build_batch([(b"k", b"v", [], 1)])
    bad = bytearray(good)
    struct.pack_into(">i", bad, 57, 2)                 # records_count 2, only one present
    from wire.records.crc32c import crc32c
    struct.pack_into(">I", bad, 17, crc32c(bytes(bad[21:])))
    with pytest.raises(DecodeError) as ref:
        decode_batch(bytes(bad))
    with pytest.raises(DecodeError) as got:
        decode_columns(bytes(bad))
    assert str(got.value) == str(ref.value)


def test_keep_batch_filter_and_max_records(impl):
    a = build_batch([(b"a", b"1", [], 1)] * 3, producer_id=7, is_transactional=True)
    b = build_batch([(b"b", b"2", [], 1)] * 3, base_offset=3)
    rows = _as_rows(decode_columns(a + b, keep_batch=lambda h: h.producer_id != 7))
    assert [r[0] for r in rows] == [3, 4, 5]
    rows = _as_rows(decode_columns(a + b, start_offset=1, max_records=3))
    assert [r[0] for r in rows] == [1, 2, 3]
    assert decode_columns(a + b, max_records=0).count == 0


_bytes = st.one_of(st.none(), st.binary(max_size=40))
_header = st.tuples(st.text(max_size=8), _bytes)
_record = st.tuples(_bytes, _bytes, st.lists(_header, max_size=4),
                    st.integers(0, 2**41))
_batch = st.tuples(st.lists(_record, min_size=1, max_size=12), st.sampled_from(list(Compression)),
                   st.booleans(), st.booleans(), st.integers(0, 3))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(batches=st.lists(_batch, max_size=5), lo=st.integers(0, 40), span=st.integers(0, 60),
       include_headers=st.booleans(), max_records=st.one_of(st.none(), st.integers(0, 30)),
       tail=st.integers(0, 80))
def test_matches_decode_batch(impl, batches, lo, span, include_headers, max_records, tail):
    data = b""
    offset = 0
    for recs, codec, control, log_append, gap in batches:
        if control:
            data += build_end_txn_marker(True, 5, 0, 0, base_offset=offset)
            offset += 1
        ts_type = TimestampType.LOG_APPEND_TIME if log_append else TimestampType.CREATE_TIME
        data += build_batch(recs, base_offset=offset, compression=codec, timestamp_type=ts_type)
        offset += len(recs) + gap
    last = build_batch([(b"x", b"y", [], 1)], base_offset=offset)
    data += last[:tail]                                   # a partial batch at the end: ignored
    hi = lo + span
    got = decode_columns(data, start_offset=lo, end_offset=hi, include_headers=include_headers,
                         max_records=max_records)
    assert _as_rows(got) == _reference(data, lo, hi, include_headers, max_records)

