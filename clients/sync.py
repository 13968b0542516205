"""Blocking facade over the trio clients, for scripts and Spark executors.

    from clients.sync import SyncProducer, SyncAdmin
    with SyncProducer("127.0.0.1:9092", {"acks": "all"}) as p:
        fut = p.send("events", b"value", key=b"k")     # concurrent.futures.Future
        p.flush()
        print(fut.result())                            # RecordMetadata
    with SyncAdmin("127.0.0.1:9092") as admin:
        print(admin.list_topics())

Design: each facade object owns ONE trio event loop running in a daemon background thread for
its whole life, and calls cross into it with `trio.from_thread` (thread-safe, so Spark's task
threads may share one object). Not `trio.run` per call, because a producer is not a function
call: its sender task must keep running between calls (linger.ms, retries, in-flight requests),
and the metadata cache and broker connections must outlive each call — a fresh loop per call
would reconnect and re-fetch metadata every time and could not deliver anything after `send`
returned.

`SyncProducer.send` does not cross into the loop per record (that costs tens of microseconds):
records go onto a thread-safe queue and the loop is poked only when the queue goes from empty to
non-empty; the loop drains it into the accumulator. The queue is bounded, so a producing thread
blocks (up to `max.block.ms`) when the cluster cannot keep up — the same back-pressure as the
async `send`. Delivery callbacks (`on_delivery(meta, exc)`) run on the loop thread; keep them
short.
"""

from __future__ import annotations

import collections
import concurrent.futures
import threading
from typing import Any, Callable

import trio

from clients.admin import AdminClient
from clients.errors import KafkaTimeoutError
from clients.producer import Producer


class LoopThread:
    """A trio loop in a background thread; `run(async_fn, *args)` from any other thread."""

    def __init__(self, name: str = "raftka-client"):
        self._token: trio.lowlevel.TrioToken | None = None
        self._ready = threading.Event()
        self._stop: trio.Event | None = None
        self.nursery: trio.Nursery | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error

    def _main(self) -> None:
        async def main():
            self._token = trio.lowlevel.current_trio_token()
            self._stop = trio.Event()
            async with trio.open_nursery() as nursery:
                self.nursery = nursery
                self._ready.set()
                await self._stop.wait()
                nursery.cancel_scope.cancel()
        try:
            trio.run(main)
        except BaseException as exc:  # noqa: BLE001 - surfaced to the creating thread
            self._error = exc
            self._ready.set()

    @property
    def token(self) -> trio.lowlevel.TrioToken:
        return self._token

    def run(self, async_fn: Callable, *args) -> Any:
        if threading.current_thread() is self._thread:
            raise RuntimeError("blocking call from the client's own loop thread (a callback?)")
        return trio.from_thread.run(async_fn, *args, trio_token=self._token)

    def run_sync_soon(self, fn: Callable, *args) -> None:
        self._token.run_sync_soon(fn, *args)

    def close(self) -> None:
        if self._thread.is_alive() and self._stop is not None:
            try:
                trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
            except trio.RunFinishedError:
                pass
            self._thread.join(10)


