"""A request waiting for its turn when its node's pipelined connection dies is not sent on the
next connection: it goes back to the queue, in order, behind the failed requests drained before
it (clients/producer/sender.py, `_produce_call`).

Scripted with in-memory lockstep streams, so the interleaving is fixed: on the first connection
the broker reads request 1 (record a) and stops reading, so request 2 (b) hangs in its write and
request 3 (c) waits in the turnstile; then the connection dies. Before the fix request 3 was
written first on the second connection and acknowledged before a and b were resent: c's
callback ran before a's and b's (the rare inversion the idempotence chaos test once saw)."""

from __future__ import annotations

import trio
import trio.testing

from clients.cluster import BrokerInfo, ClusterMetadata, PartitionInfo, TopicInfo
from clients.producer import Producer
from wire.connection import ServerConnection
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import RESPONSES
from wire.records.batch import decode_batch

PRODUCE_VERSION = 9


class _Conn:
    """What `ProducePipe` uses of a BrokerConnection."""

    def __init__(self, stream):
        from wire.connection import ClientConnection
        self._stream = stream
        self._conn = ClientConnection()
        self.client_id = "t"
        self.host, self.port = "test", 0


class _Broker:
    """Connection 1 reads one request, then nothing until it is killed; later connections
    answer every Produce at once with the partition's next offsets."""

    def __init__(self, nursery):
        self.nursery = nursery
        self.conns: list[tuple[_Conn, object]] = []
        self.first_read = trio.Event()
        self.written: list[list[bytes]] = []      # values per request, in arrival order, conn 2+
        self.next_offset = 0

    async def connection(self, node, channel):
        client, server = trio.testing.lockstep_stream_pair()
        conn = _Conn(client)
        self.conns.append((conn, server))
        if len(self.conns) == 1:
            self.nursery.start_soon(self._stall, server)
        else:
            self.nursery.start_soon(self._serve, server)
        return conn

    async def _stall(self, server):
        wire = ServerConnection()
        while wire.next_request() is None:
            wire.receive_data(await server.receive_some(65536))
        self.first_read.set()
        await trio.sleep_forever()

    async def _serve(self, server):
        wire = ServerConnection()
        cls = RESPONSES[ApiKey.PRODUCE]
        while True:
            data = await server.receive_some(65536)
            if not data:
                return
            wire.receive_data(data)
            while (req := wire.next_request()) is not None:
                topics = []
                values = []
                for t in req.body.topic_data:
                    parts = []
                    for p in t.partition_data:
                        recs = decode_batch(p.records).records
                        values += [r.value for r in recs]
                        parts.append(cls.PartitionProduceResponse(
                            index=p.index, error_code=0, base_offset=self.next_offset))
                        self.next_offset += len(recs)
                    topics.append(cls.TopicProduceResponse(name=t.name, partition_responses=parts))
                self.written.append(values)
                await server.send_all(wire.send_response(req, cls(responses=topics)))


async def test_request_waiting_in_turnstile_is_not_sent_on_the_next_connection():
    async with trio.open_nursery() as nursery:
        broker = _Broker(nursery)
        p = Producer("127.0.0.1:1", {"acks": 1, "linger.ms": 0, "retry.backoff.ms": 5,
                                     "max.in.flight.requests.per.connection": 5})
        parts = {0: PartitionInfo("t", 0, 1, 0, (1,), (1,), ())}
        p.cluster.metadata = ClusterMetadata(
            brokers={1: BrokerInfo(1, "test", 0)},
            topics={"t": TopicInfo("t", None, False, parts)})

        async def nothing(*a, **k):
            return None
        p.cluster.start = p.cluster.aclose = p.cluster.refresh_metadata = nothing
        p.cluster.drop_connection = nothing
        p.cluster.metadata_stale = lambda: False
        p.cluster.connection = broker.connection
        p.cluster.version_for = lambda conn, key, *a, **k: PRODUCE_VERSION
        await p.start(nursery)

        order = []
        futs = []
        for v in (b"a", b"b", b"c"):
            futs.append(await p.send("t", v, partition=0,
                                     on_delivery=lambda m, e, v=v: order.append((v, e))))
            await trio.testing.wait_all_tasks_blocked()
            if v == b"a":
                await broker.first_read.wait()
        # request 1 read by the broker, request 2 stuck in its write, request 3 in the turnstile
        assert p._sender._inflight == {1: 3} and broker.first_read.is_set()
        assert len(broker.conns) == 1
        await trio.aclose_forcefully(broker.conns[0][1])          # the connection dies
        with trio.fail_after(10):
            await p.flush()
        assert order == [(b"a", None), (b"b", None), (b"c", None)]
        assert [f.result().offset for f in futs] == [0, 1, 2]
        # on the new connection nothing overtook the failed requests
        assert [v for req in broker.written for v in req] == [b"a", b"b", b"c"]
        await p.aclose()
        nursery.cancel_scope.cancel()
