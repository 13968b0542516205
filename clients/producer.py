"""The producer: a record accumulator and a sender, trio-native.

    async with Producer("127.0.0.1:9092", {"linger.ms": 5}) as producer:
        fut = await producer.send("events", b"value", key=b"k")
        meta = await fut          # RecordMetadata(topic, partition, offset, timestamp)
        await producer.flush()

`send` appends to the accumulator and returns at once with a `DeliveryFuture`; it only waits
when `buffer.memory` is full (back-pressure, up to `max.block.ms`) or the topic's metadata is not
known yet. Callbacks (`on_delivery(meta, exc)`) run on the trio thread when the batch completes.

Accumulator (`RecordAccumulator`, no I/O): one deque of batches per partition. A batch is *ready*
when it is full (`batch.size`), has waited `linger.ms`, or a flush/close is pending; a retried
batch waits out its backoff at the head of its deque, so a partition's batches are always sent in
order. Memory is charged per batch (at least `batch.size`, like Kafka's buffer pool) and released
when the batch completes.

Sender: groups ready batches by the leader of their partition into one Produce request per node
with at most one batch per partition. Up to `max.in.flight.requests.per.connection` (default 5)
requests per node are outstanding at once, pipelined on one connection (`_Pipe`: the broker
answers a connection's requests in order; several connections would not keep order). When that
connection dies, nothing drained before it died is written on the next one: requests still
waiting for their turn go back to the queue unwritten, and the node sends nothing new until
every request that was on the dead connection is back too, so resends keep their place. A batch
that comes back for a retry is put back in creation order, and a partition whose next batch is
such a resend sends it only when none of its batches is in flight, so resends go out one at a
time, in order. With idempotence that keeps every partition in order across retries: a batch
behind a failed one gets OUT_OF_ORDER_SEQUENCE_NUMBER from the broker (its predecessor is
missing) and is retried after it, as Kafka does, which is why idempotence needs
max.in.flight <= 5 (the broker remembers 5 batches per producer). WITHOUT idempotence and with
retries, more than one request in flight may reorder a partition's records when a batch is
retried after its successor was written (Kafka documents the same); set
max.in.flight.requests.per.connection=1 for order without idempotence.

MESSAGE_TOO_LARGE for a batch of several records (the topic's max.message.bytes is smaller than
batch.size): the batch is split in halves and resent in its place (Java does the same); a single
record over the limit fails with MessageTooLargeError.

Errors: retriable ones (classified in `clients/errors.py`) put the batch back with
`retry.backoff.ms`, refreshing metadata first on NOT_LEADER_OR_FOLLOWER and friends, until
`retries` or `delivery.timeout.ms` run out; others fail the batch's futures.

Idempotence (`enable.idempotence`, default true as in Kafka 3+): the producer gets a producer id
with InitProducerId; every batch takes the partition's next sequence number when it is first
sent and keeps the same bytes on every retry, so the broker drops a duplicate of a batch whose
acknowledgement was lost (a batch sealed under a producer id since replaced is restamped with
the new id and sequence). It needs acks=all: left at its default, idempotence is switched off by
acks=0/1 (Kafka does the same); asked for explicitly with acks=0/1 it is a configuration error.
After a batch fails for good, later batches would leave a sequence gap, so the producer takes a
new producer id (sequences restart at 0) — the same recovery Kafka's epoch bump gives.

Transactions (`transactional.id`, which implies idempotence; `transaction.timeout.ms`):
`init_transactions`, `begin_transaction`, `send_offsets_to_transaction`, `commit_transaction`,
`abort_transaction`, with Kafka's semantics; the state machine is
`clients/transaction_manager.py`. The sender adds new partitions to the transaction
(AddPartitionsToTxn, one request per drain) before their first batch; commit flushes then sends
EndTxn; a record that fails makes the transaction abortable (commit raises, abort works, and the
epoch is bumped after the abort if the failed batch used a sequence number); being fenced
(PRODUCER_FENCED, INVALID_PRODUCER_EPOCH) or not authorised is fatal and raised as its typed
error by every later call. EndTxn goes at v5 where the cluster has it (KIP-890 part 2): the
coordinator bumps the epoch with every transaction and the answer carries the one to use next,
so a late retry of a finished transaction's batch is fenced rather than joining the next one.
"""

from __future__ import annotations

import collections
import contextlib
import struct
import time
from typing import Callable, NamedTuple

import trio

from clients.cluster import Cluster, TopicPartition
from clients.connection import RECV_BYTES, BrokerConnection, ConnectionClosed
from clients.config import COMPRESSION, PRODUCER, ConfigError, resolve
from clients.cluster import COORDINATOR_GROUP, COORDINATOR_TRANSACTION
from clients.errors import (KafkaConnectionError, KafkaTimeoutError, Retry, UnknownTopicError,
                            classify, error)
from clients.transaction_manager import (State, TransactionAbortedError, TransactionManager,
                                         TransactionStateError, is_fatal)
from clients.partitioner import StickyPartitioner, partition_for_key
from wire.errors import DecodeError, ErrorCode, KafkaError, MessageTooLargeError
from wire.messages.index_generated import REQUESTS
from wire.records import compression as codecs
from wire.records.batch import BATCH_HEADER_SIZE, HEADER, MAGIC
from wire.records.crc32c import crc32c

NO_SEQUENCE = -1
PRODUCE = REQUESTS[0]
INIT_PRODUCER_ID = REQUESTS[22]
ADD_PARTITIONS_TO_TXN = REQUESTS[24]
ADD_OFFSETS_TO_TXN = REQUESTS[25]
END_TXN = REQUESTS[26]
TXN_OFFSET_COMMIT = REQUESTS[28]
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
            raise b.exc
        return b.metadata(i)

    def exception(self) -> BaseException | None:
        b = self._where()[0]
        return b.exc if b.done else None

    def add_callback(self, fn: Callable) -> None:
        """`fn(meta, exc)`; called at once if already done. Callbacks of one partition run in
        record order."""
        b, i = self._where()
        if b.done:
            fn(self._meta(), b.exc)
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


def _record_size(key, value, headers) -> int:
    # mirrors RecordBatchBuilder.estimated_size's per-record estimate
    size = 21 + (len(key) if key else 0) + (len(value) if value else 0)
    if headers:
        size += sum(len(k) + len(v or b"") + 10 for k, v in headers)
    return size


_VARINT1 = [bytes([z]) for z in range(0x80)]


def _varint(n: int) -> bytes:
    """Zig-zag varint (Kafka's record encoding); one- and two-byte values take a fast path."""
    z = ((n << 1) ^ (n >> 63)) & 0xFFFFFFFFFFFFFFFF
    if z < 0x80:
        return _VARINT1[z]
    if z < 0x4000:
        return bytes(((z & 0x7F) | 0x80, z >> 7))
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


_PID_EPOCH_SEQ = struct.Struct(">qhi")     # producer id, epoch, base sequence at header byte 43
_NULL = _varint(-1)
# zig-zag varints of 0..8191 (offset deltas, lengths and ms deltas of a batch nearly always)
_SMALL = [_varint(n) for n in range(8192)]
# length of each of those; the largest value send_nowait's fast path encodes (its record's
# length must stay below 8192 too; a producer lowers it to fit its max.request.size)
_SMALL_LEN = [len(b) for b in _SMALL]
_ATTR_TS = [b"\x00" + z for z in _SMALL]         # attributes 0, then a timestamp delta
_NULL_KEY_LEN = [_NULL + z for z in _SMALL]       # a null key, then a value length
_FAST_VALUE_MAX = 8000


