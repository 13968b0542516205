"""The broker's socket edge: accept connections, frame requests, write responses.

Each connection is served one request at a time, in order — like Kafka, which mutes a channel
while a request is in flight. Clients may still pipeline (send several requests before reading);
the bytes wait in the socket buffer and the sans-IO `ServerConnection` until their turn. A peer's
garbage (`DecodeError`) closes that one connection and nothing else.

Fetch responses may carry `FileRange` chunks (any object with `fd`, `position` and `size`) which
are written with `os.sendfile` straight from the segment file: zero copy on loopback and TCP.
"""

from __future__ import annotations

import errno
import logging
import os
from typing import Awaitable, Callable

import trio

from wire.connection import ServerConnection, UnsupportedRequest, unsupported_api_versions_response
from wire.errors import DecodeError

log = logging.getLogger(__name__)

RECV_BYTES = 256 * 1024

# handler(conn_ctx, request) -> response message, a list of wire chunks, or None (no response)
Dispatch = Callable[["ClientContext", object], Awaitable[object]]


class ClientContext:
    """What a handler may know about the connection a request came from."""

    def __init__(self, peer: str, listener: str):
        self.peer = peer
        self.listener = listener


async def _send_chunks(stream: trio.SocketStream, chunks: list) -> None:
    pending: list[bytes] = []
    for chunk in chunks:
        if isinstance(chunk, (bytes, bytearray, memoryview)):
            pending.append(bytes(chunk))
            continue
        if pending:
            await stream.send_all(b"".join(pending))
            pending = []
        await _sendfile(stream, chunk)
    if pending:
        await stream.send_all(b"".join(pending))


async def _sendfile(stream: trio.SocketStream, file_range) -> None:
    """Write `size` bytes of a file at `position` to the socket with os.sendfile."""
    sock = stream.socket
    offset, remaining = file_range.position, file_range.size
    fd = file_range.fd
    while remaining > 0:
        await trio.lowlevel.wait_writable(sock)
        try:
            sent = os.sendfile(sock.fileno(), fd, offset, remaining)
        except BlockingIOError:
            continue
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK):
                continue
            raise
        if sent == 0:
            # The file is shorter than promised (truncated underneath us): the framing is now
            # broken for this client, so the only honest move is to drop the connection.
            raise ConnectionError("segment shrank during sendfile")
        offset += sent
        remaining -= sent


async def serve_connection(stream: trio.SocketStream, dispatch: Dispatch, listener: str,
                           max_frame_bytes: int, supported: dict,
                           idle_timeout_s: float = 600.0) -> None:
    try:
        peer = "%s:%d" % stream.socket.getpeername()[:2]
    except OSError:
        peer = "?"
    ctx = ClientContext(peer, listener)
    conn = ServerConnection(supported, max_frame_bytes=max_frame_bytes)
    try:
        async with stream:
            while True:
                request = conn.next_request()
                if request is None:
                    data = b""
                    with trio.move_on_after(idle_timeout_s):       # connections.max.idle.ms
                        data = await stream.receive_some(RECV_BYTES)
                    if not data:
                        return
                    conn.receive_data(data)
                    continue
                if isinstance(request, UnsupportedRequest):
                    if request.api_key != 18:
                        # Kafka closes on an API version it cannot parse; only ApiVersions
                        # gets an answer (v0, UNSUPPORTED_VERSION, the full list).
                        log.info("closing %s: unsupported version %d of api %d", peer,
                                 request.api_version, request.api_key)
                        return
                    await stream.send_all(unsupported_api_versions_response(conn, request))
                    continue
                try:
                    result = await dispatch(ctx, request)
                    if result is None:
                        conn.no_response(request)
                        continue
                    chunks = conn.send_response_chunks(request, result)
                except (trio.Cancelled, KeyboardInterrupt):
                    raise
                except Exception:  # noqa: BLE001 - a handler bug costs this connection only
                    log.exception("request %s v%d from %s failed; closing the connection",
                                  request.name, request.api_version, peer)
                    return
                await _send_chunks(stream, chunks)
    except DecodeError as exc:
        log.info("closing connection from %s: %s", peer, exc)
    except (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError) as exc:
        log.debug("connection from %s ended: %s", peer, exc)


async def serve_listener(host: str, port: int, dispatch: Dispatch, listener: str,
                         max_frame_bytes: int, supported: dict, *, idle_timeout_s: float = 600.0,
                         task_status=trio.TASK_STATUS_IGNORED) -> None:
    listeners = await trio.open_tcp_listeners(port, host=host)

    async def handler(stream: trio.SocketStream) -> None:
        await serve_connection(stream, dispatch, listener, max_frame_bytes, supported,
                               idle_timeout_s)

    task_status.started(listeners)
    await trio.serve_listeners(handler, listeners)
