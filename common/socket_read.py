"""Reading from a socket without trio's per-call wrapping, and saying whether the task waited.

`trio.SocketStream.receive_some` runs a conflict detector, an error-translating context manager
and an async context manager around a non-blocking `recv`, and when the bytes were already there
it ends with a checkpoint: one more pass of trio's loop (an `epoll_wait` and the bookkeeping of
every task run) before the caller goes on. On a replication link or a client connection every
request and answer is one such read, and a broker serving a follower's fetch reads twice per
exchange (bench/README.md, "Transactions": ~0.5 ms of CPU per fetch exchange, a trio echo ~0.05).

`receive_some` here reads the socket first; only when nothing is there does it wait for
readability (the wait is the yield). It returns whether it waited, so a caller that must yield
once per request (a connection whose bytes are always there would otherwise starve the other
tasks) yields only when the read did not: `checkpoint_unless(waited)`.

Errors are trio's: ClosedResourceError for a socket closed before or during the wait,
BrokenResourceError for a broken connection (a reset, say), as `trio.SocketStream` raises them.
Callers must not read one stream from two tasks at once (trio would detect that; this fast path
does not): the broker reads a connection from its reader task only, the client connection holds
its lock. TLS and other streams take trio's path (which always checkpoints: `waited` is True).
"""

from __future__ import annotations

import os

import trio


def read_now(stream, max_bytes: int) -> bytes | None:
    """What the socket holds now (b"" at end of stream), without waiting; None when it holds
    nothing, is closed or broken, or `stream` is not a plain socket stream (then the caller
    waits with `receive_some`, which raises trio's error for a closed or broken one)."""
    if type(stream) is not trio.SocketStream:
        return None
    try:
        return os.read(stream.socket.fileno(), max_bytes)
    except OSError:                     # BlockingIOError (nothing there) included
        return None


async def receive_some(stream, max_bytes: int, empty: bool = False) -> tuple[bytes, bool]:
    """(bytes read — b"" at end of stream —, whether the task yielded to wait for them).
    `empty`: `read_now` just found nothing, or nothing can be there yet (a request just
    sent), so wait before the first read."""
    if type(stream) is not trio.SocketStream:
        return await stream.receive_some(max_bytes), True
    sock = stream.socket
    waited = False
    if empty:
        await trio.lowlevel.wait_readable(sock)
        waited = True
    while True:
        try:
            return os.read(sock.fileno(), max_bytes), waited
        except (BlockingIOError, InterruptedError):
            pass
        except OSError as exc:          # the errors trio's SocketStream raises for these
            if sock.fileno() == -1:
                raise trio.ClosedResourceError("this socket was already closed") from None
            raise trio.BrokenResourceError(f"socket connection broken: {exc}") from exc
        await trio.lowlevel.wait_readable(sock)
        waited = True


async def checkpoint_unless(waited: bool) -> None:
    """Yield once if the task has not since the caller last did (`waited` says so)."""
    if not waited:
        await trio.lowlevel.checkpoint()
