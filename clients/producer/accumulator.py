"""The producer's record accumulator: batches being filled and their records' outcomes.

No I/O and no clock of its own (the sender passes `now`). `ProducerBatch` is one v2 record
batch: records are encoded as they are appended, `seal` adds the header once and the same bytes
are resent on every retry. `RecordAccumulator` keeps one deque of batches per partition, decides
which are ready (full, lingered long enough, or a flush is pending), drains them for a request,
puts retried batches back in creation order, and charges memory per batch (buffer.memory).
`DeliveryFuture` is a caller's handle on one record's place in its batch; the outcome is stored
once per batch. See producer.py for the whole picture.
"""

from __future__ import annotations

import collections
import struct
from typing import Callable, NamedTuple

import trio

from clients.cluster import TopicPartition
from wire.records import compression as codecs
from wire.records.batch import BATCH_HEADER_SIZE, HEADER, MAGIC, _vb, encode_record_fields
from wire.records.crc32c import crc32c

NO_SEQUENCE = -1
TRANSACTIONAL_FLAG = 0x10           # record batch attribute bit 4


class RecordMetadata(NamedTuple):
    topic: str
    partition: int
    offset: int          # -1 with acks=0
    timestamp: int       # create time, or the broker's log-append time when the topic uses it


class DeliveryFuture:
    """The outcome of one `send`: await it, poll `done()`, or add a callback.

    A handle on its record's place in its batch, nothing more: a batch completes as a whole
    (one base offset, one error for all its records), so the outcome is stored once on the
    batch, and the record's callbacks and timestamp sit in the batch's own lists. The batch
    keeps no reference to the future, so a future the caller drops is freed at once (a
    producer holding one live object per record in flight kept the garbage collector busy:
    ~1 s of full collections in a 3 s run of 200k records). A batch split in two
    (MESSAGE_TOO_LARGE) points to its halves, and the future follows."""

    __slots__ = ("_batch", "_index")

    def __init__(self, batch: "ProducerBatch", index: int):
        self._batch = batch
        self._index = index

    def _where(self) -> tuple["ProducerBatch", int]:
        b, i = self._batch, self._index
        if b.split_into is not None:
            while b.split_into is not None:
                first, second = b.split_into
                if i < first.record_count:
                    b = first
                else:
                    b, i = second, i - first.record_count
            self._batch, self._index = b, i
        return b, i

    @property
    def topic(self) -> str:
        return self._batch.tp.topic

    @property
    def partition(self) -> int:
        return self._batch.tp.partition

    @property
    def timestamp(self) -> int:
        b, i = self._where()
        return b.timestamps[i]

    def done(self) -> bool:
        return self._where()[0].done

    def _meta(self) -> RecordMetadata | None:
        b, i = self._where()
        if b.exc is not None:
            return None
        return b.metadata(i)

    def result(self) -> RecordMetadata:
        b, i = self._where()
        if not b.done:
            raise RuntimeError("delivery not complete yet")
        if b.exc is not None:
            raise b.exc_for(i)
        return b.metadata(i)

    def exception(self) -> BaseException | None:
        b, i = self._where()
        return b.exc_for(i) if b.done else None

    def add_callback(self, fn: Callable) -> None:
        """`fn(meta, exc)`; called at once if already done. Callbacks of one partition run in
        record order."""
        b, i = self._where()
        if b.done:
            fn(self._meta(), b.exc_for(i))
        else:
            b.add_callback(i, fn)

    async def wait(self) -> RecordMetadata:
        # a loop: a batch split in two wakes its waiters, who then wait on their half
        while True:
            b = self._where()[0]
            if b.done:
                return self.result()
            if b.event is None:
                b.event = trio.Event()
            await b.event.wait()

    def __await__(self):
        return self.wait().__await__()


def record_size(key, value, headers) -> int:
    # mirrors RecordBatchBuilder.estimated_size's per-record estimate
    size = 21 + (len(key) if key else 0) + (len(value) if value else 0)
    if headers:
        size += sum(len(k) + len(v or b"") + 10 for k, v in headers)
    return size


