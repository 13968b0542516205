"""The blocking producer facade, `SyncProducer` (why one long-lived loop thread: loop_thread.py).

`SyncProducer.send` does not cross into the loop per record (that costs tens of microseconds):
records go onto a thread-safe queue and the loop is poked only when the queue goes from empty to
non-empty; the loop drains all of it at once into the accumulator. The queue is bounded, so a
producing thread blocks (up to `max.block.ms`) when the cluster cannot keep up — the same
back-pressure as the async `send`. `send` returns a `SendFuture`: `result()`, `exception()`,
`done()`, `add_done_callback()` as on a `concurrent.futures.Future`, which it builds only when
a caller really waits (`future()` gives it, for `concurrent.futures.wait`). Delivery callbacks
(`on_delivery(meta, exc)`) run on the loop thread; keep them short.
"""

from __future__ import annotations

import collections
import concurrent.futures
import threading
from typing import Callable

import trio

from clients.errors import KafkaTimeoutError
from clients.loop_thread import LoopThread
from clients.producer import DeliveryFuture, Producer


# Records moved into the accumulator per pass of the loop thread (a few ms of work): between
# passes the sender task runs, so batches go out while a fast caller is still producing.
DRAIN_PASS = 4096


class SendFuture:
    """What `SyncProducer.send` returns: a light handle on one record's outcome, with the
    `concurrent.futures.Future` methods callers use (`result`, `exception`, `done`,
    `add_done_callback`, `cancel`...).

    It holds the record until the loop thread hands it to the producer, then the producer's
    `DeliveryFuture` (or the error that stopped the record before the accumulator). A real
    `concurrent.futures.Future` (a Condition, a lock, a callback on the batch) is built only when
    a caller waits on a record that is not known to be settled, or adds a done callback;
    `future()` returns it for `concurrent.futures.wait` / `as_completed`. Most producers never
    pay for it: `result()` after `flush()` reads the batch's outcome directly.

    Thread safety: the loop thread alone writes `_out` and the batch's outcome. A
    caller thread reads the outcome directly only once it is known complete - the record was
    sent before a `flush` (or a transaction's commit/abort, or `close`) that returned - or when
    it runs on the loop thread itself (inside a delivery callback); otherwise it goes through
    the Future, which the loop thread completes."""

    # One object per record and no tuple of arguments: every object a send allocates is more
    # work for the garbage collector while records are queued or their handles kept.
    __slots__ = ("_owner", "_seq", "_topic", "_value", "_cb", "_extra", "_out", "_cf")

    def __init__(self, owner: "SyncProducer", seq: int, topic: str, value, cb, extra):
        self._owner = owner
        self._seq = seq
        self._topic = topic
        self._value = value
        self._cb = cb
        self._extra = extra      # None, or (key, partition, headers, timestamp_ms)
        # None until the loop thread takes the record; then the producer's DeliveryFuture, or
        # the error that kept the record out of the accumulator
        self._out = None
        self._cf = None          # concurrent.futures.Future, made on demand

    # -- outcome, read directly when it is safe (see the class docstring) ------------------------

    def _settled_here(self) -> bool:
        o = self._owner
        return self._seq <= o._settled or threading.get_ident() == o._loop_ident

    def done(self) -> bool:
        d = self._out
        if d is None:
            return False
        return d.__class__ is not DeliveryFuture or d.done()

    def running(self) -> bool:
        return not self.done()

    def cancelled(self) -> bool:
        return False

    def cancel(self) -> bool:
        """A record handed to the producer cannot be taken back (as with Kafka's producer)."""
        return False

    def _direct(self):
        """(True, meta, exc) when the outcome can be read on this thread now."""
        if self._settled_here():
            d = self._out
            if d is None:
                pass
            elif d.__class__ is not DeliveryFuture:
                return True, None, d
            elif d.done():
                exc = d.exception()
                return True, (None if exc is not None else d.result()), exc
        return False, None, None

    def result(self, timeout: float | None = None):
        """The record's RecordMetadata; raises its error, or concurrent.futures.TimeoutError
        when `timeout` (seconds) passes first."""
        ok, meta, exc = self._direct()
        if ok:
            if exc is not None:
                raise exc
            return meta
        self._check_not_loop_thread()
        return self.future().result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        ok, _, exc = self._direct()
        if ok:
            return exc
        self._check_not_loop_thread()
        return self.future().exception(timeout)

    def add_done_callback(self, fn: Callable) -> None:
        """`fn(handle)` once the record is settled: at once if it is, else on the loop thread
        (like the delivery callbacks)."""
        if self._direct()[0]:
            fn(self)
        else:
            self.future().add_done_callback(lambda _cf: fn(self))

    def _check_not_loop_thread(self) -> None:
        if threading.get_ident() == self._owner._loop_ident:
            # a delivery callback waiting on a record not yet acknowledged would wait on itself
            raise RuntimeError("blocking on a record from the producer's loop thread "
                               "(a callback?) would never return")

    def future(self) -> concurrent.futures.Future:
        """The record's outcome as a `concurrent.futures.Future` (built once, on demand)."""
        cf = self._cf
        if cf is None:
            o = self._owner
            with o._lock:
                cf = self._cf
                if cf is None:
                    cf = concurrent.futures.Future()
                    cf.set_running_or_notify_cancel()      # sent: cancel() says False
                    self._cf = cf
                    link = True
                else:
                    link = False
            if link:
                ok, meta, exc = self._direct()
                if ok:
                    _settle(cf, meta, exc)
                else:
                    o._request_link(self)
        return cf

    def __repr__(self) -> str:
        return f"<SendFuture {'done' if self.done() else 'pending'}>"


