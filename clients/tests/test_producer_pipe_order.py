"""Delivery callbacks in per-partition order, as in Kafka's producer.

ProducePipe (clients/producer/pipe.py): answers to pipelined Produce requests that arrive
together are handed to their callers in request order. (Before the fix, tasks woken together ran
in trio's arbitrary order: the live idempotence chaos test saw sequences 312, 311, 310, 309
complete in that order.) The sender (clients/producer/sender.py): after a leader change, a
partition's fresh batch waits for the old leader's outstanding answers before it goes to the new
one. (Before the fix it went at once; the new leader, already holding the earlier batch whose
answer was lost, accepted it, and its callback ran first.)"""

from types import SimpleNamespace as NS

import trio
import trio.testing

from clients.cluster import TopicPartition
from clients.errors import KafkaConnectionError
from clients.producer import Producer
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


class _Leaders:
    """The producer's metadata, reduced to what the sender loop reads: one leader for all."""

    def __init__(self, leader: int):
        self.leader = leader

    def leader_for(self, tp):
        return self.leader


class _Cluster:
    def __init__(self, leader: int):
        self.metadata = _Leaders(leader)

    def metadata_stale(self) -> bool:
        return False

    async def refresh_metadata(self, force: bool = False) -> None:
        pass


async def test_a_new_leader_gets_a_partition_after_the_old_leaders_answers():
    """Batch A goes to leader 0, which appends it (replicated) but whose answer is lost; the
    leader moves to 1 and batch B is queued. B must wait until A's request fails, then go
    behind A's resend: A's callback first (offset 0), then B's (offset 1)."""
    tp = TopicPartition("t", 0)
    p = Producer("127.0.0.1:1", {"linger.ms": 0, "retry.backoff.ms": 1})
    p._ids.reset(5, 0)
    sender = p._sender
    sender.cluster = _Cluster(leader=0)
    log: list[int] = []                  # the partition's log: base sequences, at their offsets
    calls: list[tuple[int, list[int]]] = []
    lose_answer = trio.Event()

    async def produce_call(node, req, expect_response=True, ticket=None, failures=None):
        part = req.topic_data[0].partition_data[0]
        seq = int.from_bytes(part.records[53:57], "big")      # the batch's base sequence
        calls.append((node, seq))
        if seq not in log:
            log.append(seq)              # appended (the new leader has it too: replicated)
        if node == 0:
            await lose_answer.wait()     # the old leader's answer never comes
            raise KafkaConnectionError("node 0: connection closed")
        return NS(responses=[NS(name=tp.topic, partition_responses=[NS(
            index=tp.partition, error_code=0, error_message=None, base_offset=log.index(seq),
            log_append_time_ms=-1)])])

    sender._produce_call = produce_call
    completed: list[tuple[str, int]] = []

    def queue(value: bytes) -> None:
        fut, _ = p._acc.append(tp, None, value, None, 1, now=trio.current_time())
        fut.add_callback(lambda meta, exc: completed.append((value.decode(), meta.offset)))
        sender.incomplete += 1
        sender.wake()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(sender.run)
        queue(b"A")
        await trio.testing.wait_all_tasks_blocked()
        assert calls == [(0, 0)]
        sender.cluster.metadata.leader = 1
        queue(b"B")
        await trio.testing.wait_all_tasks_blocked()
        assert calls == [(0, 0)], "B went to the new leader while A's answer was outstanding"
        lose_answer.set()
        with trio.fail_after(10):
            await sender.flush()
        sender.stop()
    assert calls == [(0, 0), (1, 0), (1, 1)]
    assert completed == [("A", 0), ("B", 1)]