_PID_EPOCH_SEQ = struct.Struct(">qhi")     # producer id, epoch, base sequence at header byte 43
_NULL = _vb(-1)
# zig-zag varints of 0..8191 (offset deltas, lengths and ms deltas of a batch nearly always)
SMALL_VARINT = [_vb(n) for n in range(8192)]
# length of each of those; the largest value send_nowait's fast path encodes (its record's
# length must stay below 8192 too; a producer lowers it to fit its max.request.size)
SMALL_VARINT_LEN = [len(b) for b in SMALL_VARINT]
ATTR_TS = [b"\x00" + z for z in SMALL_VARINT]         # attributes 0, then a timestamp delta
NULL_KEY_LEN = [_NULL + z for z in SMALL_VARINT]       # a null key, then a value length
FAST_VALUE_MAX = 8000


class ProducerBatch:
    """One v2 record batch being filled. Records are encoded as they are appended (the producer
    hot path; the generic RecordBatchBuilder keeps Record objects and encodes at build time,
    which costs twice as much per record); `seal` adds the header once, and the same bytes are
    resent on every retry."""

    __slots__ = ("tp", "compression", "body", "callbacks", "timestamps", "created", "alloc",
                 "attempts", "retry_at", "data", "sealed", "record_count", "last_error",
                 "base_ts", "max_ts", "size", "order", "producer_id", "producer_epoch",
                 "base_sequence", "n_callbacks", "done", "base_offset", "log_append_time", "exc",
                 "event", "split_into", "record_excs", "in_doubt")

    def __init__(self, tp: TopicPartition, compression: int, created: float, alloc: int,
                 order: tuple = (0,)):
        self.tp = tp
        self.compression = compression
        self.body: list[bytes] = []
        # per record: its callback (None, one callable, or a list) and its timestamp
        self.callbacks: list = []
        self.timestamps: list[int] = []
        self.created = created
        self.alloc = alloc
        self.attempts = 0
        self.retry_at = 0.0
        self.data: bytes | None = None      # built once, resent unchanged
        self.sealed = False                 # drained at least once: no more appends
        # an attempt ended without the broker's answer for it (timed out, connection lost):
        # the broker may have written it, so only its own producer id and sequence may resend
        # it (the broker then drops the duplicate); never restamped under a new producer id
        self.in_doubt = False
        self.record_count = 0
        self.last_error: Exception | None = None    # the latest retriable failure, for timeouts
        self.base_ts = -1
        self.max_ts = -1
        self.size = BATCH_HEADER_SIZE       # bytes so far (uncompressed)
        # creation order within the partition; a split batch's halves extend it ((n, 0), (n, 1))
        # so a retried or split batch goes back exactly where it was
        self.order = order
        self.producer_id, self.producer_epoch, self.base_sequence = -1, -1, NO_SEQUENCE
        # the outcome, shared by the batch's records (see DeliveryFuture)
        self.n_callbacks = 0                # records of this batch with a callback
        self.split_into: tuple[ProducerBatch, ProducerBatch] | None = None
        self.done = False
        self.base_offset = -1
        self.log_append_time = -1
        self.exc: BaseException | None = None
        # KIP-467: the broker named these records (by index) as why it refused the batch;
        # they fail with their own error, the rest of the batch with `exc`
        self.record_excs: dict[int, BaseException] | None = None
        self.event: trio.Event | None = None    # made by the first waiter

    def complete(self, base_offset: int, log_append_time: int | None,
                 exc: BaseException | None = None) -> None:
        """Settle every record of the batch: the outcome is stored once, then the callbacks
        run in record order (the only per-record work, and only for records with one)."""
        if self.done:
            return
        self.done = True
        self.base_offset = base_offset
        lat = self.log_append_time = -1 if log_append_time is None else log_append_time
        self.exc = exc
        if self.event is not None:
            self.event.set()
        if not self.n_callbacks:
            return
        topic, partition = self.tp
        meta = None
        new, rm = tuple.__new__, RecordMetadata     # RecordMetadata(...) without its Python __new__
        timestamps = self.timestamps
        for i, cbs in enumerate(self.callbacks):
            if cbs is None:
                continue
            if exc is None:
                meta = new(rm, (topic, partition, base_offset + i if base_offset >= 0 else -1,
                                timestamps[i] if lat < 0 else lat))
            rexc = exc if self.record_excs is None else self.record_excs.get(i, exc)
            if cbs.__class__ is list:
                for fn in cbs:
                    try:
                        fn(meta, rexc)
                    except Exception:  # noqa: BLE001 - a user callback must not kill the sender
                        pass
            else:
                try:
                    cbs(meta, rexc)
                except Exception:  # noqa: BLE001 - a user callback must not kill the sender
                    pass

    def exc_for(self, i: int) -> BaseException | None:
        """Record `i`'s error: its own when the broker named it (KIP-467), else the batch's."""
        if self.record_excs is None or self.exc is None:
            return self.exc
        return self.record_excs.get(i, self.exc)

    def metadata(self, i: int) -> RecordMetadata:
        """Record `i`'s metadata once the batch is acknowledged: the broker's log-append time
        when the topic uses it, else the record's own timestamp (as in Kafka)."""
        lat = self.log_append_time
        return RecordMetadata(self.tp.topic, self.tp.partition,
                              self.base_offset + i if self.base_offset >= 0 else -1,
                              self.timestamps[i] if lat < 0 else lat)

    def add_callback(self, i: int, fn: Callable) -> None:
        cbs = self.callbacks[i]
        if cbs is None:
            self.callbacks[i] = fn
            self.n_callbacks += 1
        elif cbs.__class__ is list:
            cbs.append(fn)
        else:
            self.callbacks[i] = [cbs, fn]

    def adopt(self, callbacks: list, timestamps: list[int]) -> None:
        """Take over the records' callbacks and timestamps (a half of a split batch)."""
        self.callbacks, self.timestamps = callbacks, timestamps
        self.n_callbacks = sum(1 for c in callbacks if c is not None)

    def append(self, key, value, headers, ts: int) -> None:
        if self.record_count == 0:
            self.base_ts = self.max_ts = ts
        elif ts > self.max_ts:
            self.max_ts = ts
        # the long way (keys, headers, big values): wire.records' encoder (C when built)
        rec = bytearray()
        self.size += encode_record_fields(rec, self.record_count, ts - self.base_ts, key, value,
                                          headers or ())
        self.body.append(bytes(rec))
        self.record_count += 1

    def seal(self, producer_id: int, producer_epoch: int, base_sequence: int,
             transactional: bool = False) -> bytes:
        if self.data is None:
            body = b"".join(self.body)
            if self.compression:
                body = codecs.compress(self.compression, body)
            attrs = self.compression | (TRANSACTIONAL_FLAG if transactional else 0)
            if self.timestamps:
                # send_nowait's fast path leaves max_ts to this (one max() per batch)
                self.max_ts = max(self.max_ts, max(self.timestamps))
            out = bytearray(HEADER.pack(0, BATCH_HEADER_SIZE - 12 + len(body), -1, MAGIC, 0,
                                        attrs, self.record_count - 1, self.base_ts,
                                        self.max_ts, producer_id, producer_epoch, base_sequence,
                                        self.record_count))
            out += body
            out[17:21] = crc32c(memoryview(out)[21:]).to_bytes(4, "big")
            self.data = bytes(out)
            self.body = None
            self.sealed = True
            self.producer_id, self.producer_epoch = producer_id, producer_epoch
            self.base_sequence = base_sequence
        return self.data

    def restamp(self, producer_id: int, producer_epoch: int, base_sequence: int) -> bytes:
        """Same records under a new producer id/epoch and base sequence (after the producer
        took a new id, sequences restart): patch the header fields and the CRC over them."""
        out = bytearray(self.data)
        out[43:57] = _PID_EPOCH_SEQ.pack(producer_id, producer_epoch, base_sequence)
        out[17:21] = crc32c(memoryview(out)[21:]).to_bytes(4, "big")
        self.data = bytes(out)
        self.producer_id, self.producer_epoch = producer_id, producer_epoch
        self.base_sequence = base_sequence
        return self.data


