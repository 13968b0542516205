"""The Raft port's edge: pysyncobj's TCP transport, made to say when it drops a peer and to
bound what a stranger costs before authenticating.

pysyncobj frames each message as a 4-byte length and a Fernet token (AES-CBC + HMAC-SHA256 with a
key derived from the shared password) holding a zlib-compressed pickle. A connection checks each
token's HMAC (`extract_timestamp`) before decrypting, and only then unpickles; any failure closes
the connection inside a bare `except` that says nothing. So a peer without the password, or with
a wrong one, or sending garbage, gets nothing decoded, but an operator whose controllers were
given different passwords would only see a quorum that never forms. This transport wraps each
connection's encryptor so a failed check is logged (rate-limited per peer: a port scanner must
not flood the log) and then dropped exactly as before; nothing else changes.

It also bounds what a stranger costs before authenticating, which pysyncobj does not: a
connection is only timed out when it has traffic, so idle ones pile up (and an accept failing
with EMFILE makes pysyncobj's server stop listening for good), and a length prefix of 2 GiB makes
it buffer whatever follows. Here an incoming connection that has not identified itself within
PRE_AUTH_TIMEOUT_S, that buffers more than PRE_AUTH_MAX_BYTES before its first message decoded,
or that arrives while MAX_PRE_AUTH_PER_HOST others from its host (MAX_PRE_AUTH in all) are still
unidentified, is closed (and logged). What this cannot do: a stranger who reaches the port can
still keep *new* Raft connections from its own host's slots out and cost the controller CPU, so
the port belongs behind a firewall that only lets the controllers in (nothing is decoded either way).

Without a password pysyncobj unpickles whatever arrives: metadata_quorum/config.py never lets a
controller start without one.

Outgoing Raft connections leave from the host of this node's own Raft address
(`bind_outgoing_raft`). pysyncobj lets the kernel choose, which on loopback is 127.0.0.1 for
every node: controllers at their own addresses (127.0.0.11, .12, ...) would then be told apart
only by ephemeral ports, and a kernel fault that isolates one address would miss half its links.
pysyncobj creates the socket inside `TcpConnection.connect` with no hook, so the `socket` module
that module sees is replaced by one whose `socket()` binds first (one Raft node per process).
"""

from __future__ import annotations

import logging
import threading
import time

import socket as _socket
import types

from cryptography.fernet import InvalidToken
from pysyncobj import tcp_connection
from pysyncobj.transport import TCPTransport

log = logging.getLogger(__name__)

LOG_EVERY_S = 10.0          # per peer host and reason: one line, then a count of drops since
# a controller's first message (a 32-byte key) is a ~200-byte token and its second its address;
# both arrive within milliseconds of connecting
PRE_AUTH_TIMEOUT_S = 10.0
PRE_AUTH_MAX_BYTES = 64 * 1024
MAX_PRE_AUTH = 64
IP_BIND_ADDRESS_NO_PORT = getattr(_socket, "IP_BIND_ADDRESS_NO_PORT", 24)   # Linux 4.2+
MAX_PRE_AUTH_PER_HOST = 8     # controllers have one each at most, for milliseconds


class DropLog:
    """Rate-limited warnings about dropped Raft connections, one stream per peer host and reason.

    Keyed by reason too: a burst of one kind (a flood over the pre-auth cap) must not hide
    the first line of another (connections timing out idle), which says something else about
    the peer; a handful of reasons keeps it to a few lines per host per interval."""

    def __init__(self, every_s: float = LOG_EVERY_S, clock=time.monotonic):
        self._every_s, self._clock = every_s, clock
        self._lock = threading.Lock()
        self._last: dict[str, float] = {}
        self._quiet: dict[str, int] = {}     # drops since the last line, per host
        self.dropped = 0

    def dropped_from(self, peer: str, why: str) -> None:
        host = peer.rpartition(":")[0] or peer
        key = (host, why)          # every `why` is a fixed sentence: a handful of streams
        with self._lock:
            self.dropped += 1
            now = self._clock()
            last = self._last.get(key)
            if last is not None and now - last < self._every_s:
                self._quiet[key] = self._quiet.get(key, 0) + 1
                return
            self._last[key] = now
            since = self._quiet.pop(key, 0)
        more = f" ({since} more {host} dropped for this since the last such line)" if since else ""
        log.warning("Raft port: dropped the connection %s: %s; nothing it sent was decoded "
                    "(a controller with another raftka.controller.raft.password, or not a "
                    "controller at all)%s", peer, why, more)

    def closed_by(self, peer: str) -> None:
        """Our connection `peer` was closed before the peer's first message: most likely it
        could not authenticate ours (another password), or it stopped at that moment."""
        key = (peer.rpartition(":")[0] or peer, "closed by the peer")
        with self._lock:
            now = self._clock()
            last = self._last.get(key)
            if last is not None and now - last < self._every_s:
                return
            self._last[key] = now
        log.warning("Raft port: the connection %s was closed by the peer during the key "
                    "exchange: it probably has another raftka.controller.raft.password (its log "
                    "says so), or it was stopping", peer)


