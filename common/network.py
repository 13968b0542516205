"""The broker's (and controller's) socket edge: accept connections, TLS, SASL, frame requests,
write responses.

Each connection is served one request at a time, in order — like Kafka, which mutes a channel
while a request is in flight — except that Produce requests after one another overlap their
acks=all replication wait (appended in order, answered in order: common/pipeline.py). Clients
may pipeline (send several requests before reading); the bytes wait in the socket buffer and the
sans-IO `ServerConnection` until their turn. A peer's garbage (`DecodeError`) closes that one
connection and nothing else.

Security per listener (`ListenerSecurity`), as Kafka's SocketServer + SaslServerAuthenticator:

- SSL / SASL_SSL: the TLS handshake comes first (bounded in time); with `ssl.client.auth` a
  client certificate's subject is the principal on SSL listeners.
- SASL_PLAINTEXT / SASL_SSL, per connection:
  UNAUTHENTICATED ──SaslHandshake v1──▶ HANDSHAKEN ──SaslAuthenticate…(ok)──▶ AUTHENTICATED
  UNAUTHENTICATED ──SaslHandshake v0──▶ LEGACY (raw size-prefixed SASL tokens, no Kafka
  headers, as pre-1.0 clients speak) ──(ok)──▶ AUTHENTICATED.
  Before authentication only ApiVersions and SaslHandshake/SaslAuthenticate are accepted,
  frames are limited to `sasl.server.max.receive.size` bytes, and the whole exchange must finish
  within the handshake timeout; anything else closes the connection. A failed SaslAuthenticate
  is answered with SASL_AUTHENTICATION_FAILED and the connection closed.
- Re-authentication (KIP-368, `connections.max.reauth.ms`): SaslAuthenticate v1+ tells the client
  its session lifetime; the client re-runs the exchange on the same connection, and must stay the
  same principal. A request after the session expired closes the connection.
- `max.connections` / `max.connections.per.ip`: a connection beyond either limit is closed at
  once (`ConnectionLimiter`).

Fetch responses may carry `FileRange` chunks (`position`, `size`, and `open_file()` giving an
object whose `fd` stays open while it is held: segment files may be closed by the broker's
open-file bound between the read and the send) which are written with `os.sendfile` straight
from the segment file on plain TCP (zero copy); through TLS they are read and encrypted in
slices.
"""

from __future__ import annotations

import dataclasses
import errno
import logging
import os
import ssl
import time
from typing import Awaitable, Callable

import trio

from common import sasl as sasl_mod
from common import socket_read, socket_write
from common.error_response import error_response
from common.pipeline import ResponsePipeline
from common.principal import ANONYMOUS
from common.tls import peer_principal
from wire import framing
from wire.connection import ServerConnection, UnsupportedRequest, unsupported_api_versions_response
from wire.errors import DecodeError, ErrorCode
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import RESPONSES

log = logging.getLogger(__name__)

RECV_BYTES = 256 * 1024
SENDFILE_TLS_SLICE = 256 * 1024
SMALL_FILE_RANGE = 64 * 1024         # a file range up to this is copied into the write around it
PRODUCE, API_VERSIONS, FETCH = ApiKey.PRODUCE, ApiKey.API_VERSIONS, ApiKey.FETCH
SASL_HANDSHAKE, SASL_AUTHENTICATE = ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE
SASL_APIS = {SASL_HANDSHAKE: (0, 1), SASL_AUTHENTICATE: (0, 2)}

# handler(conn_ctx, request) -> response message, a list of wire chunks, or None (no response)
Dispatch = Callable[["ClientContext", object], Awaitable[object]]


class ClientContext:
    """What a handler may know about the connection a request came from."""

    def __init__(self, peer: str, listener: str, host: str = "", principal: str = ANONYMOUS):
        self.peer = peer
        self.listener = listener
        self.host = host                      # the peer's IP, matched against ACL hosts
        self.principal = principal            # "User:name"; User:ANONYMOUS when unauthenticated
        self.mechanism: str | None = None
        self.on_close: list[Callable[[], None]] = []     # run once the connection is gone
        self.mute_s = 0.0     # quota throttle (KIP-219): read nothing more from this client for so long


