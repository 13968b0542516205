"""The listener's SASL edge in-process (trio, loopback): handshake v1 + SaslAuthenticate, the
legacy v0 raw-token path, what is refused before authentication, oversized pre-auth frames,
re-authentication deadlines, TLS, and connection limits."""

import functools
import struct

import pytest
import trio

from common.network import ConnectionLimiter, ListenerSecurity, serve_listener
from common import tls
from common.sasl import SCRAM_SHA_512, ScramClient, make_credential
from wire.connection import ClientConnection
from wire.errors import ErrorCode
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS, RESPONSES

CREDS = {("alice", SCRAM_SHA_512): make_credential(SCRAM_SHA_512, "pw", 4096)}
SUPPORTED = {ApiKey.API_VERSIONS: (0, 3), ApiKey.METADATA: (0, 12)}


async def dispatch(ctx, request):
    if request.api_key == ApiKey.API_VERSIONS:
        cls = RESPONSES[ApiKey.API_VERSIONS]
        return cls(error_code=0, api_keys=[cls.ApiVersion(api_key=k, min_version=lo, max_version=hi)
                                           for k, (lo, hi) in sorted(SUPPORTED.items())])
    # Metadata: tells the test who the server thinks we are
    return RESPONSES[ApiKey.METADATA](cluster_id=ctx.principal, brokers=[], topics=[])


async def start(nursery, security):
    listeners = await nursery.start(functools.partial(
        serve_listener, "127.0.0.1", 0, dispatch, "TEST", 1 << 20, SUPPORTED, security=security))
    return listeners[0].socket.getsockname()[1]


def sasl_security(**kw):
    return ListenerSecurity("SASL_PLAINTEXT", None, ("PLAIN", "SCRAM-SHA-512"),
                            lambda u, m: CREDS.get((u, m)), handshake_timeout_s=kw.pop("timeout", 5), **kw)


class Client:
    def __init__(self, stream):
        self.stream, self.conn = stream, ClientConnection()

    async def call(self, message, version):
        await self.stream.send_all(self.conn.send_request(message, version))
        while True:
            got = self.conn.next_response()
            if got is not None:
                return got[1]
            data = await self.stream.receive_some(65536)
            if not data:
                raise EOFError("server closed the connection")
            self.conn.receive_data(data)

    async def closed(self) -> bool:
        with trio.move_on_after(3):
            try:
                return await self.stream.receive_some(100) == b""
            except trio.BrokenResourceError:
                return True
        return False

    async def scram(self, user="alice", password="pw", version=2):
        hs = await self.call(REQUESTS[ApiKey.SASL_HANDSHAKE](mechanism="SCRAM-SHA-512"), 1)
        assert hs.error_code == 0 and "SCRAM-SHA-512" in hs.mechanisms
        client = ScramClient(SCRAM_SHA_512, user, password)
        first = await self.call(REQUESTS[ApiKey.SASL_AUTHENTICATE](auth_bytes=client.first()), version)
        if first.error_code:
            return first
        final = await self.call(REQUESTS[ApiKey.SASL_AUTHENTICATE](auth_bytes=client.final(first.auth_bytes)), version)
        if final.error_code == 0:
            client.verify(final.auth_bytes)
        return final


async def connect(port):
    return Client(await trio.open_tcp_stream("127.0.0.1", port))


async def test_scram_then_requests_as_the_principal(nursery):
    port = await start(nursery, sasl_security())
    c = await connect(port)
    versions = await c.call(REQUESTS[ApiKey.API_VERSIONS](), 3)          # allowed before authentication
    assert {17, 36} <= {k.api_key for k in versions.api_keys}
    assert (await c.scram()).error_code == 0
    assert (await c.call(REQUESTS[ApiKey.METADATA](topics=None), 12)).cluster_id == "User:alice"


async def test_wrong_password_is_refused_and_closed(nursery):
    port = await start(nursery, sasl_security())
    c = await connect(port)
    resp = await c.scram(password="nope")
    assert resp.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert await c.closed()
    c = await connect(port)
    assert (await c.scram(user="mallory")).error_code == ErrorCode.SASL_AUTHENTICATION_FAILED


async def test_requests_before_authentication_close_the_connection(nursery):
    port = await start(nursery, sasl_security())
    c = await connect(port)
    with pytest.raises(EOFError):
        await c.call(REQUESTS[ApiKey.METADATA](topics=None), 12)
    c = await connect(port)                          # unknown mechanism: told the list, closed
    hs = await c.call(REQUESTS[ApiKey.SASL_HANDSHAKE](mechanism="GSSAPI"), 1)
    assert hs.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM and "PLAIN" in hs.mechanisms
    assert await c.closed()


async def test_oversized_and_slow_pre_auth(nursery):
    port = await start(nursery, sasl_security(max_unauthenticated_bytes=4096, timeout=0.5))
    c = await connect(port)
    await c.stream.send_all(struct.pack(">i", 10_000) + b"\0" * 100)
    assert await c.closed()
    c = await connect(port)                          # says nothing: dropped after the deadline
    assert await c.closed()


