"""Pipelined Produce requests: one connection per node with several requests outstanding.

The sender's I/O edge (see producer.py): `ProducePipe` writes request after request on
one connection and one reader task hands the answers back in order; `Turnstile` makes requests
reach the connection in the sender loop's drain order. `NotSent` is how a request is given back
unwritten (its node's connection failed after it was drained). `ProduceConnections` is the
sender's collaborator that owns all of that per node: pipes, turnstiles, and how many of each
node's connections failed.
"""

from __future__ import annotations

import collections
from typing import Callable

import trio

from clients.connection import RECV_BYTES, BrokerConnection, ConnectionClosed
from clients.errors import KafkaConnectionError, KafkaTimeoutError
from wire.errors import DecodeError
from wire.messages.api_keys import ApiKey


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


class ProduceConnections:
    """The producer's own pipelined connection per node (its own channel of the `Cluster`, which
    may be shared: one reader per connection), the turnstile that orders each node's requests,
    and a count per node of connections that failed (died, or could not be opened). A request
    carries the count seen when it was drained and is written only if it is unchanged."""

    def __init__(self, cluster, channel: str):
        self.cluster = cluster
        self.channel = channel
        self.nursery: trio.Nursery | None = None      # the sender's: runs the pipes' readers
        self._pipes: dict[int, ProducePipe] = {}
        self._turns: dict[int, Turnstile] = {}
        self._locks: dict[int, trio.Lock] = {}
        self._failures: dict[int, int] = {}

    def failures(self, node: int) -> int:
        return self._failures.get(node, 0)

    def take_turn(self, node: int) -> int:
        turns = self._turns.get(node)
        if turns is None:
            turns = self._turns[node] = Turnstile()
        return turns.take()

    def has_dead_pipe(self, node: int) -> bool:
        pipe = self._pipes.get(node)
        return pipe is not None and pipe.dead is not None

    async def call(self, node: int, req, timeout_s: float, expect_response: bool = True,
                   ticket: int | None = None, failures: int | None = None):
        """`req` on the node's pipe, written in ticket order; the answer (None without one).
        NotSent, unwritten, when a connection of the node failed since `failures` was read."""
        turns = self._turns.get(node) if ticket is not None else None
        try:
            if turns is not None:
                await turns.wait(ticket)
            try:
                if failures is not None and self.failures(node) != failures:
                    raise NotSent()
                pipe = await self._pipe_for(node)
                if failures is not None and self.failures(node) != failures:
                    raise NotSent()
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

    async def _pipe_for(self, node: int) -> ProducePipe:
        pipe = self._pipes.get(node)
        if pipe is None or pipe.dead is not None:
            lock = self._locks.setdefault(node, trio.Lock())
            async with lock:
                pipe = self._pipes.get(node)
                if pipe is None or pipe.dead is not None:
                    if pipe is not None:
                        await self.cluster.drop_connection(node, self.channel)
                    try:
                        conn = await self.cluster.connection(node, self.channel)
                        version = self.cluster.version_for(conn, ApiKey.PRODUCE, min_version=3)
                    except BaseException:
                        self._connection_failed(node)
                        raise
                    pipe = self._pipes[node] = ProducePipe(
                        conn, version, on_dead=lambda: self._connection_failed(node))
                    self.nursery.start_soon(pipe.reader)
        return pipe

    def _connection_failed(self, node: int) -> None:
        self._failures[node] = self._failures.get(node, 0) + 1