class ConnectionLimiter:
    """`max.connections` and `max.connections.per.ip` for one process (all listeners)."""

    def __init__(self, max_connections: int = 2**31 - 1, max_per_ip: int = 2**31 - 1,
                 exempt_ips=()):
        self.max_connections, self.max_per_ip = max_connections, max_per_ip
        self.exempt_ips = set(exempt_ips)
        self.total = 0
        self.per_ip: dict[str, int] = {}
        self.refused = 0

    def try_acquire(self, ip: str) -> bool:
        if ip not in self.exempt_ips and (self.total >= self.max_connections
                                          or self.per_ip.get(ip, 0) >= self.max_per_ip):
            self.refused += 1
            return False
        self.total += 1
        self.per_ip[ip] = self.per_ip.get(ip, 0) + 1
        return True

    def release(self, ip: str) -> None:
        self.total -= 1
        left = self.per_ip.get(ip, 1) - 1
        if left:
            self.per_ip[ip] = left
        else:
            self.per_ip.pop(ip, None)


@dataclasses.dataclass
class ListenerSecurity:
    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    mechanisms: tuple = sasl_mod.SUPPORTED_MECHANISMS
    # (user, scram mechanism code) -> ScramCredential | None, read at each authentication so
    # credentials added or removed through metadata apply to the next login
    credentials: Callable = lambda user, mechanism: None
    reauth_ms: int = 0                          # connections.max.reauth.ms (0: never)
    max_unauthenticated_bytes: int = 524288     # sasl.server.max.receive.size
    handshake_timeout_s: float = 10.0
    limiter: ConnectionLimiter | None = None
    # on a controller listener only these principals may do anything after authenticating
    allowed_principals: frozenset | None = None

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")


PLAINTEXT = ListenerSecurity()


class _Closing(Exception):
    """Close this connection (after anything already sent)."""


async def _send_chunks(stream, chunks: list) -> None:
    """Write framed chunks: bytes, and file ranges of segment data. A small range is read and
    sent with the bytes around it, one write for the lot: a follower's fetch answer names
    hundreds of partitions with a batch or two each, and a sendfile per range (plus an epoll
    wait each) cost more than the copy. Large ranges go out with sendfile (zero copy)."""
    pending: list = []
    for chunk in chunks:
        if isinstance(chunk, (bytes, bytearray, memoryview)):
            pending.append(chunk)
            continue
        if chunk.size <= SMALL_FILE_RANGE:
            pending.append(_read_range(chunk))
            continue
        if pending:
            await socket_write.send_all(stream, b"".join(pending))
            pending = []
        if isinstance(stream, trio.SocketStream):
            await _sendfile(stream, chunk)
        else:
            await _send_file_range_copy(stream, chunk)
    if pending:
        await socket_write.send_all(stream, b"".join(pending))


def _read_range(file_range) -> bytes:
    f = file_range.open_file()
    data = os.pread(f.fd, file_range.size, file_range.position)
    if len(data) != file_range.size:
        raise ConnectionError("segment shrank during send")
    return data


async def _send_file_range_copy(stream, file_range) -> None:
    """TLS cannot use sendfile: read the range in slices and send them through the stream."""
    offset, remaining = file_range.position, file_range.size
    f = file_range.open_file()          # held across the awaits: the fd stays open
    while remaining > 0:
        data = os.pread(f.fd, min(remaining, SENDFILE_TLS_SLICE), offset)
        if not data:
            raise ConnectionError("segment shrank during send")
        await stream.send_all(data)
        offset += len(data)
        remaining -= len(data)


async def _sendfile(stream: trio.SocketStream, file_range) -> None:
    """Write `size` bytes of a file at `position` to the socket with os.sendfile."""
    sock = stream.socket
    offset, remaining = file_range.position, file_range.size
    f = file_range.open_file()          # held across the awaits: the fd stays open
    fd = f.fd
    while remaining > 0:
        try:        # try first: the socket buffer usually has room, and an epoll wait costs
            sent = os.sendfile(sock.fileno(), fd, offset, remaining)
        except BlockingIOError:
            await trio.lowlevel.wait_writable(sock)
            continue
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK):
                await trio.lowlevel.wait_writable(sock)
                continue
            raise
        if sent == 0:
            # The file is shorter than promised (truncated underneath us): the framing is now
            # broken for this client, so the only honest move is to drop the connection.
            raise ConnectionError("segment shrank during sendfile")
        offset += sent
        remaining -= sent


