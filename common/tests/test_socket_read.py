"""common/socket_read.py: bytes already there are read without a checkpoint (and say so), an
empty socket waits (a checkpoint), end of stream and closed or broken streams behave as trio's
own receive_some; and a connection served by common/network.py still yields once per request
when its requests are always there (another task gets to run between them)."""

import socket
import struct

import pytest
import trio
import trio.testing

from common import network, socket_read
from wire.connection import ClientConnection
from wire.messages import api_keys
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import RESPONSES


def _pair():
    a, b = socket.socketpair()
    return trio.SocketStream(trio.socket.from_stdlib_socket(a)), b


def _tcp_pair():
    """(our end as a trio stream, the peer's blocking socket, the listener) on loopback."""
    listener = socket.create_server(("127.0.0.1", 0))
    peer = socket.create_connection(listener.getsockname())
    accepted, _ = listener.accept()
    return trio.SocketStream(trio.socket.from_stdlib_socket(accepted)), peer, listener


async def test_bytes_already_there_are_read_without_a_checkpoint():
    stream, peer = _pair()
    peer.sendall(b"hello")
    with trio.testing.assert_no_checkpoints():
        assert await socket_read.receive_some(stream, 100) == (b"hello", False)
    assert socket_read.read_now(stream, 100) is None          # nothing more there
    await stream.aclose()
    peer.close()


async def test_an_empty_socket_waits_and_says_so():
    stream, peer = _pair()
    async with trio.open_nursery() as n:
        async def later():
            await trio.sleep(0.05)
            peer.sendall(b"late")
        n.start_soon(later)
        with trio.testing.assert_checkpoints():
            assert await socket_read.receive_some(stream, 100) == (b"late", True)
    await stream.aclose()
    peer.close()


async def test_end_of_stream_and_closed_or_broken_streams():
    stream, peer = _pair()
    peer.close()
    assert await socket_read.receive_some(stream, 100) == (b"", False)
    await stream.aclose()
    with pytest.raises(trio.ClosedResourceError):
        await socket_read.receive_some(stream, 100)

    stream, peer = _pair()                          # closed by another task while it waits
    failures = []

    async def reader():
        try:
            await socket_read.receive_some(stream, 100)
        except trio.ClosedResourceError as exc:
            failures.append(exc)
    async with trio.open_nursery() as n:
        n.start_soon(reader)
        await trio.testing.wait_all_tasks_blocked()
        await stream.aclose()
    assert len(failures) == 1
    peer.close()

    stream, peer, listener = _tcp_pair()            # a reset: closed with SO_LINGER 0
    peer.sendall(b"x")
    peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    peer.close()
    with pytest.raises(trio.BrokenResourceError):
        for _ in range(3):                          # the byte sent first may be read first
            await socket_read.receive_some(stream, 100)
    await stream.aclose()
    listener.close()


async def test_other_streams_take_trios_path():
    class Canned(trio.abc.ReceiveStream):
        async def receive_some(self, max_bytes=None):
            await trio.lowlevel.checkpoint()
            return b"abc"

        async def aclose(self):
            pass

    assert await socket_read.receive_some(Canned(), 10) == (b"abc", True)
    assert socket_read.read_now(Canned(), 10) is None


async def test_a_connection_whose_requests_are_all_there_still_yields_once_per_request():
    """100 ApiVersions requests in one write, answered by a handler that never waits: the
    reads find their bytes and the answers' sends complete at once, so without the yield per
    request the connection would hold trio's loop for all 100."""
    server, client, listener = _tcp_pair()
    req = api_keys.request_class(ApiKey.API_VERSIONS)(client_software_name="t",
                                                      client_software_version="1")
    conn = ClientConnection()
    client.sendall(b"".join(conn.send_request(req, 3, "t") for _ in range(100)))
    answered, ticks = [0], [0]

    async def dispatch(ctx, request):
        answered[0] += 1
        return RESPONSES[ApiKey.API_VERSIONS](error_code=0, api_keys=[])

    async def ticker():
        while True:
            ticks[0] += 1
            await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as n:
        n.start_soon(ticker)
        n.start_soon(network.serve_connection, server, dispatch, "PLAINTEXT", 1 << 20,
                     {ApiKey.API_VERSIONS: (0, 3)})
        start = ticks[0]
        while answered[0] < 100:
            await trio.lowlevel.checkpoint()
        assert ticks[0] - start >= 90, ticks[0] - start     # 99-100; without the yield 1
        n.cancel_scope.cancel()
    client.close()
    listener.close()
