"""Produce requests in flight together on one connection: the two-stage produce.

Kafka mutes a connection while one of its requests is in flight, so an acks=all Produce holds
the connection for a whole replication round trip. librdkafka sends one partition's batch per
ProduceRequest: spread over 1,000 partitions, each request carries a few records, and a
connection moved one round trip's worth of records at a time (2-4k records/s against 100k+
over 6 partitions, whose requests are large). Here, as Redpanda does, a Produce has two stages:

1. *ordered*: KIP-890 verification and the append to the logs. The connection reads the next
   request only once this stage is over, so appends happen in request order (idempotent
   sequences, transactional order: exactly as before);
2. *replication*: the acks=all wait for the high watermark. Up to MAX_IN_FLIGHT of these
   overlap, holding up to MAX_IN_FLIGHT_BYTES of requests (one request is always let in): 1,000
   requests of up to `socket.request.max.bytes` each could otherwise pin gigabytes.

MAX_IN_FLIGHT is 1,000 (it was 32): librdkafka sends one partition per request, so requests in
flight on one connection bound how many partitions one follower fetch can carry, and with the
leader's follower-fetch answers now gathering the appends under way (handlers/fetch_follower.py)
a replication cycle serves all of them. The byte bound is what limits memory. (An earlier
comparison of 500 vs 32 that found no difference ran both clusters on the same code:
bench/produce_partitions.py started every tree's processes from its own working directory, which
`python -m` puts ahead of PYTHONPATH; fixed.)

Answers still leave in request order (the `ServerConnection` enforces it). Any other request
first waits until every answer before it is sent, then runs alone, as before: only Produce after
Produce overlaps.

The handler tells the end of its first stage with `first_stage_done()` (a context variable set
for the task that runs it); a handler that never calls it simply runs to completion first.
"""

from __future__ import annotations

import collections
import contextvars
from typing import Awaitable, Callable

import trio

MAX_IN_FLIGHT = 1000                    # requests per connection
MAX_IN_FLIGHT_BYTES = 32 * 1024 * 1024  # their sizes (the request frames) per connection

_first_stage: contextvars.ContextVar[trio.Event | None] = \
    contextvars.ContextVar("raftka_first_stage", default=None)


def first_stage_done() -> None:
    """The running request's order-sensitive part is over: the connection may read on."""
    event = _first_stage.get()
    if event is not None:
        event.set()


class _Entry:
    __slots__ = ("request", "result", "done", "failure", "size")

    def __init__(self, request):
        self.request = request
        self.size = getattr(request, "size", 0) or 0
        self.result = None
        self.done = False
        self.failure: BaseException | None = None


class ResponsePipeline:
    """Runs pipelined requests in `nursery`, sends their answers in order.

    `run(request)` returns the answer (None for none) or raises; `frame(request, answer)` turns
    it into wire chunks (none for no answer) and `write(chunks)` sends them: the answers that
    are ready together leave in one write. A failure of any ends the connection: `failure`
    holds it and the nursery is cancelled, for the reader to re-raise."""

    def __init__(self, nursery: trio.Nursery, run: Callable[[object], Awaitable[object]],
                 frame: Callable[[object, object], list],
                 write: Callable[[list], Awaitable[None]]):
        self._nursery = nursery
        self._run = run
        self._frame = frame
        self._write = write
        self._entries: collections.deque[_Entry] = collections.deque()
        self._changed = trio.Event()
        self._writing = False
        self._bytes = 0                         # sizes of the entries not yet answered
        self.failure: BaseException | None = None

    def _signal(self) -> None:
        event, self._changed = self._changed, trio.Event()
        event.set()

    async def submit(self, request) -> None:
        """Start `request`; return once its first stage is over (or it finished)."""
        entry = _Entry(request)
        while self._entries and (len(self._entries) >= MAX_IN_FLIGHT
                                 or self._bytes + entry.size > MAX_IN_FLIGHT_BYTES):
            await self._changed.wait()
        self._entries.append(entry)
        self._bytes += entry.size
        first = trio.Event()
        token = _first_stage.set(first)
        try:
            self._nursery.start_soon(self._execute, entry, first)   # copies the context
        finally:
            _first_stage.reset(token)
        await first.wait()

    async def _execute(self, entry: _Entry, first: trio.Event) -> None:
        try:
            entry.result = await self._run(entry.request)
        except Exception as exc:  # noqa: BLE001 - handed to the reader, which closes
            entry.failure = exc
        finally:
            entry.done = True
            first.set()
            self._signal()

    async def send_loop(self) -> None:
        """Send finished answers in request order, as the head of the line finishes."""
        try:
            while True:
                if not (self._entries and self._entries[0].done):
                    await self._changed.wait()
                    continue
                chunks: list = []
                failure = None
                self._writing = True        # popped but not on the wire yet: drain() waits
                while self._entries and self._entries[0].done:
                    entry = self._entries.popleft()
                    self._bytes -= entry.size
                    if entry.failure is not None:
                        failure = entry.failure     # the answers before it still go out
                        break
                    chunks += self._frame(entry.request, entry.result)
                if chunks:
                    await self._write(chunks)
                if failure is not None:
                    raise failure
                self._writing = False
                self._signal()
        except Exception as exc:  # noqa: BLE001 - the reader re-raises it
            self.failure = exc
            self._nursery.cancel_scope.cancel()

    async def drain(self) -> None:
        """Wait until every submitted request has been answered."""
        while (self._entries or self._writing) and self.failure is None:
            await self._changed.wait()