class _Authenticator:
    """The SASL part of one connection (the states in the module docstring)."""

    def __init__(self, security: ListenerSecurity, ctx: ClientContext):
        self.security, self.ctx = security, ctx
        self.authenticated = not security.uses_sasl
        self.server = None              # the mechanism's state machine during an exchange
        self.legacy = False             # SaslHandshake v0: raw tokens follow
        self.session_expiry: float | None = None

    @property
    def in_session(self) -> bool:
        return self.authenticated and (self.session_expiry is None
                                       or time.monotonic() < self.session_expiry)

    def handshake(self, request):
        cls = RESPONSES[SASL_HANDSHAKE]
        mechanisms = list(self.security.mechanisms)
        if not self.security.uses_sasl or self.server is not None:
            return cls(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=mechanisms), True
        mechanism = request.body.mechanism
        server = (sasl_mod.new_server(mechanism, self.security.credentials)
                  if mechanism in mechanisms else None)
        if server is None:
            return cls(error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=mechanisms), True
        self.server = server
        self.legacy = request.api_version == 0
        return cls(error_code=0, mechanisms=mechanisms), False

    def authenticate(self, token: bytes, api_version: int = 0):
        """One SASL token → (response message or raw bytes, close afterwards?)."""
        cls = RESPONSES[SASL_AUTHENTICATE]
        if self.server is None:
            return cls(error_code=ErrorCode.ILLEGAL_SASL_STATE,
                       error_message="SaslAuthenticate before SaslHandshake"), True
        try:
            if len(token) > sasl_mod.MAX_TOKEN_BYTES:
                raise sasl_mod.SaslAuthenticationError("SASL token too large")
            challenge = self.server.evaluate(token)
        except sasl_mod.SaslAuthenticationError as exc:
            log.info("authentication of %s with %s failed: %s", self.ctx.peer,
                     self.server.mechanism_name, exc)
            self.server = None
            return cls(error_code=ErrorCode.SASL_AUTHENTICATION_FAILED, error_message=str(exc)), True
        lifetime = 0
        if self.server.complete:
            principal = "User:" + self.server.principal
            if self.authenticated and principal != self.ctx.principal:
                self.server = None
                return cls(error_code=ErrorCode.SASL_AUTHENTICATION_FAILED,
                           error_message="re-authentication must keep the same principal"), True
            allowed = self.security.allowed_principals
            if allowed is not None and principal not in allowed:
                self.server = None
                return cls(error_code=ErrorCode.SASL_AUTHENTICATION_FAILED,
                           error_message="principal not allowed on this listener"), True
            self.ctx.principal, self.ctx.mechanism = principal, self.server.mechanism_name
            self.authenticated = True
            self.server = None
            if self.security.reauth_ms > 0:
                lifetime = self.security.reauth_ms
                self.session_expiry = time.monotonic() + lifetime / 1000
        if self.legacy:
            return challenge, False
        return cls(error_code=0, auth_bytes=challenge, session_lifetime_ms=lifetime), False


def _pop_raw_frame(conn: ServerConnection, max_bytes: int) -> bytes | None:
    """Legacy SASL (SaslHandshake v0): a size-prefixed token with no Kafka header. It sits in the
    sans-IO connection's receive buffer, which otherwise only yields Kafka requests."""
    buf = conn._buf      # noqa: SLF001 - the one place that reads frames that are not requests
    size = framing.frame_size(buf, max_bytes)
    if size is None or len(buf) < 4 + size:
        return None
    token = bytes(buf[4:4 + size])
    del buf[:4 + size]
    return token


class _IdleWatch:
    """When the read loop began waiting for a request (trio's clock), None while it is not."""

    __slots__ = ("waiting_since",)

    def __init__(self):
        self.waiting_since: float | None = None


