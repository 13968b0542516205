"""ProducePipe (clients/producer/pipe.py): answers to pipelined Produce requests that arrive
together are handed to their callers in request order, so delivery callbacks keep Kafka's
per-partition order. (Before the fix, tasks woken together ran in trio's arbitrary order: the live
idempotence chaos test saw sequences 312, 311, 310, 309 complete in that order.)"""

import trio
import trio.testing

from clients.producer.pipe import ProducePipe
from wire.connection import ClientConnection, ServerConnection
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS, RESPONSES

N = 40


class _Conn:
    def __init__(self, stream):
        self._stream = stream
        self._conn = ClientConnection()
        self.client_id = "t"
        self.host, self.port = "test", 0


async def test_answers_arriving_together_are_taken_in_request_order():
    client, server = trio.testing.memory_stream_pair()
    pipe = ProducePipe(_Conn(client), 9)
    taken: list[int] = []

    async def serve():
        wire = ServerConnection()
        got = []
        while len(got) < N:
            wire.receive_data(await server.receive_some(65536))
            while (req := wire.next_request()) is not None:
                got.append(req)
        # every answer in one write: the reader parses them in one go and wakes all waiters
        await server.send_all(b"".join(wire.send_response(r, RESPONSES[ApiKey.PRODUCE](responses=[]))
                                       for r in got))

    async def one(i, waiter):
        await trio.sleep(0.001 * ((N - i) % 7))      # callers reach receive() out of order
        await pipe.receive(waiter, 10)
        taken.append(i)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(pipe.reader)
        nursery.start_soon(serve)
        waiters = [await pipe.send(REQUESTS[ApiKey.PRODUCE](acks=1, timeout_ms=1000, topic_data=[]), 10)
                   for _ in range(N)]
        async with trio.open_nursery() as callers:
            for i, w in enumerate(waiters):
                callers.start_soon(one, i, w)
        nursery.cancel_scope.cancel()
    assert taken == list(range(N))