class SyncProducer:
    def __init__(self, bootstrap: str | None = None, config: dict | None = None,
                 max_queued: int = 100_000, **kwargs):
        self._producer = Producer(bootstrap, config, **kwargs)
        self._loop = LoopThread("raftka-producer")
        self._queue: collections.deque = collections.deque()
        self._cond = threading.Condition()
        self._max_queued = max_queued
        self._poked = False
        self._blocked_on: tuple | None = None      # an item waiting for metadata or memory
        self._closed = False
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
             on_delivery: Callable | None = None) -> concurrent.futures.Future:
        if self._closed:
            raise RuntimeError("producer is closed")
        if self._producer._txn is not None:
            self._producer._txn.check_can_send()     # misuse fails here, in the caller's thread
        fut: concurrent.futures.Future = concurrent.futures.Future()
        item = (topic, value, key, partition, headers, timestamp_ms, on_delivery, fut)
        max_block = self._producer.config["max.block.ms"] / 1000
        with self._cond:
            if len(self._queue) >= self._max_queued:
                if not self._cond.wait_for(lambda: len(self._queue) < self._max_queued,
                                           timeout=max_block):
                    raise KafkaTimeoutError(f"send queue full for {max_block:g} s (max.block.ms)")
            self._queue.append(item)
            poke = not self._poked
            self._poked = True
        if poke:
            self._loop.run_sync_soon(self._drain)
        return fut

    # -- on the loop thread ----------------------------------------------------------------------

    def _drain(self) -> None:
        p = self._producer
        while self._blocked_on is None:
            with self._cond:
                if not self._queue:
                    self._poked = False
                    self._cond.notify_all()
                    return
                item = self._queue.popleft()
                if len(self._queue) < self._max_queued:
                    self._cond.notify_all()
            topic, value, key, partition, headers, ts, cb, fut = item
            try:
                dfut = p.send_nowait(topic, value, key, partition=partition, headers=headers,
                                     timestamp_ms=ts)
            except Exception as exc:  # noqa: BLE001 - reported through the future
                fut.set_exception(exc)
                continue
            if dfut is None:
                # metadata not loaded or buffer full: the async send waits; keep order behind it
                self._blocked_on = item
                self._loop.nursery.start_soon(self._send_blocking, item)
                return
            self._link(dfut, cb, fut)

    async def _send_blocking(self, item) -> None:
        topic, value, key, partition, headers, ts, cb, fut = item
        try:
            dfut = await self._producer.send(topic, value, key, partition=partition,
                                             headers=headers, timestamp_ms=ts)
        except Exception as exc:  # noqa: BLE001 - reported through the future
            fut.set_exception(exc)
        else:
            self._link(dfut, cb, fut)
        self._blocked_on = None
        self._drain()

    @staticmethod
    def _link(dfut, cb, fut) -> None:
        def done(meta, exc):
            if exc is None:
                fut.set_result(meta)
            else:
                fut.set_exception(exc)
            if cb is not None:
                try:
                    cb(meta, exc)
                except Exception:  # noqa: BLE001 - a user callback must not kill the loop
                    pass
        dfut.add_callback(done)

    async def _flush(self) -> None:
        while True:
            self._drain()
            while self._blocked_on is not None or self._queue:
                await trio.sleep(0.001)
                self._drain()
            await self._producer.flush()
            if not self._queue and self._blocked_on is None:
                return

    # -- public blocking calls -------------------------------------------------------------------

    def flush(self, timeout_s: float | None = None) -> None:
        """Block until everything sent so far is acknowledged or failed."""
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
        async def run():
            await self._drain_queue()
            await self._producer.commit_transaction(timeout_s)
        self._loop.run(run)

    def abort_transaction(self, timeout_s: float | None = None) -> None:
        async def run():
            await self._drain_queue()
            await self._producer.abort_transaction(timeout_s)
        self._loop.run(run)

    async def _drain_queue(self) -> None:
        self._drain()
        while self._blocked_on is not None or self._queue:
            await trio.sleep(0.001)
            self._drain()

    def close(self, timeout_s: float | None = None) -> None:
        if self._closed:
            return
        try:
            self.flush(timeout_s)
        finally:
            self._closed = True
            try:
                self._loop.run(self._producer.aclose, 0)
            finally:
                self._loop.close()

    def __enter__(self) -> "SyncProducer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class SyncAdmin:
    """Every `AdminClient` coroutine method, as a blocking call."""

    def __init__(self, bootstrap: str | None = None, config: dict | None = None, **kwargs):
        self._admin = AdminClient(bootstrap, config, **kwargs)
        self._loop = LoopThread("raftka-admin")
        try:
            self._loop.run(self._admin.start)
        except BaseException:
            self._loop.close()
            raise

    def __getattr__(self, name: str):
        attr = getattr(self._admin, name)
        if not callable(attr) or name.startswith("_") or name in ("start", "aclose"):
            return attr

        def call(*args, **kwargs):
            async def run():
                return await attr(*args, **kwargs)
            return self._loop.run(run)
        call.__name__ = name
        call.__doc__ = attr.__doc__
        return call

    def close(self) -> None:
        try:
            self._loop.run(self._admin.aclose)
        finally:
            self._loop.close()

    def __enter__(self) -> "SyncAdmin":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
