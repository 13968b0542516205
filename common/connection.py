"""One TCP connection to a Kafka-protocol server (broker or controller), trio-native.

Used by our clients and by the nodes' own links (followers, markers, the controller client).
Framing and correlation ids live in the sans-IO `wire.connection.ClientConnection`. Requests on
one connection are answered in order, so a lock serialises send+receive pairs; callers that want
concurrency open more connections.

Security is a value per connection (`common.security.ClientSecurity`): `connect()` wraps the
stream in TLS and logs in with SASL as it says, before ApiVersions.

Source address: a node may pin the local address its outgoing connections leave from
(`raftka.network.source.address`, set once at start by common/process.py). On loopback the
kernel otherwise picks 127.0.0.1 for every connection, so a test cluster whose nodes listen at
their own addresses (127.0.0.11, .12, ...) would still talk *from* one address, and a kernel
fault by address (chaos_tests/net) could not cut the links a node opens. It is per process, not
per connection, because it is a property of the node (every link it opens), like its node.id.
"""

from __future__ import annotations

import fcntl
import math
import struct
import termios
from typing import Callable

import trio

from common import locks, socket_read, socket_write
from common.security import PLAINTEXT, AuthenticationError, ClientSecurity, authenticate
from wire.connection import ClientConnection
from wire.messages import api_keys
from wire.messages.api_keys import ApiKey

RECV_BYTES = 256 * 1024


_source_address: str | None = None


def set_source_address(host: str | None) -> None:
    """Every connection this process opens from now on leaves from `host` (None: the kernel
    chooses)."""
    global _source_address
    _source_address = host or None


def source_address() -> str | None:
    return _source_address


async def open_tcp_stream(host: str, port: int) -> trio.SocketStream:
    """trio.open_tcp_stream from this node's source address, when one is set."""
    return await trio.open_tcp_stream(host, port, local_address=_source_address)


class ConnectionClosed(ConnectionError):
    """The peer closed the connection, or it could not be reached."""