async def test_legacy_v0_handshake_with_raw_tokens(nursery):
    port = await start(nursery, sasl_security())
    c = await connect(port)
    hs = await c.call(REQUESTS[ApiKey.SASL_HANDSHAKE](mechanism="PLAIN"), 0)
    assert hs.error_code == 0
    token = b"\0alice\0pw"
    # PLAIN needs a SCRAM credential to check against: alice has SCRAM-SHA-512
    await c.stream.send_all(struct.pack(">i", len(token)) + token)
    reply = await c.stream.receive_some(4)
    assert reply == struct.pack(">i", 0)             # empty challenge: authenticated
    assert (await c.call(REQUESTS[ApiKey.METADATA](topics=None), 12)).cluster_id == "User:alice"
    c = await connect(port)
    await c.call(REQUESTS[ApiKey.SASL_HANDSHAKE](mechanism="PLAIN"), 0)
    await c.stream.send_all(struct.pack(">i", 9) + b"\0alice\0no")
    assert await c.closed()


async def test_reauthentication(nursery):
    port = await start(nursery, sasl_security(reauth_ms=300))
    c = await connect(port)
    resp = await c.scram()
    assert resp.session_lifetime_ms == 300
    await c.call(REQUESTS[ApiKey.METADATA](topics=None), 12)
    await trio.sleep(0.2)
    assert (await c.scram()).error_code == 0         # re-authenticated on the same connection
    await trio.sleep(0.2)
    await c.call(REQUESTS[ApiKey.METADATA](topics=None), 12)       # new session: still fine
    CREDS[("bob", SCRAM_SHA_512)] = make_credential(SCRAM_SHA_512, "b", 4096)
    assert (await c.scram(user="bob", password="b")).error_code == \
        ErrorCode.SASL_AUTHENTICATION_FAILED         # a session may not change principal
    c = await connect(port)
    await c.scram()
    await trio.sleep(0.4)
    with pytest.raises(EOFError):                    # expired: the next request closes it
        await c.call(REQUESTS[ApiKey.METADATA](topics=None), 12)


async def test_sasl_ssl_and_connection_limits(nursery, tmp_path):
    paths = tls.generate_dev_ca(tmp_path)
    limiter = ConnectionLimiter(max_connections=100, max_per_ip=2)
    sec = sasl_security(limiter=limiter)
    sec.protocol, sec.ssl_context = "SASL_SSL", tls.server_context(str(paths["server"]))
    port = await start(nursery, sec)
    ctx = tls.client_context(str(paths["ca"]))

    async def tls_client():
        raw = await trio.open_tcp_stream("127.0.0.1", port)
        stream = trio.SSLStream(raw, ctx, server_hostname="127.0.0.1")
        await stream.do_handshake()
        return Client(stream)

    a, b = await tls_client(), await tls_client()
    assert (await a.scram()).error_code == 0
    with pytest.raises((trio.BrokenResourceError, EOFError)):   # third from this IP: refused
        third = await tls_client()
        await third.call(REQUESTS[ApiKey.API_VERSIONS](), 3)
    assert limiter.refused >= 1
    await b.stream.aclose()
    await trio.sleep(0.1)
    c = await tls_client()                           # a slot is free again
    assert (await c.scram()).error_code == 0
    assert (await a.call(REQUESTS[ApiKey.METADATA](topics=None), 12)).cluster_id == "User:alice"


async def test_ssl_listener_client_certificate_is_the_principal(nursery, tmp_path):
    paths = tls.generate_dev_ca(tmp_path, clients=["alice"])
    sec = ListenerSecurity("SSL", tls.server_context(str(paths["server"]),
                                                     truststore=str(paths["ca"]),
                                                     client_auth="required"))
    port = await start(nursery, sec)

    async def client(certfile):
        ctx = tls.client_context(str(paths["ca"]), certfile)
        stream = trio.SSLStream(await trio.open_tcp_stream("127.0.0.1", port), ctx,
                                server_hostname="127.0.0.1")
        await stream.do_handshake()
        return Client(stream)

    c = await client(str(paths["client:alice"]))
    assert (await c.call(REQUESTS[ApiKey.METADATA](topics=None), 12)).cluster_id == "User:CN=alice"
    with pytest.raises((trio.BrokenResourceError, EOFError)):    # no certificate: refused
        anonymous = await client(None)
        await anonymous.call(REQUESTS[ApiKey.API_VERSIONS](), 3)


def test_connection_limiter_counts():
    limiter = ConnectionLimiter(max_connections=3, max_per_ip=2)
    assert limiter.try_acquire("a") and limiter.try_acquire("a")
    assert not limiter.try_acquire("a")                  # per ip
    assert limiter.try_acquire("b")
    assert not limiter.try_acquire("c")                  # total
    limiter.release("a")
    assert limiter.try_acquire("c") and limiter.refused == 2
    assert limiter.per_ip == {"a": 1, "b": 1, "c": 1}