class ProducerBatch:
    """One v2 record batch being filled. Records are encoded as they are appended (the producer
    hot path; the generic RecordBatchBuilder keeps Record objects and encodes at build time,
    which costs twice as much per record); `seal` adds the header once, and the same bytes are
    resent on every retry."""

    __slots__ = ("tp", "compression", "body", "callbacks", "timestamps", "created", "alloc",
                 "attempts", "retry_at", "data", "sealed", "record_count", "last_error",
                 "base_ts", "max_ts", "size", "order", "producer_id", "producer_epoch",
                 "base_sequence", "n_callbacks", "done", "base_offset", "log_append_time", "exc",
                 "event", "split_into")

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
            if cbs.__class__ is list:
                for fn in cbs:
                    try:
                        fn(meta, exc)
                    except Exception:  # noqa: BLE001 - a user callback must not kill the sender
                        pass
            else:
                try:
                    cbs(meta, exc)
                except Exception:  # noqa: BLE001 - a user callback must not kill the sender
                    pass

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
        small = _SMALL
        d = ts - self.base_ts
        n = self.record_count
        parts = [b"\x00", small[d] if 0 <= d < 8192 else _varint(d),
                 small[n] if n < 8192 else _varint(n)]
        if key is None:
            parts.append(_NULL)
        else:
            k = len(key)
            parts += (small[k] if k < 8192 else _varint(k), key)
        if value is None:
            parts.append(_NULL)
        else:
            v = len(value)
            parts += (small[v] if v < 8192 else _varint(v), value)
        if headers:
            parts.append(_varint(len(headers)))
            for hk, hv in headers:
                hk = hk.encode() if isinstance(hk, str) else hk
                parts += (_varint(len(hk)), hk)
                if hv is None:
                    parts.append(_NULL)
                else:
                    parts += (_varint(len(hv)), hv)
        else:
            parts.append(b"\x00")
        rec = b"".join(parts)
        r = len(rec)
        length = small[r] if r < 8192 else _varint(r)
        self.body.append(length)
        self.body.append(rec)
        self.size += len(length) + len(rec)
        self.record_count += 1

    def seal(self, producer_id: int, producer_epoch: int, base_sequence: int,
             transactional: bool = False) -> bytes:
        if self.data is None:
            body = b"".join(self.body)
            if self.compression:
                body = codecs.compress(self.compression, body)
            attrs = self.compression | (TRANSACTIONAL_FLAG if transactional else 0)
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
            size = _record_size(key, value, headers)
        dq = self.batches.get(tp)
        if dq is None:
            dq = self.batches[tp] = collections.deque()
        new = False
        if not dq or dq[-1].sealed or dq[-1].size + size > self.batch_size:
            alloc = max(self.batch_size, size + BATCH_HEADER_SIZE)
            if self.used + alloc > self.buffer_memory and self.used > 0:
                return None, False
            self._order += 1
            dq.append(ProducerBatch(tp, self.compression, now() if callable(now) else now,
                                    alloc, (self._order,)))
            self.used += alloc
            new = True
        batch = dq[-1]
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

    def empty(self) -> bool:
        return not any(self.batches.values())

    def all_batches(self) -> list[ProducerBatch]:
        out = [b for dq in self.batches.values() for b in dq]
        for dq in self.batches.values():
            dq.clear()
        return out


