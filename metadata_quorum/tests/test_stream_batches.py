"""metadata_quorum/stream_batches.py: the metadata snapshot's record batch is built off the
event loop (the loop keeps running meanwhile) and once per offset for any number of brokers
asking at once; a big stream batch carries what a small one would."""

import time
import uuid

import trio

from metadata_quorum import records as r
from metadata_quorum.image import MetadataImage
from metadata_quorum.stream_batches import SnapshotBatches, records_batch, stream_batch
from wire.records.batch import decode_batch


def _values(batch: bytes) -> list[bytes]:
    return [rec.value for rec in decode_batch(batch).records]


def _image(topics: int) -> MetadataImage:
    recs = []
    for i in range(topics):
        tid = uuid.uuid4()
        recs += [r.TopicRecord(f"t{i}", tid), r.PartitionRecord(tid, 0, (1,), (1,), 1)]
    return MetadataImage.from_records(recs, len(recs) - 1)


async def test_brokers_asking_at_one_offset_share_one_encoding_of_the_image():
    image, snapshots = _image(50), SnapshotBatches()
    got = []

    async def ask():
        got.append(await snapshots.batch(image, 100))
    async with trio.open_nursery() as n:
        for _ in range(3):
            n.start_soon(ask)
    assert snapshots.built == 1 and got[0] == got[1] == got[2]
    assert _values(got[0]) == [r.encode_record(x) for x in image.to_records()]
    await snapshots.batch(image, 101)           # a later offset: encoded again
    assert snapshots.built == 2


async def test_the_event_loop_runs_while_a_snapshot_is_encoded():
    class Slow:
        def to_records(self):
            time.sleep(0.5)                     # the encoding of a big image, holding its thread
            return [r.NoOpRecord()]

    ticks = [0]

    async def ticker():
        while True:
            ticks[0] += 1
            await trio.sleep(0.01)
    async with trio.open_nursery() as n:
        n.start_soon(ticker)
        await SnapshotBatches().batch(Slow(), 1)
        n.cancel_scope.cancel()
    assert ticks[0] >= 10, ticks[0]             # on the loop it would be 1


async def test_a_big_stream_batch_carries_what_a_small_one_would():
    encoded = [r.encode_record(r.NoOpRecord()) for _ in range(2500)]
    big = await stream_batch(7, encoded)
    assert _values(big) == _values(records_batch(7, encoded)) == encoded
    assert decode_batch(big).header.base_offset == 7
