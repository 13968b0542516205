"""common/network.py + common/pipeline.py: a connection counts in APPENDS_COMING from the Produce
its reader takes until the reader finds no request in its buffer (several pipelined Produce
requests: counted once, all along), and not after it closed — so a leader's follower-fetch
answer waits for appends only while one may come (handlers/fetch_follower.py). Real loopback
sockets."""

import socket

import trio

from common import network
from common.pipeline import APPENDS_COMING, first_stage_done
from wire.connection import ClientConnection
from wire.messages import api_keys
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import RESPONSES

SUPPORTED = {ApiKey.PRODUCE: (3, 9), ApiKey.API_VERSIONS: (0, 3)}


def _streams():
    with socket.create_server(("127.0.0.1", 0)) as listener:
        peer = socket.create_connection(listener.getsockname())
        accepted, _ = listener.accept()
    return (trio.SocketStream(trio.socket.from_stdlib_socket(accepted)),
            trio.SocketStream(trio.socket.from_stdlib_socket(peer)))


async def test_a_connection_counts_from_its_produce_until_its_reader_waits():
    base = APPENDS_COMING.count
    seen = []
    stuck = trio.Event()

    async def dispatch(ctx, request):
        seen.append(APPENDS_COMING.count - base)        # in the first stage: counted
        if len(seen) == 5:
            stuck.set()
            await trio.sleep_forever()                  # its first stage never ends
        first_stage_done()
        await trio.sleep(0)
        return RESPONSES[ApiKey.PRODUCE](responses=[])

    server, client = _streams()
    conn = ClientConnection()
    produce = api_keys.request_class(ApiKey.PRODUCE)(acks=1, timeout_ms=1000, topic_data=[])

    async def answers(count):
        with trio.fail_after(10):
            for _ in range(count):
                while conn.next_response() is None:
                    conn.receive_data(await client.receive_some(1 << 16))

    async def released():
        with trio.fail_after(10):
            while APPENDS_COMING.count != base:          # the reader waits on its socket again
                await trio.sleep(0.001)

    async with trio.open_nursery() as n:
        serving = trio.CancelScope()

        async def serve():
            with serving:
                await network.serve_connection(server, dispatch, "PLAINTEXT", 1 << 20,
                                               SUPPORTED, idle_timeout_s=60)

        n.start_soon(serve)
        # three Produce requests in one write: the reader finds them all in its buffer
        await client.send_all(b"".join(conn.send_request(produce, 9, "t") for _ in range(3)))
        await answers(3)
        await released()
        assert seen == [1, 1, 1]
        await client.send_all(conn.send_request(produce, 9, "t"))
        await answers(1)
        await released()
        assert seen == [1, 1, 1, 1]
        await client.send_all(conn.send_request(produce, 9, "t"))    # stuck in its first stage
        with trio.fail_after(10):
            await stuck.wait()
        assert APPENDS_COMING.count == base + 1
        serving.cancel()                                 # the connection ends: released
        await released()
