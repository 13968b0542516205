"""Golden batches from real clients' own record builders (kafka-python 3.x, aiokafka).

Built in-process with the clients' DefaultRecordBatchBuilder: our decoder must return exactly
the records sent, our header view must agree with the client's, and our builder must produce the
same bytes wherever the client's compressor is deterministic (gzip embeds a timestamp, and
aiokafka's lz4 uses different frame options: there the decompressed records must match).
"""

import importlib

import pytest

from wire.records import compression as codecs
from wire.records.batch import (BATCH_HEADER_SIZE, Compression, RecordBatchHeader, build_batch,
                                decode_batch)

T0 = 1_700_000_000_000
RECORDS = [(b"k1", b"v1", [("h", b"x")], T0),
           (None, b"v2" * 50, [], T0 + 5),
           (b"k3", None, [("a", None), ("b", b"")], T0 + 2),
           (b"", b"\x00" * 300, [("unicode-\u00e9", b"\xff")], T0 - 7)]
CLIENTS = {"kafka-python": "kafka.record.default_records",
           "aiokafka": "aiokafka.record.default_records"}
BYTE_IDENTICAL = {("kafka-python", Compression.NONE), ("kafka-python", Compression.SNAPPY),
                  ("kafka-python", Compression.LZ4), ("kafka-python", Compression.ZSTD),
                  ("aiokafka", Compression.NONE), ("aiokafka", Compression.SNAPPY),
                  ("aiokafka", Compression.ZSTD)}


def _client_batch(client: str, codec: int, **kw) -> tuple[bytes, object]:
    mod = importlib.import_module(CLIENTS[client])
    builder = mod.DefaultRecordBatchBuilder(
        magic=2, compression_type=int(codec), is_transactional=kw.get("txn", False),
        producer_id=kw.get("pid", -1), producer_epoch=kw.get("epoch", -1),
        base_sequence=kw.get("seq", -1), batch_size=1 << 20)
    for i, (k, v, h, ts) in enumerate(RECORDS):
        builder.append(i, timestamp=ts, key=k, value=v, headers=list(h))
    data = bytes(builder.build())
    return data, mod.DefaultRecordBatch(bytearray(data))


@pytest.mark.parametrize("codec", list(Compression))
@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_client_batch_decodes_to_what_was_sent(client, codec):
    data, theirs = _client_batch(client, codec, pid=4000, epoch=2, seq=17, txn=True)
    h = RecordBatchHeader(data)
    assert h.is_valid() and h.compression == codec and h.records_count == len(RECORDS)
    assert (h.base_offset, h.magic, h.crc, h.attributes) == (
        theirs.base_offset, theirs.magic, theirs.crc, theirs.attributes)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.is_transactional) == (
        4000, 2, 17, True) == (theirs.producer_id, theirs.producer_epoch,
                               theirs.base_sequence, theirs.is_transactional)
    assert (h.base_timestamp, h.max_timestamp, h.last_offset_delta) == (
        T0, T0 + 5, len(RECORDS) - 1)                # base = the first record's timestamp
    got = decode_batch(data).records
    assert [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in got] == [
        (i, k, v, hs, ts) for i, (k, v, hs, ts) in enumerate(RECORDS)]


@pytest.mark.parametrize("codec", list(Compression))
@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_our_builder_matches_the_client_bytes(client, codec):
    data, _ = _client_batch(client, codec)
    h = RecordBatchHeader(data)
    ours = build_batch(RECORDS, compression=codec, partition_leader_epoch=h.partition_leader_epoch)
    if (client, codec) in BYTE_IDENTICAL:
        assert ours == data
    else:
        # same header fields up to the length/CRC, same records once decompressed
        ours_body = codecs.decompress(codec, ours[BATCH_HEADER_SIZE:])
        their_body = codecs.decompress(codec, data[BATCH_HEADER_SIZE:])
        assert ours_body == their_body
        assert ours[:8] == data[:8] and ours[12:17] == data[12:17]
        assert ours[21:BATCH_HEADER_SIZE] == data[21:BATCH_HEADER_SIZE]


@pytest.mark.parametrize("codec", list(Compression))
@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_client_reads_our_batches(client, codec):
    mod = importlib.import_module(CLIENTS[client])
    data = build_batch(RECORDS, compression=codec, base_offset=50)
    theirs = mod.DefaultRecordBatch(bytearray(data))
    assert theirs.validate_crc()
    recs = list(theirs)
    assert [(r.offset, r.key, r.value, r.timestamp, [(k, v) for k, v in r.headers])
            for r in recs] == [(50 + i, k, v, ts, hs) for i, (k, v, hs, ts) in
                               enumerate(RECORDS)]