class BrokerConnection:
    def __init__(self, host: str, port: int, client_id: str = "raftka", *,
                 security: ClientSecurity = PLAINTEXT):
        self.host = host
        self.port = port
        self.client_id = client_id
        self.security = security
        self._stream: trio.SocketStream | None = None
        self._conn = ClientConnection()
        self._lock = trio.Lock()
        self.api_versions: dict[int, tuple[int, int]] = {}
        # A request that fails leaves the connection unusable and closes its socket; when set,
        # the socket is handed to `retire` instead, which closes it when it sees fit
        # (partition_server/heartbeat_exchange.py: a heartbeat connection's close tells the
        # controller the broker died)
        self.retire: Callable[[object], None] | None = None

    async def connect(self, timeout_s: float = 5.0) -> None:
        with trio.fail_after(timeout_s):
            try:
                self._stream = await open_tcp_stream(self.host, self.port)
                await self._secure()
            except OSError as exc:
                raise ConnectionClosed(f"cannot reach {self.host}:{self.port}: {exc}") from None
        req_cls = api_keys.request_class(ApiKey.API_VERSIONS)
        resp = await self.request(req_cls(client_software_name="raftka",
                                          client_software_version="0.1"), version=3)
        self.api_versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}

    async def _secure(self) -> None:
        """TLS, then SASL, as `self.security` says (nothing for PLAINTEXT)."""
        security = self.security
        try:
            if security.uses_tls:
                stream = trio.SSLStream(self._stream, security.ssl_context,
                                        server_hostname=self.host)
                self._stream = stream
                await stream.do_handshake()
            if security.uses_sasl:
                await authenticate(self, security.sasl_mechanism, security.sasl_username,
                                   security.sasl_password)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise AuthenticationError(f"{self.host}:{self.port}: {exc}") from None

    def version_for(self, api_key: int, ours: tuple[int, int]) -> int:
        """Highest version both sides speak; ValueError if none."""
        theirs = self.api_versions.get(api_key)
        if theirs is None:
            raise ValueError(f"server does not support api key {api_key}")
        hi = min(ours[1], theirs[1])
        if hi < max(ours[0], theirs[0]):
            raise ValueError(f"no common version for api key {api_key}")
        return hi

    async def request(self, message, version: int, timeout_s: float = 30.0, expect_response=True):
        if self._stream is None:
            raise ConnectionClosed("not connected")
        # a request yields anyway while it waits for its answer (below), so only a contended
        # lock waits here
        await locks.acquire(self._lock)
        try:
            return await self._exchange(message, version, timeout_s, expect_response)
        finally:
            self._lock.release()

    async def _exchange(self, message, version: int, timeout_s: float, expect_response: bool):
        stream = self._stream          # aclose() may clear the attribute while we waited
        if stream is None:
            raise ConnectionClosed("not connected")
        data = self._conn.send_request(message, version, self.client_id,
                                       expect_response=expect_response)
        answered = False
        try:
            if timeout_s == math.inf:
                # the caller bounds the exchange: partition_server/replication/fetcher.py
                # moves one scope's deadline on per fetch instead of a scope per request
                got, yielded = await self._answer(stream, data, expect_response)
            else:
                # a bare cancel scope, not trio.fail_after: no generator context manager
                with trio.CancelScope(deadline=trio.current_time() + timeout_s) as scope:
                    got, yielded = await self._answer(stream, data, expect_response)
                if scope.cancelled_caught:
                    raise trio.TooSlowError
            answered = True
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            raise ConnectionClosed(str(exc)) from None
        finally:
            if not answered:
                # Timed out, cancelled or failed between sending and reading the answer: a
                # late answer (or half a frame) would be taken for the next request's. This
                # connection is done; the next request raises ConnectionClosed.
                if self._stream is stream:
                    self._stream = None
                if self.retire is not None:
                    self.retire(stream)
                else:
                    with trio.CancelScope(shield=True):
                        await trio.aclose_forcefully(stream)
        await socket_read.checkpoint_unless(yielded)        # one yield per request
        return got

    async def _answer(self, stream, data, expect_response: bool) -> tuple[object, bool]:
        """Send `data`, read its answer: (the answer's body, or None for a request without
        one; whether the task yielded meanwhile)."""
        await socket_write.send_all(stream, data)
        if not expect_response:
            return None, False
        yielded = False
        # Right after the send the answer is not there yet (the peer has still to be scheduled,
        # read, handle and write: hundreds of microseconds even on loopback), so the first read
        # waits for readability at once instead of trying the socket first: that try was a
        # failed recv (EAGAIN, and a BlockingIOError raised and caught) per exchange, one of
        # every two reads a broker makes under transactions (strace, issue #23). An answer that
        # did come already is reported by that wait just the same.
        fresh = True
        while True:
            got = self._conn.next_response()
            if got is not None:
                return got[1], yielded
            chunk, waited = await socket_read.receive_some(stream, RECV_BYTES, empty=fresh)
            fresh = False
            yielded = yielded or waited
            if not chunk:
                raise ConnectionClosed(f"{self.host}:{self.port} closed the connection")
            self._conn.receive_data(chunk)

    def all_acknowledged(self) -> bool:
        """Every byte written has been acknowledged by the peer's kernel (Linux SIOCOUTQ, the
        bytes sent but not yet acknowledged, is 0). A peer that is up but whose process is slow
        to read (a busy event loop, SIGSTOP) has the request in its socket and reads it at its
        next turn; a peer cut off (packets dropped) or gone has not acknowledged it. False
        when it cannot tell."""
        return self.unacknowledged() == 0

    def unacknowledged(self) -> int | None:
        """Bytes written and not yet acknowledged by the peer's kernel; None: cannot tell (no
        socket, or not Linux)."""
        stream = self._stream
        sock = getattr(stream, "socket", None) or getattr(
            getattr(stream, "transport_stream", None), "socket", None)      # under TLS
        if sock is None:
            return None
        try:
            queued = fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0")
        except (OSError, ValueError):
            return None
        return struct.unpack("i", queued)[0]

    async def aclose(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            await stream.aclose()
