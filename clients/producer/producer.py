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
requests per node are outstanding at once, pipelined on one connection (`ProducePipe`: the broker
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
the new id and sequence — unless an attempt of it went unanswered: the broker may have written
it, so it fails as in doubt instead, since under a new id it would be written again). It needs acks=all: left at its default, idempotence is switched off by
acks=0/1 (Kafka does the same); asked for explicitly with acks=0/1 it is a configuration error.
After a batch fails for good, later batches would leave a sequence gap, so the producer takes a
new producer id (sequences restart at 0) — the same recovery Kafka's epoch bump gives.

Transactions (`transactional.id`, which implies idempotence; `transaction.timeout.ms`):
`init_transactions`, `begin_transaction`, `send_offsets_to_transaction`, `commit_transaction`,
`abort_transaction`, with Kafka's semantics; the state machine is
`clients/producer/transaction_manager.py`. The sender adds new partitions to the transaction
(AddPartitionsToTxn, one request per drain) before their first batch; commit flushes then sends
EndTxn; a record that fails makes the transaction abortable (commit raises, abort works, and the
epoch is bumped after the abort if the failed batch used a sequence number); being fenced
(PRODUCER_FENCED, INVALID_PRODUCER_EPOCH) or not authorised is fatal and raised as its typed
error by every later call. EndTxn goes at v5 where the cluster has it (KIP-890 part 2): the
coordinator bumps the epoch with every transaction and the answer carries the one to use next,
so a late retry of a finished transaction's batch is fenced rather than joining the next one.

Cost per record (the hot path of a high-rate producer, measured in bench/clients_producer.py):
`send_nowait` of a keyless record encodes it straight into the open batch of its topic's sticky
partition; the outcome is stored once per batch and a `DeliveryFuture` is only a handle (the
batch keeps the records' callbacks and timestamps, never the futures, so dropped futures leave
the garbage collector nothing to track); completion calls each record's callbacks in order.

