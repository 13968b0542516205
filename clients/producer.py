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

Sender: groups ready batches by the leader of their partition and sends ONE Produce request per
node with at most one batch per partition. One request per node is in flight at a time (requests
on a connection are answered in order anyway, see `clients/connection.py`), which also keeps each
partition's batches in order across retries — so `max.in.flight.requests.per.connection` is
accepted but behaves as 1.

Errors: retriable ones (classified in `clients/errors.py`) put the batch back with
`retry.backoff.ms`, refreshing metadata first on NOT_LEADER_OR_FOLLOWER and friends, until
`retries` or `delivery.timeout.ms` run out; others fail the batch's futures.

Idempotence (`enable.idempotence`, default true as in Kafka 3+): the producer gets a producer id
with InitProducerId; every batch takes the partition's next sequence number when it is first
sent and keeps the same bytes on every retry, so the broker drops a duplicate of a batch whose
acknowledgement was lost. It needs acks=all: left at its default, idempotence is switched off by
acks=0/1 (Kafka does the same); asked for explicitly with acks=0/1 it is a configuration error.
After a batch fails for good, later batches would leave a sequence gap, so the producer takes a
new producer id (sequences restart at 0) — the same recovery Kafka's epoch bump gives.
"""

from __future__ import annotations

import collections
import contextlib
import time
from typing import Callable, NamedTuple

import trio

from clients.cluster import Cluster, TopicPartition
from clients.config import COMPRESSION, PRODUCER, ConfigError, resolve
from clients.errors import KafkaTimeoutError, Retry, UnknownTopicError, classify, error
from clients.partitioner import StickyPartitioner, partition_for_key
from wire.errors import ErrorCode, KafkaError, MessageTooLargeError
from wire.messages.index_generated import REQUESTS
from wire.records import compression as codecs
from wire.records.batch import BATCH_HEADER_SIZE, HEADER, MAGIC
from wire.records.crc32c import crc32c

NO_SEQUENCE = -1
PRODUCE = REQUESTS[0]


class RecordMetadata(NamedTuple):
    topic: str
    partition: int
    offset: int          # -1 with acks=0
    timestamp: int       # create time, or the broker's log-append time when the topic uses it


class DeliveryFuture:
    """The outcome of one `send`: await it, poll `done()`, or add a callback."""

    __slots__ = ("topic", "partition", "timestamp", "_meta", "_exc", "_done", "_event",
                 "_callbacks")

    def __init__(self, topic: str, partition: int, timestamp: int = -1):
        self.topic, self.partition, self.timestamp = topic, partition, timestamp
        self._meta: RecordMetadata | None = None
        self._exc: BaseException | None = None
        self._done = False
        self._event: trio.Event | None = None
        self._callbacks: list | None = None

    def done(self) -> bool:
        return self._done

    def result(self) -> RecordMetadata:
        if not self._done:
            raise RuntimeError("delivery not complete yet")
        if self._exc is not None:
            raise self._exc
        return self._meta

    def exception(self) -> BaseException | None:
        return self._exc

    def add_callback(self, fn: Callable) -> None:
        """`fn(meta, exc)`; called at once if already done."""
        if self._done:
            fn(self._meta, self._exc)
        else:
            if self._callbacks is None:
                self._callbacks = []
            self._callbacks.append(fn)

    async def wait(self) -> RecordMetadata:
        if not self._done:
            if self._event is None:
                self._event = trio.Event()
            await self._event.wait()
        return self.result()

    def __await__(self):
        return self.wait().__await__()

    def _complete(self, meta: RecordMetadata | None, exc: BaseException | None) -> None:
        if self._done:
            return
        self._meta, self._exc, self._done = meta, exc, True
        if self._event is not None:
            self._event.set()
        if self._callbacks:
            for fn in self._callbacks:
                try:
                    fn(meta, exc)
                except Exception:  # noqa: BLE001 - a user callback must not kill the sender
                    pass


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


_NULL = _varint(-1)
# zig-zag varints of 0..8191 (offset deltas, lengths and ms deltas of a batch nearly always)
_SMALL = [_varint(n) for n in range(8192)]


class ProducerBatch:
    """One v2 record batch being filled. Records are encoded as they are appended (the producer
    hot path; the generic RecordBatchBuilder keeps Record objects and encodes at build time,
    which costs twice as much per record); `seal` adds the header once, and the same bytes are
    resent on every retry."""

    __slots__ = ("tp", "compression", "body", "futures", "created", "alloc", "attempts",
                 "retry_at", "data", "sealed", "record_count", "last_error", "base_ts", "max_ts",
                 "size")

    def __init__(self, tp: TopicPartition, compression: int, created: float, alloc: int):
        self.tp = tp
        self.compression = compression
        self.body: list[bytes] = []
        self.futures: list[DeliveryFuture] = []
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

    def seal(self, producer_id: int, producer_epoch: int, base_sequence: int) -> bytes:
        if self.data is None:
            body = b"".join(self.body)
            if self.compression:
                body = codecs.compress(self.compression, body)
            out = bytearray(HEADER.pack(0, BATCH_HEADER_SIZE - 12 + len(body), -1, MAGIC, 0,
                                        self.compression, self.record_count - 1, self.base_ts,
                                        self.max_ts, producer_id, producer_epoch, base_sequence,
                                        self.record_count))
            out += body
            out[17:21] = crc32c(memoryview(out)[21:]).to_bytes(4, "big")
            self.data = bytes(out)
            self.body = None
            self.sealed = True
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
            dq.append(ProducerBatch(tp, self.compression, now() if callable(now) else now,
                                    alloc))
            self.used += alloc
            new = True
        batch = dq[-1]
        batch.append(key, value, headers, timestamp_ms)
        fut = DeliveryFuture(tp.topic, tp.partition, timestamp_ms)
        batch.futures.append(fut)
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
        self.batches.setdefault(batch.tp, collections.deque()).appendleft(batch)

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
        self._inflight: set[int] = set()
        self._incomplete = 0
        self._flushing = 0
        self._closing = False
        self._closed = False
        self._nursery: trio.Nursery | None = None
        self._exit_stack: contextlib.AsyncExitStack | None = None
        self._producer_id, self._producer_epoch = -1, -1
        self._sequences: dict[TopicPartition, int] = {}
        self._need_new_pid = False
        self._refresh_wanted = False
        self._started = False
        self._available_cache: dict[str, tuple[int, list[int] | None]] = {}
        self._max_request_size = cfg["max.request.size"]
        self._ignore_keys = cfg["partitioner.ignore.keys"]

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
        if self.idempotent:
            await self._init_producer_id()
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
        t = self.cluster.metadata.topics.get(topic)
        if t is None or not t.partitions or self._closing:
            return None
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
            for node, tps in ready.items():
                if node in self._inflight:
                    continue
                batches = self._acc.drain(tps, self.config["max.request.size"])
                if batches:
                    self._inflight.add(node)
                    nursery.start_soon(self._send_to, node, batches)
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
            return b.data
        if self.idempotent:
            seq = self._sequences.get(b.tp, 0)
            self._sequences[b.tp] = (seq + b.record_count) & 0x7FFFFFFF
            return b.seal(self._producer_id, self._producer_epoch, seq)
        return b.seal(-1, -1, NO_SEQUENCE)

    async def _send_to(self, node: int, batches: list[ProducerBatch]) -> None:
        try:
            by_topic: dict[str, list] = {}
            for b in batches:
                by_topic.setdefault(b.tp.topic, []).append(
                    PRODUCE.PartitionProduceData(index=b.tp.partition, records=self._seal(b)))
            req = PRODUCE(transactional_id=None, acks=self.acks,
                          timeout_ms=self.config["request.timeout.ms"],
                          topic_data=[PRODUCE.TopicProduceData(name=t, partition_data=p)
                                      for t, p in by_topic.items()])
            try:
                if self.acks == 0:
                    await self.cluster.call(node, req, min_version=3, expect_response=False)
                    for b in batches:
                        self._complete_batch(b, -1, -1)
                    return
                resp = await self.cluster.call(node, req, min_version=3,
                                               timeout_s=self.config["request.timeout.ms"] / 1000 + 5)
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
                else:
                    self._retry_or_fail(b, error(p.error_code, p.error_message or None))
        finally:
            self._inflight.discard(node)
            self._wake()

    def _retry_or_fail(self, b: ProducerBatch, exc: Exception) -> None:
        action = classify(exc)
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
        self._acc.release(b)
        self._space.set()
        self._space = trio.Event()
        # like Kafka: the broker's log-append time when the topic uses it, else the record's own
        lat = log_append_time if log_append_time is not None and log_append_time >= 0 else None
        for i, fut in enumerate(b.futures):
            fut._complete(RecordMetadata(b.tp.topic, b.tp.partition,
                                         base_offset + i if base_offset >= 0 else -1,
                                         fut.timestamp if lat is None else lat), None)
        self._incomplete -= len(b.futures)
        if self._incomplete == 0:
            self._idle.set()

    def _fail_batch(self, b: ProducerBatch, exc: Exception) -> None:
        self._acc.release(b)
        self._space.set()
        self._space = trio.Event()
        if self.idempotent and b.data is not None:
            # a sequence gap would follow this batch: start over with a new producer id
            self._need_new_pid = True
        for fut in b.futures:
            fut._complete(None, exc)
        self._incomplete -= len(b.futures)
        if self._incomplete == 0:
            self._idle.set()
