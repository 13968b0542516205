"""RecordBatch v2: header view, CRC, patching, records, codecs, golden batches from real clients."""

import random

import pytest

from wire.errors import DecodeError
from wire.records import batch as rb
from wire.records import compression
from wire.records.batch import (BATCH_HEADER_SIZE, Compression, RecordBatchHeader, build_batch,
                                decode_batch, iter_batches, scan_valid_prefix, set_base_offset,
                                set_partition_leader_epoch)
from wire.records.crc32c import crc32c, crc32c_pure

RECORDS = [(b"k1", b"v1", [("h", b"x")], 1_700_000_000_000),
           (None, b"v2" * 50, [], 1_700_000_000_005),
           (b"k3", None, [("a", None), ("b", b"")], 1_700_000_000_002)]


def test_crc32c_known_vector_and_fallback_agree():
    assert crc32c(b"123456789") == 0xE3069283          # the standard CRC-32C check value
    data = bytes(random.Random(1).getrandbits(8) for _ in range(5000))
    assert crc32c(data) == crc32c_pure(data)


@pytest.mark.parametrize("codec", list(Compression))
def test_build_and_decode_round_trip(codec):
    data = build_batch(RECORDS, base_offset=100, partition_leader_epoch=4, compression_type=codec,
                       producer_id=77, producer_epoch=2, base_sequence=9)
    h = RecordBatchHeader(data)
    assert (h.base_offset, h.last_offset, h.records_count, h.partition_leader_epoch) == (100, 102, 3, 4)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (77, 2, 9)
    assert h.compression == codec and h.is_valid()
    assert h.base_timestamp == 1_700_000_000_000 and h.max_timestamp == 1_700_000_000_005
    got = decode_batch(data).records
    assert [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in got] == [
        (100 + i, k, v, h_, ts) for i, (k, v, h_, ts) in enumerate(RECORDS)]


def test_patching_offset_and_epoch_keeps_crc_valid():
    data = bytearray(build_batch(RECORDS))
    set_base_offset(data, 0, 5000)
    set_partition_leader_epoch(data, 0, 12)
    h = RecordBatchHeader(data)
    assert h.base_offset == 5000 and h.partition_leader_epoch == 12 and h.is_valid()


def test_scan_stops_at_torn_or_corrupt_batches():
    a = build_batch(RECORDS, base_offset=0)
    b = build_batch(RECORDS, base_offset=3)
    whole = a + b
    assert scan_valid_prefix(whole).valid_bytes == len(whole)
    for cut in range(1, len(b)):
        res = scan_valid_prefix(whole[:len(a) + cut])
        assert res.valid_bytes == len(a) and res.reason
    for i in range(len(a), len(whole)):
        flipped = bytearray(whole)
        flipped[i] ^= 0x40
        res = scan_valid_prefix(bytes(flipped))
        if 0 <= i - len(a) < 12 and i - len(a) >= 8:
            pass  # a flipped length is caught as torn/oversized or as CRC mismatch
        if i - len(a) >= 12 and not (12 <= i - len(a) < 16):
            assert res.valid_bytes == len(a), i     # anything but the epoch is protected
    assert scan_valid_prefix(b + a).reason.startswith("base offset")


def test_iter_batches_ignores_partial_tail():
    a = build_batch(RECORDS, base_offset=0)
    assert [h.base_offset for h in iter_batches(a + a[:30])] == [0]


def test_control_batch():
    data = rb.build_end_txn_marker(True, producer_id=5, producer_epoch=1, coordinator_epoch=3)
    h = RecordBatchHeader(data)
    assert h.is_control and h.is_transactional
    (rec,) = decode_batch(data).records
    assert rb.parse_control_key(rec.key) == (0, rb.ControlRecordType.COMMIT)
    assert rb.parse_end_txn_marker_value(rec.value) == (0, 3)


# -- golden batches from the real Python clients ---------------------------------------------------

KP_CODECS = {0: Compression.NONE, 1: Compression.GZIP, 2: Compression.SNAPPY, 3: Compression.LZ4,
             4: Compression.ZSTD}


def _client_batch(builder_cls, codec):
    b = builder_cls(magic=2, compression_type=codec, is_transactional=False, producer_id=-1,
                    producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i, (k, v, h, ts) in enumerate(RECORDS):
        b.append(i, timestamp=ts, key=k, value=v, headers=[(n, x) for n, x in h])
    return bytes(b.build())


@pytest.mark.parametrize("codec", sorted(KP_CODECS))
@pytest.mark.parametrize("client", ["kafka-python", "aiokafka"])
def test_client_batches_decode_to_what_was_sent(client, codec):
    if client == "kafka-python":
        from kafka.record.default_records import DefaultRecordBatchBuilder
    else:
        from aiokafka.record.default_records import DefaultRecordBatchBuilder
    data = _client_batch(DefaultRecordBatchBuilder, codec)
    h = RecordBatchHeader(data)
    assert h.is_valid() and h.compression == KP_CODECS[codec] and h.records_count == 3
    got = decode_batch(data).records
    assert [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in got] == [
        (i, k, v, h_, ts) for i, (k, v, h_, ts) in enumerate(RECORDS)]
    if codec == 0:
        # byte-identical for the uncompressed case (kafka-python stamps leader epoch 0, aiokafka -1)
        assert build_batch(RECORDS, partition_leader_epoch=h.partition_leader_epoch) == data


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.SNAPPY, Compression.LZ4,
                                   Compression.ZSTD])
def test_our_batches_decode_in_kafka_python(codec):
    from kafka.record.default_records import DefaultRecordBatch
    data = build_batch(RECORDS, compression_type=codec)
    recs = list(DefaultRecordBatch(bytearray(data)))
    assert [(r.key, r.value, r.timestamp) for r in recs] == [(k, v, ts) for k, v, _, ts in RECORDS]


def test_raw_snappy_from_librdkafka_style_decodes():
    import cramjam
    payload = b"hello snappy " * 100
    raw = bytes(cramjam.snappy.compress_raw(payload))
    assert compression.decompress(Compression.SNAPPY, raw) == payload


def test_decompression_bomb_is_refused():
    bomb = compression.compress(Compression.ZSTD, b"\0" * (8 << 20))
    with pytest.raises(DecodeError):
        compression.decompress(Compression.ZSTD, bomb, max_bytes=1 << 20)
    for codec in (Compression.GZIP, Compression.LZ4, Compression.SNAPPY):
        with pytest.raises(DecodeError):
            compression.decompress(codec, compression.compress(codec, b"\0" * (4 << 20)),
                                   max_bytes=1 << 20)


def test_fuzzed_batches_decode_or_raise_decode_error():
    rng = random.Random(7)
    seeds = [build_batch(RECORDS, compression_type=c) for c in Compression]
    for i in range(10_000):
        data = bytearray(rng.choice(seeds))
        kind = i % 3
        if kind == 0:
            for _ in range(rng.randint(1, 4)):
                data[rng.randrange(len(data))] = rng.getrandbits(8)
        elif kind == 1:
            data = data[:rng.randrange(len(data))]
        else:
            data = bytearray(rng.getrandbits(8) for _ in range(rng.randint(0, 120)))
        try:
            decode_batch(bytes(data), verify_crc=bool(i % 2))
        except DecodeError:
            pass
    assert BATCH_HEADER_SIZE == 61
