"""connections.max.idle.ms in common/network.py: a connection that waits that long for a request
is closed (one watch task per connection, not a cancel scope per wait); one whose requests keep
coming, or whose request is still being handled, is not. Trio's autojump clock runs the
timeouts in virtual time, over real loopback sockets."""

import socket

import trio

from common import network
from wire.connection import ClientConnection
from wire.messages import api_keys
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import RESPONSES

IDLE_S = 5.0
SUPPORTED = {ApiKey.API_VERSIONS: (0, 3)}


def _streams():
    """(the server's end, the client's end) of a loopback TCP connection."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        peer = socket.create_connection(listener.getsockname())
        accepted, _ = listener.accept()
    return (trio.SocketStream(trio.socket.from_stdlib_socket(accepted)),
            trio.SocketStream(trio.socket.from_stdlib_socket(peer)))


class _Client:
    def __init__(self, stream):
        self.stream, self.conn = stream, ClientConnection()

    async def ask(self) -> bool:
        """One ApiVersions exchange; False if the server closed the connection instead."""
        req = api_keys.request_class(ApiKey.API_VERSIONS)(client_software_name="t",
                                                          client_software_version="1")
        await self.stream.send_all(self.conn.send_request(req, 3, "t"))
        while True:
            got = self.conn.next_response()
            if got is not None:
                return True
            data = await self.stream.receive_some(1 << 16)
            if not data:
                return False
            self.conn.receive_data(data)

    async def closed_at(self) -> float:
        """When the server closed the connection (end of stream); fails after 60 s."""
        with trio.fail_after(60):
            while await self.stream.receive_some(1 << 16):
                pass
        return trio.current_time()


async def _dispatch(ctx, request):
    return RESPONSES[ApiKey.API_VERSIONS](error_code=0, api_keys=[])


async def test_a_silent_connection_is_closed_after_the_idle_timeout(autojump_clock):
    server, client = _streams()
    async with trio.open_nursery() as n:
        start = trio.current_time()
        n.start_soon(lambda: network.serve_connection(server, _dispatch, "PLAINTEXT", 1 << 20,
                                                      SUPPORTED, idle_timeout_s=IDLE_S))
        assert await _Client(client).closed_at() - start == IDLE_S


async def test_requests_inside_the_timeout_keep_a_connection_open(autojump_clock):
    server, client = _streams()
    c = _Client(client)
    async with trio.open_nursery() as n:
        n.start_soon(lambda: network.serve_connection(server, _dispatch, "PLAINTEXT", 1 << 20,
                                                      SUPPORTED, idle_timeout_s=IDLE_S))
        for _ in range(8):                     # 8 requests 4 s apart: 28 s, never 5 s idle
            await trio.sleep(IDLE_S - 1)
            assert await c.ask()
        last = trio.current_time()
        assert await c.closed_at() - last == IDLE_S


async def test_time_spent_handling_a_request_is_not_idle(autojump_clock):
    """A long poll (a fetch waiting for records) outlasting the timeout is answered, and the
    timeout counts again from the answer."""
    async def slow(ctx, request):
        await trio.sleep(3 * IDLE_S)
        return await _dispatch(ctx, request)
    server, client = _streams()
    c = _Client(client)
    async with trio.open_nursery() as n:
        n.start_soon(lambda: network.serve_connection(server, slow, "PLAINTEXT", 1 << 20,
                                                      SUPPORTED, idle_timeout_s=IDLE_S))
        start = trio.current_time()
        assert await c.ask()
        answered = trio.current_time()
        assert answered - start == 3 * IDLE_S
        assert await c.closed_at() - answered == IDLE_S
