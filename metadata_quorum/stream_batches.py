"""Record batches of the metadata stream (Fetch) and its snapshot (FetchSnapshot), built off
the controller's event loop when they are big.

The controller's trio loop also answers broker heartbeats and runs its session clock. Building
a FetchSnapshot answer at 30,000 partitions (every record of the image encoded, then one Kafka
record batch of them) took over a second of that loop per broker, and a full restart's three
brokers asked at once: `controller stalled for 1.2-3.0 s` warnings, heartbeats answered late
(bench/README.md, "A full restart's brokers register at once"). The image is immutable, so the
work moves to a worker thread; the snapshot's bytes are kept for the offset they were made at,
so brokers asking at the same offset share one encoding.
"""

from __future__ import annotations

import time

import trio

from metadata_quorum.records import encode_record
from wire.records.batch import Record, build_batch

THREAD_RECORDS = 1000       # a batch of more records than this is built in a worker thread


def records_batch(base_offset: int, encoded: list[bytes]) -> bytes:
    ts = int(time.time() * 1000)
    return build_batch([Record(offset_delta=i, value=e) for i, e in enumerate(encoded)],
                       base_offset=base_offset, base_timestamp=ts)


async def stream_batch(base_offset: int, encoded: list[bytes]) -> bytes:
    """`records_batch`, in a worker thread when it is big."""
    if len(encoded) <= THREAD_RECORDS:
        return records_batch(base_offset, encoded)
    return await trio.to_thread.run_sync(records_batch, base_offset, encoded)


def _image_batch(image) -> bytes:
    encoded = [encode_record(r) for r in image.to_records()]
    return records_batch(0, encoded) if encoded else b""


class SnapshotBatches:
    """The committed image as one record batch, per metadata offset (the last one kept)."""

    def __init__(self):
        self._lock = trio.Lock()
        self._end: int | None = None
        self._data = b""
        self.built = 0                          # encodings made (tests)

    async def batch(self, image, end: int) -> bytes:
        async with self._lock:                  # a second asker at the same offset waits, reuses
            if self._end != end:
                self._data = await trio.to_thread.run_sync(_image_batch, image)
                self._end = end
                self.built += 1
            return self._data