Layout: the `Producer` is a facade (configuration, lifecycle, send, flush) over collaborators it
builds and owns, as Kafka's KafkaProducer does, each with a narrow interface:
`RecordAccumulator` (accumulator.py: batches, futures, memory; no I/O), `Sender` (sender.py: the
sender loop, in-flight counts, answers, retries), `ProduceConnections` (pipe.py: the pipelined
connection per node), `ProducerIdAndEpoch` (idempotence.py: producer id, epoch, sequences),
`TransactionManager` (transaction_manager.py: the transaction state machine, pure) and
`Transactions` (transactions.py: the calls to the coordinators).
"""

from __future__ import annotations

import contextlib
import time
from typing import Callable

import trio

from clients.producer.accumulator import (ATTR_TS, BATCH_HEADER_SIZE, FAST_VALUE_MAX, NULL_KEY_LEN,
                                          SMALL_VARINT, SMALL_VARINT_LEN, DeliveryFuture,
                                          ProducerBatch, RecordAccumulator, RecordMetadata,
                                          record_size)
from clients.cluster import Cluster, TopicPartition
from common.security import ClientSecurity
from clients.errors import KafkaTimeoutError, UnknownTopicError
from clients.producer.partitioner import StickyPartitioner, partition_for_key
from clients.producer.config import COMPRESSION, PRODUCER, idempotence
from clients.producer.idempotence import ProducerIdAndEpoch
from clients.producer.pipe import ProduceConnections
from clients.producer.sender import Sender
from clients.producer.transactions import Transactions
from clients.producer.transaction_manager import State, TransactionManager, TransactionStateError
from wire.errors import ErrorCode, KafkaError, MessageTooLargeError

__all__ = ["DeliveryFuture", "Producer", "ProducerBatch", "RecordAccumulator", "RecordMetadata"]


class Producer:
    """Kafka producer. Use as `async with Producer(bootstrap, config) as p:` (starts the sender
    task; leaving flushes and closes) or `await p.start(nursery)` / `await p.aclose()`."""

    def __init__(self, bootstrap: str | Cluster | None = None, config: dict | None = None,
                 *, security: ClientSecurity | None = None, **kwargs):
        props = dict(config or {})
        props.update({k.replace("_", "."): v for k, v in kwargs.items()})
        if isinstance(bootstrap, str):
            props["bootstrap.servers"] = bootstrap
        self.config = cfg = PRODUCER.parse(props)
        self.idempotent, tid = idempotence(cfg)
        self._txn = (TransactionManager(tid, cfg["transaction.timeout.ms"]) if tid is not None
                     else None)
        self.acks = cfg["acks"]
        if isinstance(bootstrap, Cluster):
            self.cluster, self._own_cluster = bootstrap, False
        else:
            self.cluster = Cluster.from_config(cfg, security)
            self._own_cluster = True
        self._acc = RecordAccumulator(cfg["batch.size"], cfg["linger.ms"] / 1000,
                                      cfg["buffer.memory"], COMPRESSION[cfg["compression.type"]])
        self._partitioner = StickyPartitioner()
        self._delivery_timeout_s = cfg["delivery.timeout.ms"] / 1000
        self._max_block_s = cfg["max.block.ms"] / 1000
        self._ids = ProducerIdAndEpoch()
        self._transactions = None if self._txn is None else Transactions(
            self.cluster, self._txn, self._ids, cfg, flush=self.flush,
            fail_unsent=self._fail_unsent, wake=self._wake)
        self._sender = Sender(
            self.cluster, self._acc, self._ids, cfg, idempotent=self.idempotent,
            # our own pipelined connection per node, ordered by a turnstile (pipe.py)
            connections=ProduceConnections(self.cluster, f"produce-{id(self):x}"),
            txn=self._txn,
            add_partitions=None if self._transactions is None else
            self._transactions.add_partitions)
        self._closing = False
        self._closed = False
        self._nursery: trio.Nursery | None = None
        self._exit_stack: contextlib.AsyncExitStack | None = None
        self._started = False
        self._available_cache: dict[str, tuple[int, list[int] | None]] = {}
        self._max_request_size = cfg["max.request.size"]
        self._ignore_keys = cfg["partitioner.ignore.keys"]
        self._sticky_batch: dict[str, ProducerBatch] = {}   # topic -> open batch of its sticky tp
        self._fast_value_max = min(FAST_VALUE_MAX, self._max_request_size - BATCH_HEADER_SIZE - 21)
        self._fast_room = cfg["batch.size"] - 21      # the slow path's estimate: 21 + value

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
            await self._sender.init_producer_id()   # a transactional one: init_transactions
        self._nursery = nursery
        nursery.start_soon(self._sender.run)
        self._started = True
        return self

    async def aclose(self, timeout_s: float | None = None) -> None:
        """Send what is buffered (up to `timeout_s`, default delivery.timeout.ms), then stop.
        Records still unsent after that fail with KafkaTimeoutError."""
        if self._closed:
            return
        self._closing = self._sender.closing = True
        self._wake()
        if self._started:
            with trio.move_on_after(self._delivery_timeout_s if timeout_s is None else timeout_s):
                await self.flush()
            self._sender.stop()
        self._sender.fail_unsent(KafkaTimeoutError("producer closed before the record was sent"))
        self._closed = self._sender.closed = True
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
                   on_delivery: Callable | None = None,
                   buffer_wait_s: float | None = None) -> DeliveryFuture:
        """Queue one record; returns its DeliveryFuture. Waits only for metadata or buffer space
        (up to max.block.ms, or `buffer_wait_s` for the buffer)."""
        if self._closing:
            raise KafkaError("producer is closed", ErrorCode.UNKNOWN_SERVER_ERROR)
        if self._txn is not None:
            self._txn.check_can_send()
        if key is None and partition is None and headers is None and \
                value.__class__ is bytes and topic in self._sticky_batch:
            # send_nowait's fast path; None when it would have to wait (buffer full) or the
            # record is too large: the long way below waits or raises
            fut = self.send_nowait(topic, value, timestamp_ms=timestamp_ms,
                                   on_delivery=on_delivery)
            if fut is not None:
                return fut
        key, value, headers = _as_bytes(key, value, headers)
        size = record_size(key, value, headers)
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
                deadline = trio.current_time() + (
                    self._max_block_s if buffer_wait_s is None else buffer_wait_s)
            self._wake()
            with trio.move_on_at(deadline):
                await self._sender.space.wait()
            if trio.current_time() >= deadline:
                raise KafkaTimeoutError(
                    f"buffer.memory full for {self._max_block_s:g} s (max.block.ms)"
                    if buffer_wait_s is None else
                    f"buffer.memory full for {buffer_wait_s:g} s (delivery.timeout.ms)")
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
                if v <= self._fast_value_max and b.size + v <= self._fast_room:
                    if self._txn is not None:
                        self._txn.check_can_send()
                    ts = time.time_ns() // 1_000_000 if timestamp_ms is None else timestamp_ms
                    d = ts - b.base_ts
                    n = b.record_count
                    lens = SMALL_VARINT_LEN
                    # length, attributes + ts delta, offset delta, null key + value length,
                    # value, no headers
                    r = 3 + v + lens[d] + lens[n] + lens[v] if 0 <= d < 8192 and n < 8192 else 0
                    acc = self._acc
                    grow = r + lens[r]
                    if r and acc.used + grow <= acc.buffer_memory:   # charged as acc.append does
                        acc.used += grow
                        b.alloc += grow
                        b.body.extend((SMALL_VARINT[r], ATTR_TS[d], SMALL_VARINT[n],
                                       NULL_KEY_LEN[v], value, b"\x00"))
                        b.size += grow
                        b.record_count = n + 1
                        b.callbacks.append(on_delivery)
                        b.timestamps.append(ts)
                        if on_delivery is not None:
                            b.n_callbacks += 1
                        self._sender.incomplete += 1
                        return DeliveryFuture(b, n)
        t = self.cluster.metadata.topics.get(topic)
        if t is None or not t.partitions or self._closing:
            return None
        if self._txn is not None:
            self._txn.check_can_send()
        key, value, headers = _as_bytes(key, value, headers)
        size = record_size(key, value, headers)
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
            size = record_size(key, value, headers)
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
        self._sender.incomplete += 1
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
        await self._sender.flush()

    def _wake(self) -> None:
        self._sender.wake()

    def _fail_unsent(self, exc: Exception) -> None:
        self._sender.fail_unsent(exc)

    # -- transactions (the calls are Transactions', transactions.py) -----------------------------

    def _transactional(self, what: str) -> Transactions:
        if self._transactions is None:
            raise TransactionStateError(f"{what}() needs a transactional producer "
                                        "(set transactional.id)")
        if not self._started:
            raise TransactionStateError(f"{what}() before the producer was started")
        return self._transactions

    @property
    def producer_id_and_epoch(self) -> tuple[int, int]:
        """(producer id, epoch) in use; (-1, -1) before the first InitProducerId."""
        return self._ids.producer_id, self._ids.producer_epoch

    @property
    def transaction_state(self) -> State | None:
        return None if self._txn is None else self._txn.state

    async def init_transactions(self, timeout_s: float | None = None) -> None:
        """Get this transactional.id's producer id and epoch from its coordinator, fencing any
        older instance (its open transaction is aborted by the coordinator first)."""
        await self._transactional("init_transactions").init_transactions(timeout_s)

    async def begin_transaction(self) -> None:
        await self._transactional("begin_transaction").begin_transaction()

    async def send_offsets_to_transaction(self, offsets, group_metadata_or_group_id,
                                          timeout_s: float | None = None) -> None:
        """Commit consumed offsets as part of the transaction (consume-transform-produce);
        the accepted shapes are Transactions.send_offsets_to_transaction's."""
        await self._transactional("send_offsets_to_transaction").send_offsets_to_transaction(
            offsets, group_metadata_or_group_id, timeout_s)

    async def commit_transaction(self, timeout_s: float | None = None) -> None:
        """Flush every record of the transaction, then commit it (EndTxn). Raises if any record
        failed: the transaction must then be aborted. After a timeout, calling it again resumes."""
        await self._transactional("commit_transaction").commit_transaction(timeout_s)

    async def abort_transaction(self, timeout_s: float | None = None) -> None:
        """Abort: records not sent yet fail with TransactionAbortedError, those in flight are
        awaited, then EndTxn(abort). Also the way out of an abortable error."""
        await self._transactional("abort_transaction").abort_transaction(timeout_s)


def _as_bytes(key, value, headers):
    """str keys, values and header values as UTF-8 bytes; headers as a list of pairs."""
    if isinstance(value, str):
        value = value.encode()
    if isinstance(key, str):
        key = key.encode()
    if headers:
        headers = [(k, v.encode() if isinstance(v, str) else v) for k, v in
                   (headers.items() if isinstance(headers, dict) else headers)]
    return key, value, headers
