"""The producer's sender: ready batches -> Produce requests per node, answers -> outcomes.

Kafka's `Sender`: a collaborator of `Producer` (producer.py, whose docstring describes the
whole) that owns the sending half and nothing else. What it is given, and why:

    cluster        metadata (leaders) and InitProducerId for an idempotent producer
    accumulator    the batches to drain, re-enqueue, expire and release (RecordAccumulator)
    ids            producer id, epoch and sequences (ProducerIdAndEpoch, shared with the
                   transactional calls, which change the id and epoch)
    txn            the transaction state machine (pure), or None: gates what may be sent
    add_partitions the transactional call that adds new partitions (AddPartitionsToTxn)
    connections    a pipelined connection per node (pipe.ProduceConnections)

What it owns: the sender loop, the in-flight counts per node and partition, the records not yet
completed (`incomplete`) and the events the producer's `send` (buffer space) and `flush` (idle)
wait on. The loop drains ready batches into at most one request per node at a time, up to
max.in.flight.requests.per.connection outstanding on the node's `ProducePipe`; each request's
task settles its batches: complete, retry in order, split, or fail.
"""

from __future__ import annotations

import collections
from typing import Awaitable, Callable

import trio

from clients.cluster import Cluster, TopicPartition
from clients.errors import KafkaTimeoutError, Retry, classify, error
from clients.producer.accumulator import NO_SEQUENCE, ProducerBatch, RecordAccumulator
from clients.producer.idempotence import ProducerIdAndEpoch
from clients.producer.pipe import NotSent, ProduceConnections
from clients.producer.transaction_manager import State, TransactionAbortedError, TransactionManager
from wire.errors import ErrorCode, KafkaError
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS
from wire.records.batch import BATCH_HEADER_SIZE

PRODUCE = REQUESTS[ApiKey.PRODUCE]
INIT_PRODUCER_ID = REQUESTS[ApiKey.INIT_PRODUCER_ID]

# Partition errors a broker answers only for a batch it did not append: the batch's validation,
# the producer's state, authorization, and checks made before the append. Any other error may
# follow an append: NOT_LEADER_OR_FOLLOWER also answers an acks=all append still waiting when its
# broker lost the leadership, REQUEST_TIMED_OUT and NOT_ENOUGH_REPLICAS_AFTER_APPEND one not
# replicated in time — written, and perhaps already replicated to the next leader. Such a batch
# is in doubt like one whose answer was lost (see Sender._fail_in_doubt_batches).
NOT_APPENDED = frozenset({
    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorCode.INVALID_RECORD, ErrorCode.CORRUPT_MESSAGE,
    ErrorCode.INVALID_TIMESTAMP, ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE,
    ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.UNKNOWN_TOPIC_ID, ErrorCode.INVALID_TOPIC_EXCEPTION, ErrorCode.INVALID_REQUIRED_ACKS,
    ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED, ErrorCode.INVALID_PRODUCER_EPOCH,
    ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_TXN_STATE, ErrorCode.UNKNOWN_PRODUCER_ID,
    ErrorCode.INVALID_PRODUCER_ID_MAPPING, ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
    ErrorCode.UNSUPPORTED_VERSION})


