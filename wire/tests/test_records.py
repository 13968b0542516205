"""RecordBatch v2: header view, CRC, validity, patching, recovery scan, encode/decode, control."""

import os
import struct
import subprocess
import sys

import pytest

from wire.errors import DecodeError
from wire.records import batch as rb
from wire.records.batch import (BATCH_HEADER_SIZE, MAGIC, Compression, ControlRecordType, Record,
                                RecordBatchBuilder, RecordBatchHeader, TimestampType, build_batch,
                                decode_batch, iter_batches, scan_valid_prefix, set_base_offset,
                                set_partition_leader_epoch)
from wire.records.crc32c import crc32c, crc32c_pure

T0 = 1_700_000_000_000
RECORDS = [(b"k1", b"v1", [("h", b"x")], T0),
           (None, b"v2" * 50, [], T0 + 5),
           (b"k3", None, [("a", None), ("b", b"")], T0 + 2)]


def _as_tuples(decoded):
    return [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in decoded.records]


# -- CRC-32C -------------------------------------------------------------------------------------

def test_crc32c_check_values_and_chaining():
    assert crc32c(b"123456789") == 0xE3069283          # the standard CRC-32C check value
    assert crc32c(b"") == 0 and crc32c_pure(b"") == 0
    assert crc32c(b"\0" * 32) == 0x8A9136AA             # RFC 3720 test vector
    assert crc32c(b"6789", crc32c(b"12345")) == crc32c(b"123456789")


def test_crc32c_fallback_agrees_with_c_package():
    data = os.urandom(10_000)
    for n in (0, 1, 7, 64, 1000, 10_000):
        assert crc32c(data[:n]) == crc32c_pure(data[:n])
        assert crc32c(data[:n], 12345) == crc32c_pure(data[:n], 12345)
    assert crc32c(memoryview(data)[3:900]) == crc32c_pure(data[3:900])


def test_crc32c_fallback_selected_by_env():
    code = ("from wire.records import crc32c as c; "
            "print(c.IMPLEMENTATION, c.crc32c(b'123456789'))")
    env = dict(os.environ, RAFTKA_PURE_CRC32C="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60, cwd=os.path.dirname(os.path.dirname(os.path.dirname(
                             os.path.abspath(__file__)))))
    assert out.stdout.split() == ["python", str(0xE3069283)], out.stderr


# -- header view ---------------------------------------------------------------------------------

def test_header_fields_at_their_wire_positions():
    data = build_batch(RECORDS, base_offset=1234, partition_leader_epoch=7, producer_id=99,
                       producer_epoch=3, base_sequence=42, compression=Compression.LZ4,
                       is_transactional=True)
    (base_offset, length, epoch, magic, crc, attrs, lod, bts, mts, pid, pep, seq,
     count) = struct.unpack_from(">qiibIhiqqqhii", data)
    h = RecordBatchHeader(memoryview(data))
    assert BATCH_HEADER_SIZE == 61 and MAGIC == 2
    assert (h.base_offset, h.batch_length, h.partition_leader_epoch, h.magic, h.crc) == (
        base_offset, length, epoch, magic, crc) == (1234, len(data) - 12, 7, 2, crc)
    assert (h.attributes, h.last_offset_delta, h.base_timestamp, h.max_timestamp) == (
        attrs, lod, bts, mts) == (0x13, 2, T0, T0 + 5)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.records_count) == (
        pid, pep, seq, count) == (99, 3, 42, 3)
    assert (h.last_offset, h.next_offset, h.size_in_bytes) == (1236, 1237, len(data))
    assert h.compression == Compression.LZ4 and h.timestamp_type == TimestampType.CREATE_TIME
    assert h.is_transactional and not h.is_control and not h.has_delete_horizon
    assert h.compute_crc() == crc == crc32c(data[21:]) and h.is_valid()
    assert bytes(h.bytes()) == data


def test_header_view_at_an_offset_inside_a_larger_buffer():
    a, b = build_batch(RECORDS, base_offset=0), build_batch(RECORDS, base_offset=3)
    buf = bytearray(b"junk" + a + b)
    h = RecordBatchHeader(buf, 4 + len(a))
    assert h.base_offset == 3 and h.is_valid() and bytes(h.bytes()) == b
    with pytest.raises(DecodeError):
        RecordBatchHeader(buf[:60])