async def _idle_watch(watch: _IdleWatch, read_loop: trio.CancelScope, timeout_s: float) -> None:
    """connections.max.idle.ms: cancels the read loop once it has waited `timeout_s` for a
    request. One timer per connection, moved at most twice per timeout, where a cancel scope
    around every wait cost ~3.5 % of a busy broker's CPU (bench/README.md, "Message codecs in
    C"). A wait that starts after this task's check ends no earlier than its own deadline."""
    while True:
        since, now = watch.waiting_since, trio.current_time()
        if since is not None and now - since >= timeout_s:
            read_loop.cancel()
            return
        await trio.sleep_until((now if since is None else since) + timeout_s)


async def _receive(stream, conn: ServerConnection, idle_timeout_s: float,
                   watch: _IdleWatch | None = None, expect_none: bool = False) -> tuple[bool, bool]:
    """(whether bytes came — False: the peer closed or stayed idle too long —, whether the task
    yielded meanwhile). Idleness: `watch` for an _idle_watch, or a cancel scope of
    `idle_timeout_s` (before authentication, whose deadline is shorter).

    `expect_none`: wait for readability without trying the socket first. Set just after a Fetch
    was answered: the client's next request is rarely there yet, as a follower or consumer
    sends its next Fetch once it has read this answer. Trying first was a failed recv (EAGAIN)
    per fetch exchange (strace under transactions, issue #23); a request that did come is
    reported by the wait all the same."""
    data, waited = None if expect_none else socket_read.read_now(stream, RECV_BYTES), False
    if data is None:
        data, waited = b"", True
        if watch is not None:
            watch.waiting_since = trio.current_time()
            try:
                data, _ = await socket_read.receive_some(stream, RECV_BYTES, empty=True)
            finally:
                watch.waiting_since = None
        else:
            with trio.move_on_after(idle_timeout_s):       # connections.max.idle.ms
                data, _ = await socket_read.receive_some(stream, RECV_BYTES, empty=True)
    if not data:
        return False, waited
    conn.receive_data(data)
    return True, waited


async def serve_connection(stream, dispatch: Dispatch, listener: str,
                           max_frame_bytes: int, supported: dict,
                           idle_timeout_s: float = 600.0,
                           security: ListenerSecurity = PLAINTEXT) -> None:
    sock = getattr(stream, "socket", None)
    try:
        address = sock.getpeername()[:2]
        peer, host = "%s:%d" % address, address[0]
    except (OSError, AttributeError):
        peer, host = "?", "?"
    ctx = ClientContext(peer, listener, host)
    limiter = security.limiter
    if limiter is not None and not limiter.try_acquire(host):
        log.info("refusing connection from %s: connection limit reached", peer)
        with trio.CancelScope(shield=True):
            await trio.aclose_forcefully(stream)
        return
    stats = getattr(dispatch, "request_stats", None)       # common/request_metrics.py
    if stats is not None:
        stats.connection_opened(listener)
    try:
        if security.ssl_context is not None:
            stream = trio.SSLStream(stream, security.ssl_context, server_side=True)
            with trio.fail_after(security.handshake_timeout_s):
                await stream.do_handshake()
            if not security.uses_sasl:
                ctx.principal = peer_principal(stream) or ANONYMOUS
        await _serve(stream, ctx, dispatch, max_frame_bytes, supported, idle_timeout_s, security)
    except DecodeError as exc:
        log.info("closing connection from %s: %s", peer, exc)
    except (trio.TooSlowError, _Closing) as exc:
        log.info("closing connection from %s: %s", peer, exc or "too slow to authenticate")
    except (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError, ssl.SSLError,
            OSError) as exc:
        log.debug("connection from %s ended: %s", peer, exc)
    finally:
        with trio.CancelScope(shield=True):
            await trio.aclose_forcefully(stream)
        if limiter is not None:
            limiter.release(host)
        if stats is not None:
            stats.connection_closed(listener)
        for callback in ctx.on_close:
            try:
                callback()
            except Exception:                     # a hook must not break the listener
                log.exception("connection close hook failed")