class Sender:
    """The producer's sending half (see the module docstring for what it is given)."""

    def __init__(self, cluster: Cluster, accumulator: RecordAccumulator,
                 ids: ProducerIdAndEpoch, config, *, idempotent: bool,
                 connections: ProduceConnections, txn: TransactionManager | None = None,
                 add_partitions: Callable[[list[TopicPartition]], Awaitable[None]] | None = None):
        self.cluster = cluster
        self._acc = accumulator
        self.ids = ids
        self.config = config
        self.idempotent = idempotent
        self.acks = config["acks"]
        self._connections = connections
        self._txn = txn
        self._add_partitions_to_txn = add_partitions
        self._backoff_s = config["retry.backoff.ms"] / 1000
        self._delivery_timeout_s = config["delivery.timeout.ms"] / 1000
        self._max_block_s = config["max.block.ms"] / 1000
        self._max_inflight = config["max.in.flight.requests.per.connection"]
        self._inflight: dict[int, int] = {}             # node -> Produce requests outstanding
        self._tp_inflight: collections.Counter = collections.Counter()   # tp -> batches out
        self._tp_node: dict[TopicPartition, int] = {}    # tp -> the node they are out at
        self.incomplete = 0         # records appended and not yet completed or failed
        self._flushing = 0          # flush() calls waiting: every batch is ready at once
        self.closing = False        # close pending: likewise, and nothing new will come
        self.closed = False         # no more retries
        self._wakeup = trio.Event()
        self.space = trio.Event()   # set (and replaced) whenever buffer memory is released
        self._idle = trio.Event()
        self._adding_partitions = False
        self._refresh_wanted = False
        self._scope = trio.CancelScope()

    # -- what the producer calls -----------------------------------------------------------------

    def wake(self) -> None:
        self._wakeup.set()

    async def run(self) -> None:
        """The sender task: runs until `stop`."""
        with self._scope:
            async with trio.open_nursery() as nursery:
                self._connections.nursery = nursery
                await self._sender_loop(nursery)

    def stop(self) -> None:
        self._scope.cancel()

    async def flush(self) -> None:
        """Wait until every record appended so far is acknowledged or failed."""
        if self.incomplete == 0:
            return
        self._flushing += 1
        try:
            while self.incomplete:
                self.wake()
                if self._idle.is_set():
                    self._idle = trio.Event()
                await self._idle.wait()
        finally:
            self._flushing -= 1

    def fail_unsent(self, exc: Exception) -> None:
        """Fail every batch still in the accumulator (not in flight)."""
        for b in self._acc.all_batches():
            self._fail_batch(b, exc)

    async def _sender_loop(self, nursery: trio.Nursery) -> None:
        refresh_after = 0.0
        while True:
            now = trio.current_time()
            for b in self._acc.expired(now, self._delivery_timeout_s):
                last = f" (last error: {b.last_error})" if b.last_error is not None else ""
                self._fail_batch(b, KafkaTimeoutError(
                    f"{b.tp.topic}-{b.tp.partition}: not delivered within "
                    f"delivery.timeout.ms{last}"))
            if self.ids.need_new_producer_id and not self._inflight:
                try:
                    await self.init_producer_id()
                except KafkaError:
                    pass        # retried on the next pass; batches wait meanwhile
                else:
                    self._fail_in_doubt_batches()
            md = self.cluster.metadata
            ready, next_check, unknown = self._acc.ready(
                now, md.leader_for, self._flushing > 0 or self.closing)
            if (unknown or self._refresh_wanted or self.cluster.metadata_stale()) \
                    and now >= refresh_after:
                self._refresh_wanted = False
                refresh_after = now + self._backoff_s
                nursery.start_soon(self._refresh)
            if unknown:
                next_check = min(next_check, now + self._backoff_s)
            if self.ids.need_new_producer_id:
                ready = {}      # nothing new is sealed under the old producer id
            txn = self._txn
            if txn is not None:
                ready = self._transactional_gate(txn, ready, nursery)
            sent = False
            for node, tps in ready.items():
                if self._inflight.get(node, 0) >= self._max_inflight:
                    continue
                if self._connections.has_dead_pipe(node) and self._inflight.get(node, 0):
                    # its connection died with requests on it whose failures are not handled
                    # yet: a fresh batch sent now on a new connection could be acknowledged
                    # before an earlier one that the broker did append is resent (callbacks
                    # out of order). Let them go back to the queue first.
                    continue
                tps = self._drainable(node, tps)
                batches = self._acc.drain(tps, self.config["max.request.size"]) if tps else []
                if batches:
                    self._inflight[node] = self._inflight.get(node, 0) + 1
                    for b in batches:
                        self._tp_inflight[b.tp] += 1
                        self._tp_node[b.tp] = node
                    req = self._build_produce(batches)
                    nursery.start_soon(self._send_to, node, batches, req,
                                       self._connections.take_turn(node),
                                       self._connections.failures(node))
                    sent = True
            if sent and self._max_inflight > 1:
                next_check = now        # look again at once: the pipeline may take more
            if self.incomplete == 0:
                self._idle.set()
            self._wakeup = trio.Event()
            with trio.move_on_after(max(0.0, min(next_check - now, 1.0))):
                await self._wakeup.wait()

    def _drainable(self, node: int, tps: list[TopicPartition]) -> list[TopicPartition]:
        """Of the partitions ready for `node` (their leader), those whose next batch may go now.

        A partition with batches in flight takes another only if that batch is fresh and goes
        to the node the others are out at. A resend (retry, or half of a split batch) waits
        until none is in flight, so resends go out in sequence order, one at a time, behind
        anything that may still be written before them. A fresh batch for a new leader waits
        for the old leader's answers (or failures): the new leader may already hold, replicated,
        a batch whose answer the old one never sent, accept the fresh batch after it, and the
        fresh batch's callbacks would run before those of the batch resent after the failure
        (seen in the idempotence chaos test: a record acknowledged at offset 464 after the
        one at 507). librdkafka likewise drains a partition before moving it to a new leader."""
        inflight, batches = self._tp_inflight, self._acc.batches
        return [tp for tp in tps if not inflight[tp] or
                (batches[tp][0].data is None and self._tp_node.get(tp) == node)]

    async def _refresh(self) -> None:
        try:
            await self.cluster.refresh_metadata(force=True)
        except KafkaError:
            pass            # the next loop retries after backoff
        self.wake()

    async def init_producer_id(self) -> None:
        """InitProducerId without a transactional.id (an idempotent producer), retried until
        max.block.ms on retriable errors."""
        ip = INIT_PRODUCER_ID
        deadline = trio.current_time() + self._max_block_s
        while True:
            try:
                resp = await self.cluster.call_any(ip(transactional_id=None,
                                                      transaction_timeout_ms=60000))
                code = resp.error_code
                if code == 0:
                    self.ids.reset(resp.producer_id, resp.producer_epoch)
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
        ids = self.ids
        if b.data is not None:
            if self.idempotent and not ids.is_current(b.producer_id, b.producer_epoch):
                # sealed under a producer id we have since replaced: new id, new sequence
                seq = ids.take_sequence(b.tp, b.record_count)
                return b.restamp(ids.producer_id, ids.producer_epoch, seq)
            return b.data
        if self.idempotent:
            seq = ids.take_sequence(b.tp, b.record_count)
            return b.seal(ids.producer_id, ids.producer_epoch, seq, self._txn is not None)
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
            except NotSent:
                # never written: back to the queue in creation order, not counted as an attempt
                # (the failed requests drained before it come back too, and go first)
                for b in batches:
                    self._acc.reenqueue(b)
                return
            except KafkaError as exc:
                for b in batches:
                    b.in_doubt = True       # written to the connection, no answer read
                    self._retry_or_fail(b, exc)
                return
            answered: dict[TopicPartition, object] = {}
            for t in resp.responses:
                for p in t.partition_responses:
                    answered[TopicPartition(t.name, p.index)] = p
            for b in batches:
                self._settle(b, answered.get(b.tp))
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
                    self._tp_node.pop(b.tp, None)
            self.wake()

    def _settle(self, b: ProducerBatch, p) -> None:
        """One batch's outcome from its partition's answer (None: the answer left it out)."""
        if p is None:
            b.in_doubt = True
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
            if p.error_code not in NOT_APPENDED:
                b.in_doubt = True       # perhaps appended (NOT_APPENDED says why)
            err = error(p.error_code, p.error_message or None)
            if getattr(p, "record_errors", None):    # v8+ (KIP-467)
                _name_bad_records(b, p)
            if p.error_code == ErrorCode.MESSAGE_TOO_LARGE:
                err = error(p.error_code, f"{b.tp.topic}-{b.tp.partition}: a single "
                            f"record of {len(b.data) - BATCH_HEADER_SIZE} bytes (in a "
                            "batch) is larger than the topic accepts (max.message.bytes)")
            self._retry_or_fail(b, err)

    def _predecessor_unacked(self, b: ProducerBatch) -> bool:
        """OUT_OF_ORDER_SEQUENCE_NUMBER for `b` is only a symptom when the batch before it was
        not acknowledged (it failed, is being retried, or `b` carries a replaced producer id);
        when `b` directly follows the last acknowledged batch it is a real error."""
        if not self.idempotent or b.base_sequence < 0:
            return False
        return self.ids.predecessor_unacked(b.tp, b.producer_id, b.producer_epoch,
                                            b.base_sequence)

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
            nb.attempts, nb.in_doubt = b.attempts, b.in_doubt
            nb.seal(b.producer_id, b.producer_epoch, seq, self._txn is not None)
            if seq >= 0:
                seq = (seq + len(recs)) & 0x7FFFFFFF
            self._acc.reenqueue(nb)
        b.split_into = (halves[0], halves[1])       # its futures follow it to the halves
        if b.event is not None:
            b.event.set()           # its waiters go on waiting on their half

    async def _produce_call(self, node: int, req, expect_response: bool = True,
                            ticket: int | None = None, failures: int | None = None):
        """A Produce request on the node's pipelined connection (up to
        max.in.flight.requests.per.connection outstanding), written in ticket order.

        Raises NotSent, without writing it, when a connection of the node failed since the
        request was drained (`failures` changed): requests drained before it may have failed
        with that connection and be on their way back to the queue, and one written now on a
        new connection would overtake them (its callbacks first, and without idempotence its
        records first)."""
        timeout_s = self.config["request.timeout.ms"] / 1000 + 5
        return await self._connections.call(node, req, timeout_s, expect_response, ticket,
                                            failures)

    def _retry_or_fail(self, b: ProducerBatch, exc: Exception, force: bool = False) -> None:
        action = Retry.RETRY if force else classify(exc)
        now = trio.current_time()
        if action is not Retry.NO and b.attempts < self.config["retries"] and \
                now - b.created < self._delivery_timeout_s and not self.closed:
            b.attempts += 1
            b.last_error = exc
            b.retry_at = now + self._backoff_s * min(2 ** (b.attempts - 1), 10)
            if action is Retry.REFRESH_AND_RETRY:
                self._refresh_wanted = True
            self._acc.reenqueue(b)
            return
        self._fail_batch(b, exc)

    def _fail_in_doubt_batches(self) -> None:
        """After a new producer id: a waiting batch that an earlier attempt may have written
        fails, in doubt, instead of being restamped (restamped, the broker would take it for a
        new batch and write it twice: found by the idempotence fault test, a record written
        at offsets 310 and 323). Batches whose attempts were all answered with an error that means
        not appended (NOT_APPENDED) are restamped by `_seal` as before."""
        replaced = self._acc.take(lambda b: b.data is not None and b.in_doubt and not
                                  self.ids.is_current(b.producer_id, b.producer_epoch))
        for b in replaced:
            last = f" (last error: {b.last_error})" if b.last_error is not None else ""
            self._fail_batch(b, KafkaTimeoutError(
                f"{b.tp.topic}-{b.tp.partition}: in doubt — an attempt may have been written "
                f"and the producer id has changed since (a batch failed for good), so it "
                f"cannot be resent without risking a duplicate{last}"), gap=False)

    def _complete_batch(self, b: ProducerBatch, base_offset: int, log_append_time: int) -> None:
        self.ids.acknowledged(b.tp, b.producer_id, b.producer_epoch, b.base_sequence,
                              b.record_count)
        self._acc.release(b)
        self.space.set()
        self.space = trio.Event()
        # like Kafka: the broker's log-append time when the topic uses it, else the record's own
        b.complete(base_offset, log_append_time)
        self.incomplete -= b.record_count
        if self.incomplete == 0:
            self._idle.set()

    def _fail_batch(self, b: ProducerBatch, exc: Exception, gap: bool = True) -> None:
        """`gap`: the batch took a sequence number of the current producer id, so later
        batches would leave a gap (False: its producer id is already replaced)."""
        self._acc.release(b)
        self.space.set()
        self.space = trio.Event()
        if self._txn is not None:
            # the transaction can no longer commit; after its abort the epoch is bumped if this
            # batch took a sequence number (the broker would see a gap otherwise)
            self._txn.set_abortable(exc)
            if b.data is not None:
                self._txn.needs_epoch_bump = True
        elif self.idempotent and b.data is not None and gap:
            # a sequence gap would follow this batch: start over with a new producer id
            self.ids.need_new_producer_id = True
        b.sealed = True         # out of the accumulator: the send fast path must not append
        b.complete(-1, -1, exc)
        self.incomplete -= b.record_count
        if self.incomplete == 0:
            self._idle.set()

    # -- transactions ----------------------------------------------------------------------------

    def _transactional_gate(self, txn: TransactionManager, ready: dict, nursery) -> dict:
        """Nothing is sent in an abortable/fatal/aborting state (unsent records fail at once,
        so flush never hangs); new partitions are added to the transaction in one
        AddPartitionsToTxn per drain before their first batch goes."""
        if txn.state in (State.ABORTABLE_ERROR, State.FATAL_ERROR, State.ABORTING):
            if not self._acc.empty():
                cause = txn.last_error
                self.fail_unsent(cause if txn.state is State.FATAL_ERROR else
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
        try:
            await self._add_partitions_to_txn(tps)
        finally:
            self._adding_partitions = False
            self.wake()


def _name_bad_records(b: ProducerBatch, p) -> None:
    """KIP-467: the records the broker named fail with their own message (which record, and
    why: e.g. a null key on a compacted topic); the others with the batch's error, as in
    Kafka's producer. INVALID_RECORD / INVALID_TIMESTAMP are never retried."""
    where = f"{b.tp.topic}-{b.tp.partition}"
    b.record_excs = {e.batch_index: error(p.error_code, e.batch_index_error_message or None,
                                          f"{where} record {e.batch_index}")
                     for e in p.record_errors}
