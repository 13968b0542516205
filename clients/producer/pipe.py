"""Pipelined Produce requests: one connection per node with several requests outstanding.

The sender's I/O edge (see producer.py): `ProducePipe` writes request after request on
one connection and one reader task hands the answers back in order; `Turnstile` makes requests
reach the connection in the sender loop's drain order. `NotSent` is how a request is given back
unwritten (its node's connection failed after it was drained).
"""

from __future__ import annotations

import collections
from typing import Callable

import trio

from clients.connection import RECV_BYTES, BrokerConnection, ConnectionClosed
from wire.errors import DecodeError


class NotSent(Exception):
    """A Produce request given back unwritten (see Producer._produce_call)."""


class Waiter:
    __slots__ = ("event", "value", "exc", "after", "taken")

    def __init__(self, after: "trio.Event | None" = None):
        self.event = trio.Event()          # the answer (or the pipe's failure) is in
        self.value = None
        self.exc: BaseException | None = None
        self.after = after                 # the previous request's answer was taken
        self.taken = trio.Event()


class Turnstile:
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


class ProducePipe:
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
        self.waiters: collections.deque[Waiter] = collections.deque()
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
                w = Waiter(self._last_taken)
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

    async def receive(self, w: Waiter, timeout_s: float):
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