def test_attribute_bits():
    lat = RecordBatchHeader(build_batch(RECORDS, timestamp_type=TimestampType.LOG_APPEND_TIME))
    assert lat.timestamp_type == TimestampType.LOG_APPEND_TIME and lat.attributes == 0x08
    ctl = RecordBatchHeader(rb.build_end_txn_marker(False, 1, 0, 0))
    assert ctl.is_control and ctl.is_transactional and ctl.attributes == 0x30
    data = bytearray(build_batch(RECORDS))
    data[22] |= 0x40                                        # delete horizon bit
    assert RecordBatchHeader(data).has_delete_horizon


@pytest.mark.parametrize("mutate,reason", [
    (lambda d: d.__setitem__(16, 1), "magic"),
    (lambda d: struct.pack_into(">i", d, 8, 10), "below the header"),
    (lambda d: struct.pack_into(">i", d, 8, len(d)), "past the end"),
    (lambda d: d.__setitem__(22, 0x05), "compression"),
    (lambda d: d.__setitem__(len(d) - 1, d[-1] ^ 1), "CRC"),
    (lambda d: d.__setitem__(17, d[17] ^ 1), "CRC"),
])
def test_invalid_reasons(mutate, reason):
    data = bytearray(build_batch(RECORDS))
    mutate(data)
    h = RecordBatchHeader(data)
    assert not h.is_valid() and reason in h.invalid_reason()
    with pytest.raises(DecodeError):
        decode_batch(bytes(data))


# -- patching ------------------------------------------------------------------------------------

def test_patching_offset_and_epoch_in_place_keeps_crc_valid():
    a, b = build_batch(RECORDS), build_batch(RECORDS)
    buf = bytearray(a + b)
    set_base_offset(buf, len(a), 5000)
    set_partition_leader_epoch(buf, len(a), 12)
    h = RecordBatchHeader(buf, len(a))
    assert (h.base_offset, h.partition_leader_epoch, h.last_offset) == (5000, 12, 5002)
    assert h.is_valid() and bytes(buf[:len(a)]) == a
    assert [r.offset for r in decode_batch(buf, len(a)).records] == [5000, 5001, 5002]
    view = memoryview(bytearray(a))
    set_base_offset(view, 0, 2**40)
    assert RecordBatchHeader(view).base_offset == 2**40


# -- iteration and the recovery scan ----------------------------------------------------------

def _two_batches():
    a = build_batch(RECORDS, base_offset=0)
    b = build_batch(RECORDS, base_offset=3, compression=Compression.GZIP)
    return a, b


def test_iter_batches_ignores_partial_tail():
    a, b = _two_batches()
    assert [h.base_offset for h in iter_batches(a + b + a[:30])] == [0, 3]
    assert [h.base_offset for h in iter_batches(a + b[:-1])] == [0]
    assert list(iter_batches(b"")) == []


def test_scan_whole_log():
    a, b = _two_batches()
    res = scan_valid_prefix(a + b, expected_next_offset=0)
    assert (res.valid_bytes, res.reason) == (len(a) + len(b), None)
    assert [h.base_offset for h in res.headers] == [0, 3]
    assert scan_valid_prefix(b"") == ([], 0, None)


def test_scan_stops_at_every_truncation():
    a, b = _two_batches()
    for cut in range(1, len(b)):
        res = scan_valid_prefix(a + b[:cut])
        assert res.valid_bytes == len(a) and len(res.headers) == 1 and res.reason, cut


def test_scan_flipped_byte_in_every_region():
    a, b = _two_batches()
    for i in range(len(b)):
        for bit in (0x01, 0x80):
            buf = bytearray(a + b)
            buf[len(a) + i] ^= bit
            res = scan_valid_prefix(bytes(buf), expected_next_offset=0)
            if i < 8:            # base offset: outside the CRC, caught only if it goes backwards
                moved = struct.unpack_from(">q", buf, len(a))[0]
                if moved < 3:
                    assert res.valid_bytes == len(a) and "base offset" in res.reason
                else:
                    assert res.reason is None and res.headers[1].base_offset == moved
            elif 12 <= i < 16:   # partition leader epoch: outside the CRC by design
                assert res.reason is None and res.valid_bytes == len(buf)
            else:                # length, magic, CRC and everything the CRC covers
                assert res.valid_bytes == len(a) and res.reason, (i, bit)
            first = bytearray(a + b)
            first[i] ^= bit
            if i >= 16 or 8 <= i < 12:
                assert scan_valid_prefix(bytes(first)).valid_bytes == 0