class RecordAccumulator:
    """Per-partition batches, readiness and memory accounting; no I/O, no clock of its own."""

    def __init__(self, batch_size: int, linger_s: float, buffer_memory: int, compression: int):
        self.batch_size = batch_size
        self.linger_s = linger_s
        self.buffer_memory = buffer_memory
        self.compression = compression
        self.batches: dict[TopicPartition, collections.deque[ProducerBatch]] = {}
        self.used = 0
        self._order = 0

    def has_room_in_open_batch(self, tp: TopicPartition, size: int) -> bool:
        dq = self.batches.get(tp)
        if not dq:
            return False
        last = dq[-1]
        return not last.sealed and (last.size + size <= self.batch_size)

    def append(self, tp: TopicPartition, key, value, headers, timestamp_ms: int,
               now, size: int | None = None) -> tuple[DeliveryFuture | None, bool]:
        """(future, created_new_batch); (None, False) when buffer.memory has no room.
        `now`: the time, or a function returning it (called only for a new batch)."""
        if size is None:
            size = record_size(key, value, headers)
        dq = self.batches.get(tp)
        if dq is None:
            dq = self.batches[tp] = collections.deque()
        # buffer.memory is charged with what batches hold, record by record, not with a
        # batch.size reservation per batch (Java's pooled buffers): with a reservation, 1,000
        # partitions fill 32 MiB with 2,000 open batches of a record or two each, and records
        # sent round-robin then only ever start new 1-record batches as memory frees up (our
        # producer over 1,000 partitions: 1-2 records per batch, 7x librdkafka's broker CPU
        # per record, bench/README.md). A first record is always let in (progress).
        new = not dq or dq[-1].sealed or dq[-1].size + size > self.batch_size
        charge = size + BATCH_HEADER_SIZE if new else size
        if self.used + charge > self.buffer_memory and self.used > 0:
            return None, False
        if new:
            self._order += 1
            dq.append(ProducerBatch(tp, self.compression, now() if callable(now) else now,
                                    0, (self._order,)))
        batch = dq[-1]
        batch.alloc += charge
        self.used += charge
        batch.append(key, value, headers, timestamp_ms)
        fut = DeliveryFuture(batch, batch.record_count - 1)
        batch.callbacks.append(None)
        batch.timestamps.append(timestamp_ms)
        return fut, new

    def ready(self, now: float, leader_for: Callable[[TopicPartition], int | None],
              flushing: bool) -> tuple[dict[int, list[TopicPartition]], float, bool]:
        """({node: [tp ready to send]}, when to look again, some partition lacks a leader)."""
        nodes: dict[int, list[TopicPartition]] = {}
        next_check = float("inf")
        unknown_leader = False
        for tp, dq in self.batches.items():
            if not dq:
                continue
            b = dq[0]
            if b.retry_at > now:
                next_check = min(next_check, b.retry_at)
                continue
            leader = leader_for(tp)
            if leader is None:
                unknown_leader = True
                continue
            full = len(dq) > 1 or b.sealed or b.size >= self.batch_size
            due = b.created + self.linger_s
            if full or flushing or due <= now:
                nodes.setdefault(leader, []).append(tp)
            else:
                next_check = min(next_check, due)
        return nodes, next_check, unknown_leader

    def drain(self, tps: list[TopicPartition], max_bytes: int) -> list[ProducerBatch]:
        out: list[ProducerBatch] = []
        size = 0
        for tp in tps:
            dq = self.batches.get(tp)
            if not dq:
                continue
            b = dq[0]
            est = len(b.data) if b.data is not None else b.size
            if out and size + est > max_bytes:
                break
            dq.popleft()
            out.append(b)
            size += est
        return out

    def reenqueue(self, batch: ProducerBatch) -> None:
        """Put a batch back in creation order: with several requests in flight, failed batches
        of one partition come back in any order and must be resent in sequence order."""
        dq = self.batches.setdefault(batch.tp, collections.deque())
        i = 0
        while i < len(dq) and dq[i].order < batch.order:
            i += 1
        dq.insert(i, batch)

    def release(self, batch: ProducerBatch) -> None:
        self.used -= batch.alloc

    def expired(self, now: float, delivery_timeout_s: float) -> list[ProducerBatch]:
        out = []
        for dq in self.batches.values():
            while dq and now - dq[0].created >= delivery_timeout_s:
                out.append(dq.popleft())
        return out

    def take(self, which) -> list[ProducerBatch]:
        """Remove and return the waiting batches for which `which(batch)` holds."""
        out = []
        for tp, dq in self.batches.items():
            if any(which(b) for b in dq):
                keep = collections.deque(b for b in dq if not which(b))
                out += [b for b in dq if which(b)]
                self.batches[tp] = keep
        return out

    def empty(self) -> bool:
        return not any(self.batches.values())

    def all_batches(self) -> list[ProducerBatch]:
        out = [b for dq in self.batches.values() for b in dq]
        for dq in self.batches.values():
            dq.clear()
        return out