class Producer:
    """Kafka producer. Use as `async with Producer(bootstrap, config) as p:` (starts the sender
    task; leaving flushes and closes) or `await p.start(nursery)` / `await p.aclose()`."""

    def __init__(self, bootstrap: str | Cluster | None = None, config: dict | None = None,
                 **kwargs):
        props = dict(config or {})
        props.update({k.replace("_", "."): v for k, v in kwargs.items()})
        if isinstance(bootstrap, str):
            props["bootstrap.servers"] = bootstrap
        self.config = cfg = resolve(props, PRODUCER)
        explicit = cfg["_explicit"]
        idem = cfg["enable.idempotence"]
        if idem and cfg["acks"] != -1:
            if "enable.idempotence" in explicit:
                raise ConfigError("enable.idempotence=true needs acks=all")
            idem = False
        if idem and cfg["retries"] == 0 and "enable.idempotence" in explicit:
            raise ConfigError("enable.idempotence=true needs retries > 0")
        self._txn: TransactionManager | None = None
        tid = cfg.get("transactional.id")
        if tid:
            # transactional.id implies idempotence (Kafka: and refuses settings that contradict it)
            if "enable.idempotence" in explicit and not cfg["enable.idempotence"]:
                raise ConfigError("transactional.id needs enable.idempotence=true")
            if cfg["acks"] != -1:
                raise ConfigError("transactional.id needs acks=all")
            if cfg["retries"] == 0:
                raise ConfigError("transactional.id needs retries > 0")
            try:
                timeout_ms = int(str(cfg.get("transaction.timeout.ms") or 60_000).strip())
            except ValueError:
                raise ConfigError("invalid value for transaction.timeout.ms: "
                                  f"{cfg.get('transaction.timeout.ms')!r}") from None
            if timeout_ms <= 0:
                raise ConfigError("transaction.timeout.ms must be positive")
            self._txn = TransactionManager(str(tid).strip(), timeout_ms)
            idem = True
        self.idempotent = idem and cfg["retries"] > 0
        self.acks = cfg["acks"]
        if isinstance(bootstrap, Cluster):
            self.cluster, self._own_cluster = bootstrap, False
        else:
            if not cfg["bootstrap.servers"]:
                raise ConfigError("bootstrap.servers is required")
            self.cluster = Cluster(cfg["bootstrap.servers"], client_id=cfg["client.id"],
                                   request_timeout_ms=cfg["request.timeout.ms"],
                                   connect_timeout_ms=cfg["socket.connection.setup.timeout.ms"],
                                   retry_backoff_ms=cfg["retry.backoff.ms"],
                                   metadata_max_age_ms=cfg["metadata.max.age.ms"])
            self._own_cluster = True
        self._acc = RecordAccumulator(cfg["batch.size"], cfg["linger.ms"] / 1000,
                                      cfg["buffer.memory"], COMPRESSION[cfg["compression.type"]])
        self._partitioner = StickyPartitioner()
        self._backoff_s = cfg["retry.backoff.ms"] / 1000
        self._delivery_timeout_s = cfg["delivery.timeout.ms"] / 1000
        self._max_block_s = cfg["max.block.ms"] / 1000
        self._wakeup = trio.Event()
        self._space = trio.Event()
        self._idle = trio.Event()
        self._inflight: dict[int, int] = {}             # node -> Produce requests outstanding
        self._tp_inflight: collections.Counter = collections.Counter()   # tp -> batches out
        self._max_inflight = cfg["max.in.flight.requests.per.connection"]
        if self._max_inflight < 1:
            raise ConfigError("max.in.flight.requests.per.connection must be at least 1")
        if self.idempotent and self._max_inflight > 5:
            # the broker remembers the last 5 batches per producer: more in flight could make a
            # retried duplicate look like a gap (Kafka refuses the same)
            if "enable.idempotence" in explicit or self._txn is not None:
                raise ConfigError("idempotence needs max.in.flight.requests.per.connection <= 5")
            self.idempotent = False
        self._acked_next_seq: dict[TopicPartition, int] = {}
        self._pipes: dict[int, _Pipe] = {}
        self._turns: dict[int, _Turns] = {}
        # our own connection per node (a Cluster may be shared: one reader per connection)
        self._channel = f"produce-{id(self):x}"
        self._pipe_locks: dict[int, trio.Lock] = {}
        # node -> how many of its connections failed (died, or could not be opened): a request
        # carries the count seen when it was drained and is written only if it is unchanged
        self._conn_failures: dict[int, int] = {}
        self._sender_nursery: trio.Nursery | None = None
        self._incomplete = 0
        self._flushing = 0
        self._closing = False
        self._closed = False
        self._nursery: trio.Nursery | None = None
        self._exit_stack: contextlib.AsyncExitStack | None = None
        self._producer_id, self._producer_epoch = -1, -1
        self._sequences: dict[TopicPartition, int] = {}
        self._need_new_pid = False
        self._adding_partitions = False
        self._refresh_wanted = False
        self._started = False
        self._available_cache: dict[str, tuple[int, list[int] | None]] = {}
        self._max_request_size = cfg["max.request.size"]
        self._ignore_keys = cfg["partitioner.ignore.keys"]
        self._sticky_batch: dict[str, ProducerBatch] = {}   # topic -> open batch of its sticky tp
        self._fast_value_max = min(_FAST_VALUE_MAX, self._max_request_size - BATCH_HEADER_SIZE - 21)

    # -- lifecycle -------------------------------------------------------------------------------

    async def __aenter__(self) -> "Producer":
        stack = contextlib.AsyncExitStack()
        nursery = await stack.enter_async_context(trio.open_nursery())
        try:
            await self.start(nursery)
        except BaseException:
            nursery.cancel_scope.cancel()
            await stack.aclose()
            raise
        self._exit_stack = stack
        return self

    async def __aexit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is None:
                await self.aclose()
            else:
                await self.aclose(timeout_s=0)
        finally:
            stack, self._exit_stack = self._exit_stack, None
            if stack is not None:
                await stack.aclose()

    async def start(self, nursery: trio.Nursery) -> "Producer":
        if self._own_cluster:
            await self.cluster.start()
        if self.idempotent and self._txn is None:
            await self._init_producer_id()      # a transactional one waits for init_transactions
        self._nursery = nursery
        self._sender_scope = trio.CancelScope()
        nursery.start_soon(self._sender)
        self._started = True
        return self

    async def aclose(self, timeout_s: float | None = None) -> None:
        """Send what is buffered (up to `timeout_s`, default delivery.timeout.ms), then stop.
        Records still unsent after that fail with KafkaTimeoutError."""
        if self._closed:
            return
        self._closing = True
        self._wake()
        if self._started:
            with trio.move_on_after(self._delivery_timeout_s if timeout_s is None else timeout_s):
                await self.flush()
            self._sender_scope.cancel()
        for b in self._acc.all_batches():
            self._fail_batch(b, KafkaTimeoutError("producer closed before the record was sent"))
        self._closed = True
        if self._own_cluster:
            await self.cluster.aclose()

    # -- sending ---------------------------------------------------------------------------------

    async def _partition_count(self, topic: str) -> int:
        t = self.cluster.metadata.topics.get(topic)
        if t is None or not t.partitions:
            try:
                t = await self.cluster.wait_for_topic(topic, timeout_s=self._max_block_s,
                                                      need_leaders=False)
            except UnknownTopicError:
                raise UnknownTopicError(f"topic {topic!r} not present in metadata after "
                                        f"{self._max_block_s:g} s") from None
        return len(t.partitions)

    async def send(self, topic: str, value: bytes | str | None = None, key: bytes | str | None = None,
                   *, partition: int | None = None, headers=None, timestamp_ms: int | None = None,
                   on_delivery: Callable | None = None) -> DeliveryFuture:
        """Queue one record; returns its DeliveryFuture. Waits only for metadata or buffer space."""
        if self._closing:
            raise KafkaError("producer is closed", ErrorCode.UNKNOWN_SERVER_ERROR)
        if self._txn is not None:
            self._txn.check_can_send()
        if isinstance(value, str):
            value = value.encode()
        if isinstance(key, str):
            key = key.encode()
        if headers:
            headers = [(k, v.encode() if isinstance(v, str) else v) for k, v in
                       (headers.items() if isinstance(headers, dict) else headers)]
        size = _record_size(key, value, headers)
        if size + BATCH_HEADER_SIZE > self.config["max.request.size"]:
            raise MessageTooLargeError(f"record of ~{size} bytes exceeds max.request.size "
                                       f"{self.config['max.request.size']}")
        if topic not in self.cluster.metadata.topics:
            self.cluster.add_topics([topic])
        n = await self._partition_count(topic)
        if timestamp_ms is None:
            timestamp_ms = int(time.time() * 1000)
        deadline = None
        while True:
            fut = self._append(topic, n, key, value, headers, partition, timestamp_ms)
            if fut is not None:
                break
            # buffer.memory is full: wait for the sender to free some (back-pressure)
            if deadline is None:
                deadline = trio.current_time() + self._max_block_s
            self._wake()
            with trio.move_on_at(deadline):
                await self._space.wait()
            if trio.current_time() >= deadline:
                raise KafkaTimeoutError(f"buffer.memory full for {self._max_block_s:g} s "
                                        "(max.block.ms)")
        if on_delivery is not None:
            fut.add_callback(on_delivery)
        return fut

    def send_nowait(self, topic: str, value=None, key=None, *, partition: int | None = None,
                    headers=None, timestamp_ms: int | None = None,
                    on_delivery: Callable | None = None) -> DeliveryFuture | None:
        """`send` without waiting: None if the topic's metadata is not loaded yet or the buffer
        is full (the caller then uses `send`). Must run on the producer's trio thread."""
        if key is None and partition is None and headers is None and value.__class__ is bytes:
            # The hot path of a high-rate producer: a keyless record joins the open batch of
            # its topic's sticky partition, encoded right here (no layers of calls, no
            # estimate beyond the one the slow path makes). Anything else (a full or sent
            # batch, a new batch, keys, headers, large values, odd timestamps) goes the long way.
            b = self._sticky_batch.get(topic)
            if b is not None and not b.sealed and not self._closing:
                v = len(value)
                if v <= self._fast_value_max and b.size + 21 + v <= self._acc.batch_size:
                    if self._txn is not None:
                        self._txn.check_can_send()
                    ts = time.time_ns() // 1_000_000 if timestamp_ms is None else timestamp_ms
                    d = ts - b.base_ts
                    n = b.record_count
                    if 0 <= d < 8192 and n < 8192:
                        lens = _SMALL_LEN
                        # length, attributes + ts delta, offset delta, null key + value length,
                        # value, no headers
                        r = 3 + v + lens[d] + lens[n] + lens[v]
                        b.body.extend((_SMALL[r], _ATTR_TS[d], _SMALL[n], _NULL_KEY_LEN[v], value,
                                       b"\x00"))
                        b.size += r + lens[r]
                        b.record_count = n + 1
                        if ts > b.max_ts:
                            b.max_ts = ts
                        b.callbacks.append(on_delivery)
                        b.timestamps.append(ts)
                        if on_delivery is not None:
                            b.n_callbacks += 1
                        self._incomplete += 1
                        return DeliveryFuture(b, n)
        t = self.cluster.metadata.topics.get(topic)
        if t is None or not t.partitions or self._closing:
            return None
        if self._txn is not None:
            self._txn.check_can_send()
        if isinstance(value, str):
            value = value.encode()
        if isinstance(key, str):
            key = key.encode()
        if headers:
            headers = [(k, v.encode() if isinstance(v, str) else v) for k, v in
                       (headers.items() if isinstance(headers, dict) else headers)]
        size = _record_size(key, value, headers)
        if size + BATCH_HEADER_SIZE > self._max_request_size:
            return None
        fut = self._append(topic, len(t.partitions), key, value, headers, partition,
                           int(time.time() * 1000) if timestamp_ms is None else timestamp_ms,
                           size)
        if fut is not None and on_delivery is not None:
            fut.add_callback(on_delivery)
        return fut

    def _append(self, topic, n, key, value, headers, partition, ts,
                size: int | None = None) -> DeliveryFuture | None:
        sticky = False
        if size is None:
            size = _record_size(key, value, headers)
        if partition is None:
            if key is not None and not self._ignore_keys:
                partition = partition_for_key(key, n)
            else:
                partition = self._partitioner._current.get(topic)
                if partition is None or partition >= n:
                    partition = self._partitioner.partition(topic, n, self._available(topic))
                sticky = True
        elif not 0 <= partition < n:
            raise KafkaError(f"partition {partition} of topic {topic!r} does not exist "
                             f"({n} partitions)", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        tp = TopicPartition(topic, partition)
        if sticky and not self._acc.has_room_in_open_batch(tp, size) and self._acc.batches.get(tp):
            # this partition's batch is complete: stick to another one (KIP-480)
            partition = self._partitioner.on_new_batch(topic, n, partition, self._available(topic))
            tp = TopicPartition(topic, partition)
        fut, new_batch = self._acc.append(tp, key, value, headers, ts, trio.current_time, size)
        if fut is None:
            return None
        if sticky:
            self._sticky_batch[topic] = fut._batch      # where send_nowait's fast path appends
        if self._txn is not None:
            self._txn.maybe_add_partition(tp)
        self._incomplete += 1
        if new_batch:
            self._wake()
        return fut

    def _available(self, topic: str) -> list[int] | None:
        """Partitions of `topic` with a leader (cached per metadata version)."""
        md = self.cluster.metadata
        cached = self._available_cache.get(topic)
        if cached is not None and cached[0] == md.version:
            return cached[1]
        t = md.topics.get(topic)
        avail = None if t is None else (
            [p for p, info in t.partitions.items() if info.leader >= 0] or None)
        self._available_cache[topic] = (md.version, avail)
        return avail

    async def flush(self) -> None:
        """Wait until every record sent so far is acknowledged or failed."""
        if self._incomplete == 0:
            return
        self._flushing += 1
        try:
            while self._incomplete:
                self._wake()
                if self._idle.is_set():
                    self._idle = trio.Event()
                await self._idle.wait()
        finally:
            self._flushing -= 1

    def _wake(self) -> None:
        self._wakeup.set()

    # -- sender ----------------------------------------------------------------------------------

    async def _sender(self) -> None:
        with self._sender_scope:
            async with trio.open_nursery() as nursery:
                self._sender_nursery = nursery
                await self._sender_loop(nursery)

    async def _sender_loop(self, nursery: trio.Nursery) -> None:
        refresh_after = 0.0
        while True:
            now = trio.current_time()
            for b in self._acc.expired(now, self._delivery_timeout_s):
                last = f" (last error: {b.last_error})" if b.last_error is not None else ""
                self._fail_batch(b, KafkaTimeoutError(
                    f"{b.tp.topic}-{b.tp.partition}: not delivered within "
                    f"delivery.timeout.ms{last}"))
            if self._need_new_pid and not self._inflight:
                try:
                    await self._init_producer_id()
                except KafkaError:
                    pass        # retried on the next pass; batches wait meanwhile
            md = self.cluster.metadata
            ready, next_check, unknown = self._acc.ready(
                now, md.leader_for, self._flushing > 0 or self._closing)
            if (unknown or self._refresh_wanted or self.cluster.metadata_stale()) \
                    and now >= refresh_after:
                self._refresh_wanted = False
                refresh_after = now + self._backoff_s
                nursery.start_soon(self._refresh)
            if unknown:
                next_check = min(next_check, now + self._backoff_s)
            if self._need_new_pid:
                ready = {}      # nothing new is sealed under the old producer id
            txn = self._txn
            if txn is not None:
                ready = self._txn_filter_ready(txn, ready, nursery)
            sent = False
            for node, tps in ready.items():
                if self._inflight.get(node, 0) >= self._max_inflight:
                    continue
                pipe = self._pipes.get(node)
                if pipe is not None and pipe.dead is not None and self._inflight.get(node, 0):
                    # its connection died with requests on it whose failures are not handled
                    # yet: a fresh batch sent now on a new connection could be acknowledged
                    # before an earlier one that the broker did append is resent (callbacks
                    # out of order). Let them go back to the queue first.
                    continue
                # a partition whose next batch is a resend (retry, or half of a split batch)
                # waits until none of its batches is in flight, so resends go out in sequence
                # order, one at a time, behind anything that may still be written before them
                tps = [tp for tp in tps if not self._tp_inflight[tp] or
                       self._acc.batches[tp][0].data is None]
                batches = self._acc.drain(tps, self.config["max.request.size"]) if tps else []
                if batches:
                    self._inflight[node] = self._inflight.get(node, 0) + 1
                    for b in batches:
                        self._tp_inflight[b.tp] += 1
                    req = self._build_produce(batches)
                    turns = self._turns.get(node)
                    if turns is None:
                        turns = self._turns[node] = _Turns()
                    nursery.start_soon(self._send_to, node, batches, req, turns.take(),
                                       self._conn_failures.get(node, 0))
                    sent = True
            if sent and self._max_inflight > 1:
                next_check = now        # look again at once: the pipeline may take more
            if self._incomplete == 0:
                self._idle.set()
            self._wakeup = trio.Event()
            with trio.move_on_after(max(0.0, min(next_check - now, 1.0))):
                await self._wakeup.wait()

    async def _refresh(self) -> None:
        try:
            await self.cluster.refresh_metadata(force=True)
        except KafkaError:
            pass            # the next loop retries after backoff
        self._wake()

    async def _init_producer_id(self) -> None:
        ip = REQUESTS[22]
        deadline = trio.current_time() + self._max_block_s
        while True:
            try:
                resp = await self.cluster.call_any(ip(transactional_id=None,
                                                      transaction_timeout_ms=60000))
                code = resp.error_code
                if code == 0:
                    self._producer_id, self._producer_epoch = resp.producer_id, resp.producer_epoch
                    self._sequences.clear()
                    self._acked_next_seq.clear()
                    self._need_new_pid = False
                    return
                err: Exception = KafkaError.from_code(code)
                if classify(code) is Retry.NO:
                    raise err
            except (KafkaError, OSError) as exc:
                if classify(exc) is Retry.NO:
                    raise
                err = exc
            if trio.current_time() >= deadline:
                raise KafkaTimeoutError(f"InitProducerId failed: {err}")
            await trio.sleep(self._backoff_s)

    def _seal(self, b: ProducerBatch) -> bytes:
        if b.data is not None:
            if self.idempotent and (b.producer_id, b.producer_epoch) != (
                    self._producer_id, self._producer_epoch):
                # sealed under a producer id we have since replaced: new id, new sequence
                seq = self._sequences.get(b.tp, 0)
                self._sequences[b.tp] = (seq + b.record_count) & 0x7FFFFFFF
                return b.restamp(self._producer_id, self._producer_epoch, seq)
            return b.data
        if self.idempotent:
            seq = self._sequences.get(b.tp, 0)
            self._sequences[b.tp] = (seq + b.record_count) & 0x7FFFFFFF
            return b.seal(self._producer_id, self._producer_epoch, seq, self._txn is not None)
        return b.seal(-1, -1, NO_SEQUENCE)

    def _build_produce(self, batches: list[ProducerBatch]):
        by_topic: dict[str, list] = {}
        for b in batches:
            by_topic.setdefault(b.tp.topic, []).append(
                PRODUCE.PartitionProduceData(index=b.tp.partition, records=self._seal(b)))
        return PRODUCE(transactional_id=self._txn.transactional_id if self._txn else None,
                       acks=self.acks, timeout_ms=self.config["request.timeout.ms"],
                       topic_data=[PRODUCE.TopicProduceData(name=t, partition_data=p)
                                   for t, p in by_topic.items()])

    async def _send_to(self, node: int, batches: list[ProducerBatch], req=None,
                       ticket: int | None = None, failures: int | None = None) -> None:
        """Send one Produce request and settle its batches. The sender loop builds `req` (so
        sequence numbers follow drain order) and takes a `ticket` (so requests reach the
        connection in drain order too: new trio tasks start in no particular order).
        `failures`: the node's connection failure count when the batches were drained."""
        try:
            if req is None:
                req = self._build_produce(batches)
            try:
                if self.acks == 0:
                    await self._produce_call(node, req, False, ticket, failures)
                    for b in batches:
                        self._complete_batch(b, -1, -1)
                    return
                resp = await self._produce_call(node, req, True, ticket, failures)
            except _NotSent:
                # never written: back to the queue in creation order, not counted as an attempt
                # (the failed requests drained before it come back too, and go first)
                for b in batches:
                    self._acc.reenqueue(b)
                return
            except KafkaError as exc:
                for b in batches:
                    self._retry_or_fail(b, exc)
                return
            answered: dict[TopicPartition, object] = {}
            for t in resp.responses:
                for p in t.partition_responses:
                    answered[TopicPartition(t.name, p.index)] = p
            for b in batches:
                p = answered.get(b.tp)
                if p is None:
                    self._retry_or_fail(b, KafkaError("no answer for the partition",
                                                      ErrorCode.NETWORK_EXCEPTION))
                elif p.error_code in (0, ErrorCode.DUPLICATE_SEQUENCE_NUMBER):
                    self._complete_batch(b, p.base_offset, p.log_append_time_ms)
                elif p.error_code == ErrorCode.MESSAGE_TOO_LARGE and b.record_count > 1:
                    self._split(b)
                elif p.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER and \
                        self._predecessor_unacked(b):
                    # an earlier batch of this partition failed (or is being retried), so the
                    # broker saw a gap: resend this one after it, in order (Kafka does the same)
                    self._retry_or_fail(b, error(p.error_code, p.error_message or None),
                                        force=True)
                else:
                    err = error(p.error_code, p.error_message or None)
                    if p.error_code == ErrorCode.MESSAGE_TOO_LARGE:
                        err = error(p.error_code, f"{b.tp.topic}-{b.tp.partition}: a single "
                                    f"record of {len(b.data) - BATCH_HEADER_SIZE} bytes (in a "
                                    "batch) is larger than the topic accepts (max.message.bytes)")
                    self._retry_or_fail(b, err)
        finally:
            left = self._inflight.get(node, 1) - 1
            if left > 0:
                self._inflight[node] = left
            else:
                self._inflight.pop(node, None)
            for b in batches:
                n = self._tp_inflight[b.tp] - 1
                if n > 0:
                    self._tp_inflight[b.tp] = n
                else:
                    del self._tp_inflight[b.tp]
            self._wake()

    def _predecessor_unacked(self, b: ProducerBatch) -> bool:
        """OUT_OF_ORDER_SEQUENCE_NUMBER for `b` is only a symptom when the batch before it was
        not acknowledged (it failed, is being retried, or `b` carries a replaced producer id);
        when `b` directly follows the last acknowledged batch it is a real error."""
        if not self.idempotent or b.base_sequence < 0:
            return False
        if (b.producer_id, b.producer_epoch) != (self._producer_id, self._producer_epoch):
            return True
        return self._acked_next_seq.get(b.tp, 0) != b.base_sequence

    def _split(self, b: ProducerBatch) -> None:
        """The broker refused the batch as too large (max.message.bytes) and it holds more than
        one record: resend it as two halves, as Java's producer does, instead of failing every
        record. The halves keep the batch's place, producer id and sequence range, so later
        batches of the partition stay valid; a half still too large is split again."""
        from wire.records.batch import decode_batch
        records = decode_batch(b.data).records
        half = len(records) // 2
        seq = b.base_sequence
        allocs = (b.alloc // 2, b.alloc - b.alloc // 2)     # the memory charge is unchanged
        halves = []
        for i, (recs, cbs, tss) in enumerate(((records[:half], b.callbacks[:half],
                                               b.timestamps[:half]),
                                              (records[half:], b.callbacks[half:],
                                               b.timestamps[half:]))):
            nb = ProducerBatch(b.tp, b.compression, b.created, allocs[i], b.order + (i,))
            for r in recs:
                nb.append(r.key, r.value, r.headers, r.timestamp)
            nb.adopt(cbs, tss)
            halves.append(nb)
            nb.attempts = b.attempts
            nb.seal(b.producer_id, b.producer_epoch, seq, self._txn is not None)
            if seq >= 0:
                seq = (seq + len(recs)) & 0x7FFFFFFF
            self._acc.reenqueue(nb)
        b.split_into = (halves[0], halves[1])       # its futures follow it to the halves
        if b.event is not None:
            b.event.set()           # its waiters go on waiting on their half

    async def _pipe_for(self, node: int) -> "_Pipe":
        pipe = self._pipes.get(node)
        if pipe is None or pipe.dead is not None:
            lock = self._pipe_locks.setdefault(node, trio.Lock())
            async with lock:
                pipe = self._pipes.get(node)
                if pipe is None or pipe.dead is not None:
                    if pipe is not None:
                        await self.cluster.drop_connection(node, self._channel)
                    try:
                        conn = await self.cluster.connection(node, self._channel)
                        version = self.cluster.version_for(conn, 0, min_version=3)
                    except BaseException:
                        self._connection_failed(node)
                        raise
                    pipe = self._pipes[node] = _Pipe(
                        conn, version, on_dead=lambda: self._connection_failed(node))
                    self._sender_nursery.start_soon(pipe.reader)
        return pipe

    def _connection_failed(self, node: int) -> None:
        self._conn_failures[node] = self._conn_failures.get(node, 0) + 1

    async def _produce_call(self, node: int, req, expect_response: bool = True,
                            ticket: int | None = None, failures: int | None = None):
        """A Produce request on the node's pipelined connection (up to
        max.in.flight.requests.per.connection outstanding), written in ticket order.

        Raises _NotSent, without writing it, when a connection of the node failed since the
        request was drained (`failures` changed): requests drained before it may have failed
        with that connection and be on their way back to the queue, and one written now on a
        new connection would overtake them (its callbacks first, and without idempotence its
        records first)."""
        timeout_s = self.config["request.timeout.ms"] / 1000 + 5
        turns = self._turns.get(node) if ticket is not None else None
        try:
            if turns is not None:
                await turns.wait(ticket)
            try:
                if failures is not None and self._conn_failures.get(node, 0) != failures:
                    raise _NotSent()
                pipe = await self._pipe_for(node)
                if failures is not None and self._conn_failures.get(node, 0) != failures:
                    raise _NotSent()
                waiter = await pipe.send(req, timeout_s, expect_response)
            finally:
                if turns is not None:
                    turns.done(ticket)
            if waiter is None:
                return None
            return await pipe.receive(waiter, timeout_s)
        except trio.TooSlowError:
            raise KafkaTimeoutError(f"Produce to node {node} timed out") from None
        except (ConnectionClosed, OSError) as exc:
            raise KafkaConnectionError(f"node {node}: {exc}") from None

    def _retry_or_fail(self, b: ProducerBatch, exc: Exception, force: bool = False) -> None:
        action = Retry.RETRY if force else classify(exc)
        now = trio.current_time()
        if action is not Retry.NO and b.attempts < self.config["retries"] and \
                now - b.created < self._delivery_timeout_s and not self._closed:
            b.attempts += 1
            b.last_error = exc
            b.retry_at = now + self._backoff_s * min(2 ** (b.attempts - 1), 10)
            if action is Retry.REFRESH_AND_RETRY:
                self._refresh_wanted = True
            self._acc.reenqueue(b)
            return
        self._fail_batch(b, exc)

    def _complete_batch(self, b: ProducerBatch, base_offset: int, log_append_time: int) -> None:
        if b.producer_id == self._producer_id and b.producer_epoch == self._producer_epoch and \
                b.base_sequence >= 0:
            self._acked_next_seq[b.tp] = (b.base_sequence + b.record_count) & 0x7FFFFFFF
        self._acc.release(b)
        self._space.set()
        self._space = trio.Event()
        # like Kafka: the broker's log-append time when the topic uses it, else the record's own
        b.complete(base_offset, log_append_time)
        self._incomplete -= b.record_count
        if self._incomplete == 0:
            self._idle.set()

    def _fail_batch(self, b: ProducerBatch, exc: Exception) -> None:
        self._acc.release(b)
        self._space.set()
        self._space = trio.Event()
        if self._txn is not None:
            # the transaction can no longer commit; after its abort the epoch is bumped if this
            # batch took a sequence number (the broker would see a gap otherwise)
            self._txn.set_abortable(exc)
            if b.data is not None:
                self._txn.needs_epoch_bump = True
        elif self.idempotent and b.data is not None:
            # a sequence gap would follow this batch: start over with a new producer id
            self._need_new_pid = True
        b.sealed = True         # out of the accumulator: the send fast path must not append
        b.complete(-1, -1, exc)
        self._incomplete -= b.record_count
        if self._incomplete == 0:
            self._idle.set()

    # -- transactions ----------------------------------------------------------------------------

    def _require_txn(self, what: str) -> TransactionManager:
        if self._txn is None:
            raise TransactionStateError(f"{what}() needs a transactional producer "
                                        "(set transactional.id)")
        if not self._started:
            raise TransactionStateError(f"{what}() before the producer was started")
        return self._txn

    @property
    def producer_id_and_epoch(self) -> tuple[int, int]:
        """(producer id, epoch) in use; (-1, -1) before the first InitProducerId."""
        return self._producer_id, self._producer_epoch

    @property
    def transaction_state(self) -> State | None:
        return None if self._txn is None else self._txn.state

    async def init_transactions(self, timeout_s: float | None = None) -> None:
        """Get this transactional.id's producer id and epoch from its coordinator, fencing any
        older instance (its open transaction is aborted by the coordinator first)."""
        txn = self._require_txn("init_transactions")
        txn.start_init()
        try:
            await self._txn_init_pid(bump=False, timeout_s=timeout_s)
        except BaseException as exc:
            if is_fatal(exc):
                txn.set_fatal(exc)
            else:
                txn.init_failed()
            raise
        txn.init_done()

    async def begin_transaction(self) -> None:
        self._require_txn("begin_transaction").begin()

    async def send_offsets_to_transaction(self, offsets, group_metadata_or_group_id,
                                          timeout_s: float | None = None) -> None:
        """Commit consumed offsets as part of the transaction (consume-transform-produce).
        `offsets`: {TopicPartition or (topic, partition): next offset to read (int, or
        (offset, metadata))}, or an iterable of objects with topic/partition/offset (such as
        confluent-kafka's TopicPartition). `group_metadata_or_group_id`: the group id, or a
        consumer's group metadata (group_id, generation_id, member_id, group_instance_id)."""
        txn = self._require_txn("send_offsets_to_transaction")
        txn.check_can_add_offsets()
        group = group_metadata_or_group_id
        if isinstance(group, str):
            group_id, generation, member, instance = group, -1, "", None
        else:
            group_id = getattr(group, "group_id", None)
            if not group_id:
                raise TransactionStateError("send_offsets_to_transaction: no group id given")
            # our Consumer: its group membership fences offsets of a member that was kicked out
            src = getattr(group, "member", None) or group
            generation = getattr(src, "generation_id", getattr(src, "generation", -1))
            member = getattr(src, "member_id", "") or ""
            instance = getattr(src, "group_instance_id", getattr(group, "group_instance_id", None))
            if not isinstance(generation, int):
                generation = -1
        by_topic: dict[str, list] = {}
        for topic, partition, offset, meta in _offset_entries(offsets):
            by_topic.setdefault(topic, []).append(TXN_OFFSET_COMMIT.TxnOffsetCommitRequestPartition(
                partition_index=partition, committed_offset=offset, committed_leader_epoch=-1,
                committed_metadata=meta))
        tid = txn.transactional_id
        try:
            await self._coordinator_call(
                lambda: ADD_OFFSETS_TO_TXN(transactional_id=tid, producer_id=self._producer_id,
                                           producer_epoch=self._producer_epoch,
                                           group_id=group_id),
                lambda r: r.error_code, "AddOffsetsToTxn", timeout_s=timeout_s)
            txn.offsets_added = True

            def first_error(resp):
                for t in resp.topics:
                    for p in t.partitions:
                        if p.error_code:
                            return p.error_code
                return 0
            await self._coordinator_call(
                lambda: TXN_OFFSET_COMMIT(
                    transactional_id=tid, group_id=group_id, producer_id=self._producer_id,
                    producer_epoch=self._producer_epoch, generation_id=generation,
                    member_id=member, group_instance_id=instance,
                    topics=[TXN_OFFSET_COMMIT.TxnOffsetCommitRequestTopic(name=t, partitions=ps)
                            for t, ps in by_topic.items()]),
                first_error, "TxnOffsetCommit", key_type=COORDINATOR_GROUP, key=group_id,
                timeout_s=timeout_s)
        except KafkaError as exc:
            self._txn_failed(exc)
            raise

    async def commit_transaction(self, timeout_s: float | None = None) -> None:
        """Flush every record of the transaction, then commit it (EndTxn). Raises if any record
        failed: the transaction must then be aborted. After a timeout, calling it again resumes."""
        txn = self._require_txn("commit_transaction")
        if txn.state is not State.COMMITTING:
            txn.begin_commit()
        self._wake()
        await self._flush_within(timeout_s, "commit_transaction")
        if txn.in_error:
            txn._raise_if_fatal()
            raise TransactionAbortedError(
                f"commit failed, abort the transaction: {txn.last_error}", None) \
                from txn.last_error
        if txn.started:
            await self._end_txn(True, timeout_s)
        txn.end_done()

    async def abort_transaction(self, timeout_s: float | None = None) -> None:
        """Abort: records not sent yet fail with TransactionAbortedError, those in flight are
        awaited, then EndTxn(abort). Also the way out of an abortable error."""
        txn = self._require_txn("abort_transaction")
        txn.begin_abort()
        self._wake()
        self._fail_unsent(TransactionAbortedError("transaction aborted before the record was "
                                                  "sent"))
        await self._flush_within(timeout_s, "abort_transaction")
        if txn.started and await self._end_txn(False, timeout_s):
            txn.needs_epoch_bump = False      # EndTxn v5 bumped it already, sequences reset
        if txn.needs_epoch_bump:
            # a batch with a sequence number failed: bump the epoch so sequences start over
            # (KIP-360); our current producer id and epoch prove we are not a zombie
            try:
                await self._txn_init_pid(bump=True, timeout_s=timeout_s)
            except KafkaError as exc:
                if is_fatal(exc):
                    txn.set_fatal(exc)
                raise
            txn.needs_epoch_bump = False
        txn.end_done()

    async def _flush_within(self, timeout_s: float | None, what: str) -> None:
        limit = self._max_block_s if timeout_s is None else timeout_s
        with trio.move_on_after(limit):
            await self.flush()
            return
        raise KafkaTimeoutError(f"{what}: records still unacknowledged after {limit:g} s; "
                                "call it again to keep waiting")

    def _txn_failed(self, exc: BaseException) -> None:
        if self._txn is not None:
            if is_fatal(exc):
                self._txn.set_fatal(exc)
            else:
                self._txn.set_abortable(exc)

    async def _end_txn(self, commit: bool, timeout_s: float | None) -> bool:
        """EndTxn; True when the coordinator bumped the epoch with it (v5)."""
        txn = self._txn
        try:
            resp = await self._coordinator_call(
                lambda: END_TXN(transactional_id=txn.transactional_id,
                                producer_id=self._producer_id,
                                producer_epoch=self._producer_epoch, committed=commit),
                lambda r: r.error_code, "EndTxn", max_version=5, timeout_s=timeout_s)
            if resp.producer_id >= 0 and resp.producer_epoch >= 0:
                # EndTxn v5 (KIP-890 part 2): the coordinator bumped the epoch with this
                # transaction (a new id at epoch overflow); our next transaction uses it, from
                # sequence 0, and a late retry of this one's batches is fenced
                self._producer_id, self._producer_epoch = resp.producer_id, resp.producer_epoch
                self._sequences.clear()
                self._acked_next_seq.clear()
                return True
            return False
        except KafkaError as exc:
            if is_fatal(exc):
                txn.set_fatal(exc)
            elif commit:
                txn.set_abortable(exc)
            raise

    async def _txn_init_pid(self, bump: bool, timeout_s: float | None) -> None:
        txn = self._txn
        resp = await self._coordinator_call(
            lambda: INIT_PRODUCER_ID(transactional_id=txn.transactional_id,
                                     transaction_timeout_ms=txn.transaction_timeout_ms,
                                     producer_id=self._producer_id if bump else -1,
                                     producer_epoch=self._producer_epoch if bump else -1),
            lambda r: r.error_code, "InitProducerId", timeout_s=timeout_s)
        self._producer_id, self._producer_epoch = resp.producer_id, resp.producer_epoch
        self._sequences.clear()
        self._acked_next_seq.clear()

    async def _coordinator_call(self, make, code_of, what: str, *,
                                key_type: int = COORDINATOR_TRANSACTION, key: str | None = None,
                                max_version: int | None = None, timeout_s: float | None = None):
        """One request to the transaction (or group) coordinator, retried until `timeout_s`
        (default max.block.ms) on retriable errors: NOT_COORDINATOR and COORDINATOR_NOT_AVAILABLE
        find the coordinator again, COORDINATOR_LOAD_IN_PROGRESS and CONCURRENT_TRANSACTIONS
        wait and retry. Anything else raises its typed error."""
        key = key or self._txn.transactional_id
        deadline = trio.current_time() + (self._max_block_s if timeout_s is None else timeout_s)
        while True:
            err: Exception
            code = None
            try:
                node = await self.cluster.find_coordinator(
                    key, key_type, timeout_s=max(0.5, deadline - trio.current_time()))
                resp = await self.cluster.call(node, make(), max_version=max_version)
                code = code_of(resp)
                if code == 0:
                    return resp
                err = error(code, None, what)
                if code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE):
                    self.cluster.forget_coordinator(key, key_type)
                elif classify(code) is Retry.NO:
                    raise err
            except (KafkaConnectionError, KafkaTimeoutError) as exc:
                self.cluster.forget_coordinator(key, key_type)
                err = exc
            now = trio.current_time()
            if now >= deadline:
                raise KafkaTimeoutError(f"{what} did not succeed in time: {err}")
            # Java retries CONCURRENT_TRANSACTIONS quickly: the previous transaction's markers
            # usually land within milliseconds
            pause = min(self._backoff_s, 0.02) if code == ErrorCode.CONCURRENT_TRANSACTIONS \
                else self._backoff_s
            await trio.sleep(min(pause, max(0.0, deadline - now)))

    def _fail_unsent(self, exc: Exception) -> None:
        """Fail every batch still in the accumulator (not in flight)."""
        for b in self._acc.all_batches():
            self._fail_batch(b, exc)

    def _txn_filter_ready(self, txn: TransactionManager, ready: dict, nursery) -> dict:
        """The sender's transactional gate: nothing is sent in an abortable/fatal/aborting
        state (unsent records fail at once, so flush never hangs); new partitions are added to
        the transaction in one AddPartitionsToTxn per drain before their first batch goes."""
        if txn.state in (State.ABORTABLE_ERROR, State.FATAL_ERROR, State.ABORTING):
            if not self._acc.empty():
                cause = txn.last_error
                self._fail_unsent(cause if txn.state is State.FATAL_ERROR else
                                  TransactionAbortedError(f"transaction cannot commit: {cause}"
                                                          if cause else "transaction aborted"))
            return {}
        if txn.pending and not self._adding_partitions:
            tps = txn.take_pending()
            if tps:
                self._adding_partitions = True
                nursery.start_soon(self._add_partitions, tps)
        out = {}
        for node, tps in ready.items():
            ok = [tp for tp in tps if txn.is_added(tp)]
            if ok:
                out[node] = ok
        return out

    async def _add_partitions(self, tps: list[TopicPartition]) -> None:
        txn = self._txn
        by_topic: dict[str, list[int]] = {}
        for tp in tps:
            by_topic.setdefault(tp.topic, []).append(tp.partition)

        def first_error(resp):
            worst = 0
            for t in resp.results_by_topic_v3_and_below:
                for p in t.results_by_partition:
                    c = p.partition_error_code
                    if c and c != ErrorCode.OPERATION_NOT_ATTEMPTED:
                        return c
                    worst = worst or c
            return worst
        try:
            await self._coordinator_call(
                lambda: ADD_PARTITIONS_TO_TXN(
                    v3_and_below_transactional_id=txn.transactional_id,
                    v3_and_below_producer_id=self._producer_id,
                    v3_and_below_producer_epoch=self._producer_epoch,
                    v3_and_below_topics=[ADD_PARTITIONS_TO_TXN.AddPartitionsToTxnTopic(
                        name=t, partitions=ps) for t, ps in by_topic.items()]),
                first_error, "AddPartitionsToTxn", max_version=3,
                timeout_s=self._delivery_timeout_s)
        except KafkaError as exc:
            # the coordinator may or may not have them: keep them counted so abort ends it
            txn.partitions_added(tps)
            self._txn_failed(exc)
        else:
            txn.partitions_added(tps)
        finally:
            self._adding_partitions = False
            self._wake()


class _NotSent(Exception):
    """A Produce request given back unwritten (see Producer._produce_call)."""


class _Waiter:
    __slots__ = ("event", "value", "exc", "after", "taken")

    def __init__(self, after: "trio.Event | None" = None):
        self.event = trio.Event()          # the answer (or the pipe's failure) is in
        self.value = None
        self.exc: BaseException | None = None
        self.after = after                 # the previous request's answer was taken
        self.taken = trio.Event()


class _Turns:
    """A per-node turnstile: tickets taken in the sender loop's drain order, requests written
    to the connection in ticket order."""

    def __init__(self):
        self.issued = 0
        self.serving = 0
        self.event = trio.Event()

    def take(self) -> int:
        t = self.issued
        self.issued += 1
        return t

    async def wait(self, ticket: int) -> None:
        while self.serving != ticket:
            await self.event.wait()

    def done(self, ticket: int) -> None:
        if self.serving == ticket:
            self.serving += 1
            self.event.set()
            self.event = trio.Event()


class _Pipe:
    """Several Produce requests outstanding on one connection (pipelining).

    `BrokerConnection.request` holds its connection for a whole request/response round trip;
    the producer instead writes request after request and lets one reader task hand the
    answers back in order (a Kafka broker answers a connection's requests in the order they
    arrived, and the sans-IO `ClientConnection` checks each correlation id). One connection,
    not N, because requests on different connections may be handled in any order, which would
    break per-partition order. The producer owns this connection (its own channel) and drives
    the BrokerConnection's stream and sans-IO state directly. Any failure or timeout closes it
    and fails every request outstanding on it (their answers can no longer be matched)."""

    def __init__(self, conn: BrokerConnection, version: int,
                 on_dead: Callable[[], None] | None = None):
        self.conn = conn
        self.on_dead = on_dead                # called once, when the connection fails
        self.stream = conn._stream
        self.wire = conn._conn
        self.version = version
        self.waiters: collections.deque[_Waiter] = collections.deque()
        self.send_lock = trio.Lock()
        self.dead: BaseException | None = None
        self._last_taken: trio.Event | None = None

    def _fail(self, exc: BaseException) -> None:
        if self.dead is None:
            self.dead = exc
            if self.on_dead is not None:
                self.on_dead()
        while self.waiters:
            w = self.waiters.popleft()
            w.exc = exc
            w.event.set()

    async def _close(self, exc: BaseException) -> None:
        self._fail(exc)
        if self.conn._stream is self.stream:
            self.conn._stream = None          # the pool reconnects on next use
        with trio.CancelScope(shield=True):
            await trio.aclose_forcefully(self.stream)

    async def reader(self) -> None:
        try:
            while self.dead is None:
                got = self.wire.next_response()
                if got is not None:
                    w = self.waiters.popleft()
                    w.value = got[1]
                    w.event.set()
                    continue
                chunk = await self.stream.receive_some(RECV_BYTES)
                if not chunk:
                    raise ConnectionClosed(f"{self.conn.host}:{self.conn.port} closed the "
                                           "connection")
                self.wire.receive_data(chunk)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError,
                ConnectionClosed, DecodeError) as exc:
            await self._close(ConnectionClosed(str(exc) or type(exc).__name__))
        except BaseException as exc:          # cancelled with the producer: still fail waiters
            self._fail(ConnectionClosed("producer closed"))
            raise exc

    async def send(self, message, timeout_s: float, expect_response: bool = True):
        """Write one request; returns the waiter for its answer (None without one)."""
        if self.dead is not None:
            raise ConnectionClosed(f"connection closed: {self.dead}")
        w = None
        async with self.send_lock:
            if self.dead is not None:
                raise ConnectionClosed(f"connection closed: {self.dead}")
            data = self.wire.send_request(message, self.version, self.conn.client_id,
                                          expect_response=expect_response)
            if expect_response:
                w = _Waiter(self._last_taken)
                self._last_taken = w.taken
                self.waiters.append(w)
            try:
                with trio.fail_after(timeout_s):
                    await self.stream.send_all(data)
            except BaseException as exc:
                if w is not None:
                    w.taken.set()             # nobody will receive it: do not hold the next
                # half a request may be on the wire: nothing after it can be trusted
                await self._close(ConnectionClosed(f"send failed: {exc!r}"))
                if isinstance(exc, (trio.BrokenResourceError, trio.ClosedResourceError,
                                    OSError)):
                    raise ConnectionClosed(str(exc)) from None
                raise
        return w

    async def receive(self, w: _Waiter, timeout_s: float):
        """The answer to `w`'s request, handed over only after the previous request's: answers
        that arrive together wake their tasks in no fixed order, and the caller completes the
        batches' futures right after this returns (without yielding), so this keeps delivery
        callbacks in request order, as they are in Kafka's producer."""
        try:
            with trio.move_on_after(timeout_s):
                await w.event.wait()
                if w.after is not None:
                    await w.after.wait()
            if not w.event.is_set() or (w.after is not None and not w.after.is_set()):
                await self._close(trio.TooSlowError())
                raise trio.TooSlowError()
            if w.exc is not None:
                raise w.exc if isinstance(w.exc, ConnectionClosed) else ConnectionClosed(str(w.exc))
            return w.value
        finally:
            w.taken.set()


def _offset_entries(offsets):
    """(topic, partition, offset, metadata) from the shapes send_offsets_to_transaction takes."""
    items = offsets.items() if isinstance(offsets, dict) else [(o, o) for o in offsets]
    for tp, value in items:
        if isinstance(tp, tuple):
            topic, partition = tp[0], tp[1]
        else:
            topic, partition = tp.topic, tp.partition
        meta = None
        if isinstance(value, int):
            offset = value
        elif isinstance(value, tuple):
            offset, meta = value[0], (value[1] if len(value) > 1 else None)
        else:
            offset, meta = value.offset, getattr(value, "metadata", None)
        if offset is None or offset < 0:
            raise ValueError(f"invalid offset {offset!r} for {topic}-{partition}")
        yield topic, int(partition), int(offset), meta