def test_scan_rejects_offsets_that_do_not_increase():
    a, b = _two_batches()
    assert scan_valid_prefix(b + a).reason.startswith("base offset")
    assert scan_valid_prefix(a + a).valid_bytes == len(a)
    assert scan_valid_prefix(a, expected_next_offset=1).valid_bytes == 0
    assert scan_valid_prefix(a + a, check_offsets=False).reason is None


# -- records: encode / decode --------------------------------------------------------------------

@pytest.mark.parametrize("codec", list(Compression))
def test_round_trip_every_codec(codec):
    data = build_batch(RECORDS, base_offset=100, partition_leader_epoch=4, compression=codec,
                       producer_id=77, producer_epoch=2, base_sequence=9)
    h = RecordBatchHeader(data)
    assert (h.base_offset, h.last_offset, h.records_count, h.partition_leader_epoch) == (
        100, 102, 3, 4)
    assert h.compression == codec and h.is_valid()
    assert _as_tuples(decode_batch(data)) == [
        (100 + i, k, v, hs, ts) for i, (k, v, hs, ts) in enumerate(RECORDS)]


def test_round_trip_large_varints_and_odd_values():
    big = os.urandom(300_000)                            # 3-byte varint length
    recs = [(b"", b"", [], T0 - 10**12),                 # empty (not null) key/value, far past ts
            (big, big[:70_000], [("ключ", big[:200])], T0 + 2**40),
            (None, None, [(f"h{i}", bytes([i])) for i in range(200)], T0)]
    for codec in Compression:
        got = decode_batch(build_batch(recs, compression=codec, base_offset=2**40))
        assert _as_tuples(got) == [(2**40 + i, k, v, hs, ts)
                                   for i, (k, v, hs, ts) in enumerate(recs)]


def test_records_with_own_deltas_gaps_like_a_compacted_batch():
    recs = [Record(offset_delta=0, timestamp_delta=0, key=b"a", value=b"1"),
            Record(offset_delta=5, timestamp_delta=-3, key=b"b", value=None),
            Record(offset_delta=70_000, timestamp_delta=2**33, key=b"c", value=b"3")]
    data = build_batch(recs, base_offset=10, base_timestamp=T0)
    h = RecordBatchHeader(data)
    assert (h.records_count, h.last_offset_delta, h.max_timestamp) == (3, 70_000, T0 + 2**33)
    assert [(r.offset, r.timestamp, r.key) for r in decode_batch(data).records] == [
        (10, T0, b"a"), (15, T0 - 3, b"b"), (70_010, T0 + 2**33, b"c")]


def test_log_append_time_overrides_record_timestamps():
    data = bytearray(build_batch(RECORDS, timestamp_type=TimestampType.LOG_APPEND_TIME))
    struct.pack_into(">q", data, 35, T0 + 999)           # max_timestamp (inside the CRC: redo it)
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    assert {r.timestamp for r in decode_batch(data).records} == {T0 + 999}


def test_builder_matches_build_batch_and_stamps_now():
    b = RecordBatchBuilder(base_offset=5, compression=Compression.ZSTD, producer_id=1,
                           producer_epoch=0, base_sequence=0)
    for k, v, hs, ts in RECORDS:
        b.append(k, v, hs, ts)
    assert len(b) == 3 and b.estimated_size > BATCH_HEADER_SIZE + 100
    assert b.build() == build_batch(RECORDS, base_offset=5, compression=Compression.ZSTD,
                                    producer_id=1, producer_epoch=0, base_sequence=0)
    b = RecordBatchBuilder()
    b.append(b"k", b"v")
    b.append(b"k2", b"v2", timestamp_ms=T0 + 7)
    recs = decode_batch(b.build(now_ms=T0)).records
    assert [(r.offset, r.timestamp) for r in recs] == [(0, T0), (1, T0 + 7)]
    assert build_batch([(b"k", b"v")], now_ms=T0 + 1) == build_batch([(b"k", b"v", [], T0 + 1)])
    with pytest.raises(ValueError):
        RecordBatchBuilder().build()
    with pytest.raises(ValueError):
        RecordBatchBuilder(compression=6)
    # the older keyword still works
    assert RecordBatchHeader(build_batch(RECORDS, compression_type=2)).compression == 2


def _patch_records(body: bytes, count: int | None = None) -> bytes:
    """A batch around a hand-made records section (CRC recomputed, so only records are bad)."""
    data = bytearray(build_batch([(b"k", b"v", [], T0)]))
    data = data[:BATCH_HEADER_SIZE] + body
    struct.pack_into(">i", data, 8, len(data) - 12)
    if count is not None:
        struct.pack_into(">i", data, 57, count)
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    return bytes(data)