def _settle(cf: concurrent.futures.Future, meta, exc) -> None:
    if exc is not None:
        cf.set_exception(exc)
    else:
        cf.set_result(meta)


class SyncProducer:
    """A `Producer` behind a blocking API; any number of threads may share one.

    `send` costs the calling thread ~1-2 us: it appends the record to a deque under one lock
    and returns a `SendFuture`; the producer's loop thread takes everything queued in one go
    (one lock per pass, not per record) and appends it, up to DRAIN_PASS records per pass, to
    the accumulator with the async producer's `send_nowait`, the user's `on_delivery` passed
    straight through (no callback at all for records without one). The loop is woken only when
    the queue goes from empty to non-empty; records arriving while it is still busy with the
    previous lot are taken by its next pass, never left for a timer. Records are stamped
    (CreateTime) when the loop takes them, as before, not in `send`.

    Back-pressure: records queued but not yet in the accumulator are bounded by `max_queued`
    records and `buffer.memory` bytes (keys + values); the accumulator itself is bounded by
    `buffer.memory`. A caller producing faster than the network blocks in `send` (up to
    `max.block.ms`, then KafkaTimeoutError), as with Kafka's producer."""

    def __init__(self, bootstrap: str | None = None, config: dict | None = None,
                 max_queued: int = 100_000, **kwargs):
        self._producer = Producer(bootstrap, config, **kwargs)
        self._txn = self._producer._txn       # set once, in Producer.__init__
        self._max_queued = max_queued
        self._max_queued_bytes = self._producer.config["buffer.memory"]
        self._max_block_s = self._producer.config["max.block.ms"] / 1000
        self._lock = threading.Lock()
        self._space = threading.Condition(self._lock)   # senders waiting for queue room
        self._waiting = 0
        self._queue: collections.deque = collections.deque()
        self._pending = 0           # records queued or held by the loop, not yet accumulated
        self._pending_bytes = 0
        self._poked = False         # the loop was told to drain and has not found it empty
        self._seq = 0               # records sent so far (a SendFuture's position)
        self._settled = 0           # every record up to this position is settled
        self._backlog: collections.deque = collections.deque()   # drained, behind a blocked one
        self._blocked = False       # a record is waiting (metadata, buffer.memory) in `send`
        self._blocked_handle: SendFuture | None = None
        self._unlinked: list = []   # SendFutures whose Future waits for their record to drain
        self._closed = False
        self._loop = LoopThread("raftka-producer")
        self._loop_ident = self._loop.ident
        try:
            self._loop.run(self._start)
        except BaseException:
            self._loop.close()
            raise

    async def _start(self) -> None:
        await self._producer.start(self._loop.nursery)

    @property
    def config(self) -> dict:
        return self._producer.config

    def send(self, topic: str, value=None, key=None, *, partition: int | None = None,
             headers=None, timestamp_ms: int | None = None,
             on_delivery: Callable | None = None) -> SendFuture:
        """Queue one record; returns its SendFuture. `on_delivery(meta, exc)` runs on the loop
        thread when the record is acknowledged or fails (in record order per partition).
        Blocks only when the queue is full (back-pressure), up to `max.block.ms`."""
        if self._closed:
            raise RuntimeError("producer is closed")
        if self._txn is not None:
            self._txn.check_can_send()     # misuse fails here, in the caller's thread
        if key is None and partition is None and headers is None and timestamp_ms is None:
            extra = None
            size = 0 if value is None else len(value)
        else:
            extra = (key, partition, headers, timestamp_ms)
            size = (0 if value is None else len(value)) + (0 if key is None else len(key))
        with self._lock:
            if self._pending >= self._max_queued or \
                    (self._pending and self._pending_bytes + size > self._max_queued_bytes):
                self._wait_for_room(size)
            self._seq = seq = self._seq + 1
            h = SendFuture(self, seq, topic, value, on_delivery, extra)
            self._queue.append(h)
            self._pending += 1
            self._pending_bytes += size
            if self._poked:
                return h
            self._poked = True
        self._loop.run_sync_soon(self._drain)
        return h

    def _wait_for_room(self, size: int) -> None:
        """Under the lock: wait until the loop took enough from the queue (back-pressure)."""
        if threading.get_ident() == self._loop_ident:
            raise RuntimeError("send from the producer's loop thread (a callback?) with the "
                               "queue full would never return")
        self._waiting += 1
        try:
            if not self._space.wait_for(
                    lambda: self._pending < self._max_queued and
                    (not self._pending or self._pending_bytes + size <= self._max_queued_bytes),
                    timeout=self._max_block_s):
                raise KafkaTimeoutError(f"send queue full for {self._max_block_s:g} s "
                                        "(max.block.ms)")
            if self._closed:
                raise RuntimeError("producer is closed")
        finally:
            self._waiting -= 1

    # -- on the loop thread ----------------------------------------------------------------------

    def _drain(self) -> None:
        """Move everything queued into the accumulator, in order, until one record has to wait
        (metadata not loaded, buffer.memory full; the rest waits behind it in `_backlog`).

        One pass per call: what a fast caller queued meanwhile is taken by another pass,
        scheduled behind the loop's other work, so the sender gets its turn between passes
        (looping here until the queue stays empty would keep the network idle for as long as
        the caller keeps up)."""
        if self._blocked:
            return      # the blocked record's task calls _drain again when it is through
        if self._backlog:
            items, self._backlog = self._backlog, collections.deque()
        else:
            with self._lock:
                if not self._queue:
                    self._poked = False
                    return
                items, self._queue = self._queue, collections.deque()
        done, size = self._accumulate(items)
        with self._lock:
            self._pending -= done
            self._pending_bytes -= size
            if self._waiting:
                self._space.notify_all()
            again = not self._blocked and (self._backlog or self._queue)
            if not again and not self._blocked:
                self._poked = False
        if again:
            self._loop.run_sync_soon(self._drain)

    def _accumulate(self, items: collections.deque) -> tuple[int, int]:
        """Hand up to DRAIN_PASS of `items` to the producer, until one must wait; the rest
        goes to `_backlog`. Returns (count, key+value bytes) of the records that left the
        queue (accumulated, failed, or now waiting)."""
        send_nowait = self._producer.send_nowait
        n = size = 0
        popleft = items.popleft
        limit = DRAIN_PASS
        while items:
            if n == limit:
                self._backlog = items      # next pass, after the sender's turn
                break
            h = popleft()
            value = h._value
            extra = h._extra
            try:
                if extra is None:
                    d = send_nowait(h._topic, value, on_delivery=h._cb)
                else:
                    key, partition, headers, ts = extra
                    size += 0 if key is None else len(key)
                    d = send_nowait(h._topic, value, key, partition=partition, headers=headers,
                                    timestamp_ms=ts, on_delivery=h._cb)
            except Exception as exc:  # noqa: BLE001 - reported through the handle
                d = exc
            n += 1
            if value is not None:
                size += len(value)
            if d is None:
                # metadata not loaded or buffer full: the async send waits; keep order behind it
                self._blocked = True
                self._blocked_handle = h
                self._backlog = items
                self._loop.nursery.start_soon(self._send_blocking, h)
                break
            h._out = d
        if self._unlinked:
            self._link_drained()
        return n, size

    async def _send_blocking(self, h: SendFuture) -> None:
        # A record `send` already accepted waits for buffer.memory up to delivery.timeout.ms,
        # not max.block.ms: in Kafka's producer an accepted record is in the accumulator and
        # only delivery.timeout.ms fails it; the caller is back-pressured by the queue bound.
        # With max.block.ms, every 1.5 s a paused leader lasted failed one more accepted record.
        key, partition, headers, ts = h._extra or (None, None, None, None)
        try:
            h._out = await self._producer.send(
                h._topic, h._value, key, partition=partition, headers=headers,
                timestamp_ms=ts, on_delivery=h._cb,
                buffer_wait_s=self._producer.config["delivery.timeout.ms"] / 1000)
        except Exception as exc:  # noqa: BLE001 - reported through the handle
            h._out = exc
        self._blocked = False
        self._blocked_handle = None
        if self._unlinked:
            self._link_drained()
        self._drain()

    def _request_link(self, h: SendFuture) -> None:
        try:
            self._loop.run_sync_soon(self._link, h)
        except trio.RunFinishedError:
            # the loop is gone (closed): nothing will settle the record any more
            _settle(h._cf, None, KafkaTimeoutError("producer closed before the record was "
                                                   "acknowledged"))

    def _link(self, h: SendFuture) -> None:
        """Complete `h`'s Future when its record is settled (on the loop thread)."""
        if h._out is None:
            self._drain()
            if h._out is None:
                self._unlinked.append(h)    # behind a blocked record: linked once drained
                return
        self._link_now(h)

    def _link_drained(self) -> None:
        waiting, self._unlinked = self._unlinked, []
        for h in waiting:
            if h._out is None:
                self._unlinked.append(h)
            else:
                self._link_now(h)

    @staticmethod
    def _link_now(h: SendFuture) -> None:
        cf, d = h._cf, h._out
        if d.__class__ is not DeliveryFuture:
            cf.set_exception(d)
        else:
            d.add_callback(lambda meta, exc: _settle(cf, meta, exc))

    async def _drain_queue(self) -> None:
        """Until everything queued so far is in the accumulator (or failed)."""
        self._drain()
        while self._blocked or self._backlog or self._queue:
            await trio.sleep(0.001)
            self._drain()

    async def _flush(self) -> None:
        while True:
            await self._drain_queue()
            await self._producer.flush()
            if not self._queue and not self._blocked and not self._backlog:
                return

    def _sent_so_far(self) -> int:
        # under the lock: a position read here is already in the queue
        with self._lock:
            return self._seq

    def _settle_upto(self, seq: int) -> None:
        # every record up to `seq` is acknowledged or failed: their handles may read directly
        with self._lock:
            if seq > self._settled:
                self._settled = seq

    # -- public blocking calls -------------------------------------------------------------------

    def flush(self, timeout_s: float | None = None) -> None:
        """Block until everything sent so far is acknowledged or failed."""
        upto = self._sent_so_far()

        async def run():
            if timeout_s is None:
                await self._flush()
            else:
                with trio.fail_after(timeout_s):
                    await self._flush()
        try:
            self._loop.run(run)
        except trio.TooSlowError:
            raise KafkaTimeoutError(f"flush did not finish in {timeout_s:g} s") from None
        self._settle_upto(upto)

    # -- transactions (see Producer; records queued by send() join the transaction first) -------

    def init_transactions(self, timeout_s: float | None = None) -> None:
        self._loop.run(self._producer.init_transactions, timeout_s)

    def begin_transaction(self) -> None:
        self._loop.run(self._producer.begin_transaction)

    def send_offsets_to_transaction(self, offsets, group_metadata_or_group_id,
                                    timeout_s: float | None = None) -> None:
        self._loop.run(self._producer.send_offsets_to_transaction, offsets,
                       group_metadata_or_group_id, timeout_s)

    def commit_transaction(self, timeout_s: float | None = None) -> None:
        upto = self._sent_so_far()

        async def run():
            await self._drain_queue()
            await self._producer.commit_transaction(timeout_s)
        self._loop.run(run)
        self._settle_upto(upto)

    def abort_transaction(self, timeout_s: float | None = None) -> None:
        upto = self._sent_so_far()

        async def run():
            await self._drain_queue()
            await self._producer.abort_transaction(timeout_s)
        self._loop.run(run)
        self._settle_upto(upto)

    def close(self, timeout_s: float | None = None) -> None:
        """Flush (up to `timeout_s`), then stop. Records still unsent then fail with
        KafkaTimeoutError."""
        if self._closed:
            return
        try:
            self.flush(timeout_s)
        finally:
            self._closed = True
            try:
                self._loop.run(self._close_on_loop)
            finally:
                self._loop.close()
                # the loop thread is gone: every outcome it wrote may be read directly (a
                # record whose batch never completed reports it through its Future)
                self._settled = self._seq

    async def _close_on_loop(self) -> None:
        await self._producer.aclose(0)
        # records the loop never took (a flush that timed out): they fail, as the producer's do
        exc = KafkaTimeoutError("producer closed before the record was sent")
        with self._lock:
            left = list(self._backlog) + list(self._queue)
            if self._blocked_handle is not None:      # its task is cancelled with the loop
                left.append(self._blocked_handle)
            self._backlog.clear()
            self._queue.clear()
            self._pending = self._pending_bytes = 0
            if self._waiting:
                self._space.notify_all()
        for h in left:
            if h._out is None:
                h._out = exc
        self._link_drained()

    def __enter__(self) -> "SyncProducer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