class _CheckedEncryptor:
    """pysyncobj's Fernet for one connection; a token that fails its check is reported."""

    def __init__(self, inner, peer: str, drops: DropLog):
        self._inner, self._peer, self._drops = inner, peer, drops

    def encrypt_at_time(self, data: bytes, current_time: int) -> bytes:
        return self._inner.encrypt_at_time(data, current_time)

    def extract_timestamp(self, token: bytes) -> int:
        try:
            return self._inner.extract_timestamp(token)
        except (InvalidToken, TypeError, ValueError):
            self._drops.dropped_from(self._peer, "a message failed authentication")
            raise

    def decrypt(self, token: bytes) -> bytes:
        return self._inner.decrypt(token)


def _peer_of(conn) -> str:
    # pysyncobj keeps the accepted socket private; the address is only for the log line
    sock = getattr(conn, "_TcpConnection__socket", None)
    try:
        host, port = sock.getpeername()[:2]
        return f"from {host}:{port}"
    except (AttributeError, OSError):
        return "from an unknown peer"


def checked_transport(drops: DropLog) -> type:
    """A TCPTransport class whose connections report tokens failing authentication to `drops`."""

    class CheckedTransport(TCPTransport):
        def _onNewIncomingConnection(self, conn):
            peer = _peer_of(conn)
            host = peer.rpartition(":")[0]
            pending = self.__dict__.setdefault("_raftka_pending", {})
            same_host = sum(1 for c, (_, _, h) in pending.items()
                            if h == host and c in self._unknownConnections)
            if same_host >= MAX_PRE_AUTH_PER_HOST or \
                    len(self._unknownConnections) >= MAX_PRE_AUTH:
                drops.dropped_from(peer, "too many connections have not authenticated yet")
                conn.disconnect()
                return
            super()._onNewIncomingConnection(conn)
            if conn.encryptor is not None:
                conn.encryptor = _CheckedEncryptor(conn.encryptor, peer, drops)
            _cap_pre_auth_reads(conn, peer, drops)
            pending[conn] = (time.monotonic(), peer, host)

        def _onTick(self):
            super()._onTick()
            pending = self.__dict__.get("_raftka_pending")
            if not pending:
                return
            now = time.monotonic()
            for conn, (since, peer, _) in list(pending.items()):
                if conn not in self._unknownConnections:
                    del pending[conn]            # identified, or gone
                elif now - since > PRE_AUTH_TIMEOUT_S:
                    del pending[conn]
                    drops.dropped_from(peer, f"not authenticated within {PRE_AUTH_TIMEOUT_S:g} s")
                    conn.disconnect()

        # our side of a mismatch: a peer with another password closes our connection as soon
        # as our first token fails its check, and pysyncobj retries in silence
        def _onOutgoingConnected(self, conn):
            if self._syncObj.encryptor:
                self.__dict__.setdefault("_raftka_handshaking", set()).add(conn)
            super()._onOutgoingConnected(conn)

        def _onOutgoingMessageReceived(self, conn, message):
            self.__dict__.get("_raftka_handshaking", set()).discard(conn)
            super()._onOutgoingMessageReceived(conn, message)

        def _onDisconnected(self, conn):
            handshaking = self.__dict__.get("_raftka_handshaking", set())
            if conn in handshaking:
                handshaking.discard(conn)
                node = self._connToNode(conn)
                drops.closed_by(f"to {getattr(node, 'address', 'a peer')}")
            super()._onDisconnected(conn)

        def addNode(self, node):
            super().addNode(node)
            conn = self._connections.get(node)
            if conn is not None and conn.encryptor is not None:
                conn.encryptor = _CheckedEncryptor(conn.encryptor, f"to {node.address}", drops)

    return CheckedTransport


def _cap_pre_auth_reads(conn, peer: str, drops: DropLog) -> None:
    """Close `conn` once it buffers more than PRE_AUTH_MAX_BYTES before its first message
    decoded (pysyncobj would buffer up to the 2 GiB its length prefix may claim). The read step
    is pysyncobj's private `__processRead`, shadowed on this instance only; a pysyncobj without
    it keeps its own behaviour (the timeout above still applies)."""
    read = getattr(conn, "_TcpConnection__processRead", None)
    if read is None:
        return

    def capped_read():
        more = read()
        if conn.sendRandKey is None and \
                len(getattr(conn, "_TcpConnection__readBuffer", b"")) > PRE_AUTH_MAX_BYTES:
            drops.dropped_from(peer, f"over {PRE_AUTH_MAX_BYTES} bytes before authenticating")
            conn.disconnect()
            return False
        return more
    conn._TcpConnection__processRead = capped_read


def bind_outgoing_raft(host: str) -> None:
    """pysyncobj's outgoing connections leave from `host` (this node's Raft host) from now on;
    a wildcard host (0.0.0.0, ::, empty) leaves the choice to the kernel."""
    if host in ("", "0.0.0.0", "::", "[::]"):
        tcp_connection.socket = _socket
        return

    def bound_socket(family=_socket.AF_INET, kind=_socket.SOCK_STREAM, *args):
        sock = _socket.socket(family, kind, *args)
        try:
            # the port is chosen at connect(), per destination: no ephemeral-port exhaustion
            sock.setsockopt(_socket.IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, 1)
        except OSError:
            pass                     # an older kernel: bind() picks the port, which is fine
        try:
            sock.bind((host, 0))
        except OSError:
            sock.close()
            raise
        return sock

    shim = types.ModuleType("socket")
    shim.__dict__.update(_socket.__dict__)
    shim.socket = bound_socket
    tcp_connection.socket = shim