@pytest.mark.parametrize("body,count", [
    (b"", 1),                                         # no records at all
    (b"\x12\x00\x00\x00\x02k\x02v\x00", 1),           # length claims more than there is
    (b"\x14\x00\x00\x00\x02k\x02v\x00\x00\x00", 1),   # record longer than its fields
    (b"\x14\x00\x00\x00\x02k\x02v\x02\x01\x01", 1),   # null header key
    (b"\x10\x00\x00\x00\x02k\x02v\x00", 2),           # second record missing
    (b"\x10\x00\x00\x00\x02k\x02v\x00", 2**31 - 1),   # absurd count
    (b"\x10\x00\x00\x00\xfe\xff\xff\xff\x0f", 1),     # key length claiming 2 GiB
    (b"\xff\xff\xff\xff\xff\xff", 1),                 # varint longer than 5 bytes
    (b"\x10\x00\x00\x00\x02k\x02v\x00\x00", 1),       # a stray byte after the last record
    (b"\x00\x10\x00\x00\x00\x02k\x02v\x00", 1),       # zero-length record
    (b"\x10\x00\x00\x00\x02k\x02v\x00", -1),          # negative count
])
def test_malformed_records_raise_decode_error(body, count):
    with pytest.raises(DecodeError):
        decode_batch(_patch_records(body, count))


def test_well_formed_hand_made_record_decodes():
    rec = decode_batch(_patch_records(b"\x10\x00\x00\x00\x02k\x02v\x00", 1)).records
    assert [(r.offset, r.key, r.value, r.headers) for r in rec] == [(0, b"k", b"v", [])]


# -- control records -----------------------------------------------------------------------------

@pytest.mark.parametrize("commit", [True, False])
def test_end_txn_marker(commit):
    data = rb.build_end_txn_marker(commit, producer_id=5, producer_epoch=1, coordinator_epoch=3,
                                   base_offset=40, timestamp_ms=T0)
    h = RecordBatchHeader(data)
    assert h.is_control and h.is_transactional and (h.producer_id, h.producer_epoch) == (5, 1)
    (rec,) = decode_batch(data).records
    want = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
    assert rb.parse_control_key(rec.key) == (0, want) and rec.key == bytes([0, 0, 0, int(want)])
    assert rb.control_record_type(rec.key) is want
    assert rb.parse_end_txn_marker_value(rec.value) == (0, 3)
    assert rec.value == b"\x00\x00\x00\x00\x00\x03" and (rec.offset, rec.timestamp) == (40, T0)


def test_kraft_control_records_and_unknown_types():
    assert [int(t) for t in ControlRecordType] == [0, 1, 2, 3, 4, 5, 6]
    for rtype in list(ControlRecordType)[2:]:
        data = rb.build_control_batch(rtype, b"\x00\x01payload", base_offset=9,
                                      timestamp_ms=T0, partition_leader_epoch=2)
        h = RecordBatchHeader(data)
        assert h.is_control and not h.is_transactional and h.partition_leader_epoch == 2
        (rec,) = decode_batch(data).records
        assert rb.control_record_type(rec.key) is rtype and rec.value == b"\x00\x01payload"
    assert rb.control_record_type(rb.control_key(42)) == 42
    for bad in (None, b"\x00\x00\x01"):
        with pytest.raises(DecodeError):
            rb.parse_control_key(bad)
    with pytest.raises(DecodeError):
        rb.parse_end_txn_marker_value(b"\x00\x00\x00")


def test_structural_checks_apply_even_without_crc_verification():
    data = bytearray(build_batch(RECORDS))
    struct.pack_into(">i", data, 57, -5)                   # negative count, stale CRC
    with pytest.raises(DecodeError):
        decode_batch(bytes(data), verify_crc=False)
    data = bytearray(build_batch(RECORDS))
    data[-1] ^= 0xFF                                        # corrupt record byte, stale CRC
    with pytest.raises(DecodeError, match="CRC"):
        decode_batch(bytes(data))


def test_scan_from_a_position():
    a, b = _two_batches()
    buf = a + b
    res = scan_valid_prefix(buf, expected_next_offset=3, pos=len(a))
    assert (res.valid_bytes, res.reason, [h.base_offset for h in res.headers]) == (
        len(b), None, [3])