async def _serve(stream, ctx: ClientContext, dispatch: Dispatch, max_frame_bytes: int,
                 supported: dict, idle_timeout_s: float, security: ListenerSecurity) -> None:
    if security.uses_sasl:
        supported = {**supported, **SASL_APIS}
    conn = ServerConnection(supported, max_frame_bytes=max_frame_bytes)

    stats = getattr(dispatch, "request_stats", None)
    framed: list[int] = []              # api keys of the answers in the next write (send time)

    def frame(request, result) -> list:
        if result is None:
            conn.no_response(request)
            return []
        framed.append(request.api_key)
        return conn.send_response_chunks(request, result)

    async def write(chunks) -> None:
        started = time.perf_counter()
        await _send_chunks(stream, chunks)
        if stats is not None:
            for api_key in framed:
                stats.record_send(api_key, time.perf_counter() - started)
        framed.clear()

    failure = None
    watch, read_loop = _IdleWatch(), trio.CancelScope()
    async with trio.open_nursery() as nursery:
        pipeline = ResponsePipeline(nursery, lambda req: _dispatch_guarded(ctx, req, dispatch),
                                    frame, write)
        nursery.start_soon(pipeline.send_loop)
        nursery.start_soon(_idle_watch, watch, read_loop, idle_timeout_s)
        try:
            with read_loop:                         # cancelled: idle for too long
                await _read_requests(stream, ctx, dispatch, conn, pipeline, idle_timeout_s,
                                     security, max_frame_bytes, watch)
        except Exception as exc:  # noqa: BLE001 - raised below, outside the nursery, as itself
            failure = exc
        nursery.cancel_scope.cancel()
    if failure is not None:
        raise failure
    if pipeline.failure is not None:
        raise pipeline.failure


async def _dispatch_guarded(ctx: ClientContext, request, dispatch: Dispatch):
    """The handler's answer; a handler bug fails this request only (no internals in the
    answer). A Produce with acks=0 expects no answer at all, so Kafka closes its connection
    instead: _Closing."""
    try:
        return await dispatch(ctx, request)
    except (trio.Cancelled, KeyboardInterrupt):
        raise
    except Exception:  # noqa: BLE001
        silent = request.api_key == PRODUCE and request.body.acks == 0
        log.exception("request %s v%d from %s failed; %s", request.name, request.api_version,
                      ctx.peer, "closing the connection" if silent else
                      "answered UNKNOWN_SERVER_ERROR")
        if silent:
            raise _Closing("a Produce with acks=0 failed") from None
        return error_response(RESPONSES[request.api_key], request.body, request.api_version)


async def _read_requests(stream, ctx: ClientContext, dispatch: Dispatch, conn: ServerConnection,
                         pipeline: ResponsePipeline, idle_timeout_s: float,
                         security: ListenerSecurity, max_frame_bytes: int,
                         watch: _IdleWatch) -> None:
    auth = _Authenticator(security, ctx)
    # until the first authentication completes: small frames, and a deadline for the exchange
    deadline = trio.current_time() + security.handshake_timeout_s
    received = time.perf_counter()
    yielded = True          # the task yielded since it last took a request
    expect_none = False     # a Fetch was just answered: see _receive
    while True:
        if ctx.mute_s > 0:                 # muted: the client's next request waits in the socket
            mute_s, ctx.mute_s = ctx.mute_s, 0.0
            await trio.sleep(mute_s)
        unauthenticated = not auth.authenticated
        conn.max_frame_bytes = security.max_unauthenticated_bytes if unauthenticated \
            else max_frame_bytes
        if unauthenticated and trio.current_time() > deadline:
            raise _Closing("authentication did not finish in time")
        if auth.legacy and auth.server is not None:
            token = _pop_raw_frame(conn, security.max_unauthenticated_bytes)
            if token is None:
                got, _ = await _receive(stream, conn, idle_timeout_s)
                if not got:
                    return
                continue
            answer, close = auth.authenticate(token)
            if close:
                raise _Closing("legacy SASL authentication failed")
            await stream.send_all(framing.size_prefix(len(answer)) + answer)
            continue
        request = conn.next_request()
        if request is None:
            wait_s = idle_timeout_s if not unauthenticated else \
                max(0.0, min(idle_timeout_s, deadline - trio.current_time()))
            got, waited = await _receive(stream, conn, wait_s,
                                         None if unauthenticated else watch, expect_none)
            expect_none = False
            if not got:
                if unauthenticated and trio.current_time() > deadline:
                    raise _Closing("authentication did not finish in time")
                return
            received = time.perf_counter()
            yielded = yielded or waited
            continue
        # Yield once per request: neither a read that found its bytes there (socket_read.py)
        # nor a send the socket took at once (socket_write.py) yields, and a client whose
        # requests are always there would otherwise hold the loop. A request read after a
        # wait (a follower's next fetch, usually) has yielded already.
        await socket_read.checkpoint_unless(yielded)
        yielded = False
        request.received_at = received          # the queue time of request_metrics.py
        if request.api_key == PRODUCE and auth.in_session \
                and not isinstance(request, UnsupportedRequest):
            await pipeline.submit(request)      # two-stage produce: common/pipeline.py
            continue
        await pipeline.drain()                  # every earlier answer goes out first
        if isinstance(request, UnsupportedRequest):
            if request.api_key != API_VERSIONS:
                # Kafka closes on an API version it cannot parse; only ApiVersions
                # gets an answer (v0, UNSUPPORTED_VERSION, the full list).
                log.info("closing %s: unsupported version %d of api %d", ctx.peer,
                         request.api_version, request.api_key)
                return
            await stream.send_all(unsupported_api_versions_response(conn, request))
            continue
        await _answer_alone(stream, ctx, dispatch, conn, request, auth, security)
        expect_none = request.api_key == FETCH


async def _answer_alone(stream, ctx: ClientContext, dispatch: Dispatch, conn: ServerConnection,
                        request, auth: _Authenticator, security: ListenerSecurity) -> None:
    """A request other than a pipelined Produce: SASL, or dispatched; answered at once."""
    close, stats = False, None
    if request.api_key == SASL_HANDSHAKE and security.uses_sasl:
        result, close = auth.handshake(request)
    elif request.api_key == SASL_AUTHENTICATE and security.uses_sasl:
        result, close = auth.authenticate(bytes(request.body.auth_bytes), request.api_version)
    elif request.api_key != API_VERSIONS and not auth.in_session:
        raise _Closing(f"{request.name} before authentication" if not auth.authenticated
                       else "session expired (connections.max.reauth.ms)")
    else:
        result = await _dispatch_guarded(ctx, request, dispatch)
        if request.api_key == API_VERSIONS and security.uses_sasl and result is not None:
            _advertise_sasl(result)
        stats = getattr(dispatch, "request_stats", None)      # dispatched ones are measured
    if result is None:
        conn.no_response(request)
    else:
        started = time.perf_counter()
        await _send_chunks(stream, conn.send_response_chunks(request, result))
        if stats is not None:
            stats.record_send(request.api_key, time.perf_counter() - started)
    if close:
        raise _Closing("SASL exchange failed")


def _advertise_sasl(response) -> None:
    keys = getattr(response, "api_keys", None)
    if keys is None:
        return
    cls = type(response)
    have = {k.api_key for k in keys}
    for key, (lo, hi) in SASL_APIS.items():
        if key not in have:
            keys.append(cls.ApiVersion(api_key=key, min_version=lo, max_version=hi))
    keys.sort(key=lambda k: k.api_key)


async def serve_listener(host: str, port: int, dispatch: Dispatch, listener: str,
                         max_frame_bytes: int, supported: dict, *, idle_timeout_s: float = 600.0,
                         security: ListenerSecurity = PLAINTEXT,
                         task_status=trio.TASK_STATUS_IGNORED) -> None:
    listeners = await trio.open_tcp_listeners(port, host=host)

    async def handler(stream: trio.SocketStream) -> None:
        await serve_connection(stream, dispatch, listener, max_frame_bytes, supported,
                               idle_timeout_s, security)

    task_status.started(listeners)
    await trio.serve_listeners(handler, listeners)
