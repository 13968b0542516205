"""Markers of different transactions bound for one broker share a WriteTxnMarkers request, as
Kafka's TransactionMarkerChannelManager drains its per-broker queue (issue #23): one request out
per broker at a time, and what queued meanwhile goes in the next one. A failed request leaves
its markers to the coordinator's retry; a caller cancelled before its markers went out takes
them back.

The broker at the other end is played by the test: it records each request and answers when
the test lets it, with the codes the test chose per producer."""

from __future__ import annotations

import uuid

import trio

from common.connection import ConnectionClosed
from metadata_quorum import records as r
from metadata_quorum.image import MetadataImage
from partition_server.txn.markers import MarkerSender
from wire.errors import ErrorCode
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import RESPONSES


class FakeBroker:
    """Broker 2's side of the peer connection: one request at a time, answered on `release`."""

    def __init__(self):
        self.requests: list = []
        self.release = trio.Event()
        self.codes: dict[int, ErrorCode] = {}        # producer id → code for its partitions
        self.fail = False
        self.dropped = 0
        self._busy = trio.Lock()                     # as BrokerConnection: one request out

    async def get(self, node):
        assert node == 2
        return self

    async def drop(self, node):
        self.dropped += 1

    async def request(self, req, version, timeout_s=30.0):
        async with self._busy:
            self.requests.append(req)
            await self.release.wait()
            if self.fail:
                raise ConnectionClosed("broker 2 went away")
            cls = RESPONSES[ApiKey.WRITE_TXN_MARKERS]
            return cls(markers=[cls.WritableTxnMarkerResult(producer_id=m.producer_id, topics=[
                cls.WritableTxnMarkerTopicResult(name=t.name, partitions=[
                    cls.WritableTxnMarkerPartitionResult(
                        partition_index=p, error_code=self.codes.get(m.producer_id, 0))
                    for p in t.partition_indexes]) for t in m.topics]) for m in req.markers])


def sender(broker: FakeBroker) -> MarkerSender:
    tid = uuid.uuid4()
    image = MetadataImage().apply_all(0, [
        r.TopicRecord("t", tid), r.PartitionRecord(tid, 0, (2,), (2,), 2),
        r.PartitionRecord(tid, 1, (2,), (2,), 2)])
    return MarkerSender(1, replicas=None, purgatory=None, image=lambda: image, offsets=None,
                        peers=broker)


async def wait_for(cond) -> None:
    with trio.fail_after(5):
        while not cond():
            await trio.sleep(0.001)


async def test_markers_queued_meanwhile_go_in_one_request():
    broker = FakeBroker()
    markers = sender(broker)
    left: dict[int, set] = {}

    async def complete(pid, parts):
        left[pid] = await markers.write_markers(pid, 0, True, 5, parts)

    broker.codes[12] = ErrorCode.NOT_LEADER_OR_FOLLOWER
    async with trio.open_nursery() as nursery:
        nursery.start_soon(complete, 10, [("t", 0)])
        await wait_for(lambda: len(broker.requests) == 1)
        nursery.start_soon(complete, 11, [("t", 0), ("t", 1)])
        nursery.start_soon(complete, 12, [("t", 1)])
        await wait_for(lambda: sum(len(q) for q in markers.requests._queued.values()) == 2)
        broker.release.set()
    assert [sorted(m.producer_id for m in req.markers) for req in broker.requests] == \
        [[10], [11, 12]]
    second = {m.producer_id: m for m in broker.requests[1].markers}.values()
    assert sorted((m.producer_id, t.name, list(t.partition_indexes)) for m in second
                  for t in m.topics) == [(11, "t", [0, 1]), (12, "t", [1])]
    assert all(m.coordinator_epoch == 5 and m.transaction_result for m in second)
    assert left == {10: set(), 11: set(), 12: {("t", 1)}}
    assert markers.requests.idle()


async def test_a_failed_request_leaves_every_marker_in_it_to_the_retry():
    broker = FakeBroker()
    markers = sender(broker)
    broker.fail = True
    broker.release.set()
    results = await markers.write_markers(10, 0, False, 5, [("t", 0), ("t", 1)])
    assert results == {("t", 0), ("t", 1)} and broker.dropped == 1
    broker.fail = False
    assert await markers.write_markers(10, 0, False, 5, [("t", 0), ("t", 1)]) == set()


async def test_a_cancelled_caller_takes_back_markers_not_sent_yet():
    broker = FakeBroker()
    markers = sender(broker)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(markers.write_markers, 10, 0, True, 5, [("t", 0)])
        await wait_for(lambda: len(broker.requests) == 1)
        with trio.CancelScope() as scope:
            nursery.start_soon(lambda: _cancel_soon(scope, markers))
            await markers.write_markers(11, 0, True, 5, [("t", 1)])
        assert scope.cancelled_caught
        broker.release.set()
    assert [[m.producer_id for m in req.markers] for req in broker.requests] == [[10]]
    assert markers.requests.idle()


async def _cancel_soon(scope, markers) -> None:
    await wait_for(lambda: markers.requests._queued.get(2))
    scope.cancel()


async def test_a_broker_that_never_answers_leaves_the_markers_to_the_retry(autojump_clock):
    """The request's own bound (MARKER_TIMEOUT_S + 5 s, a bare cancel scope): the markers go
    back to the coordinator's retry and the connection is dropped."""
    from partition_server.txn.markers import MARKER_TIMEOUT_S
    broker = FakeBroker()                       # never released: never answers
    markers = sender(broker)
    start = trio.current_time()
    results = await markers.write_markers(10, 0, True, 5, [("t", 0), ("t", 1)])
    assert results == {("t", 0), ("t", 1)} and broker.dropped == 1
    assert trio.current_time() - start == MARKER_TIMEOUT_S + 5
    assert markers.requests.idle()


async def test_the_remote_leaders_markers_leave_before_the_local_append():
    """A remote leader's replication round is the long one: its WriteTxnMarkers goes out first,
    whichever order trio runs the ready tasks in (it picks either at random: 40 tries)."""
    tid = uuid.uuid4()
    image = MetadataImage().apply_all(0, [
        r.TopicRecord("t", tid), r.PartitionRecord(tid, 0, (1,), (1,), 1),
        r.PartitionRecord(tid, 1, (2,), (2,), 2)])
    for attempt in range(40):
        broker = FakeBroker()
        broker.release.set()
        markers = MarkerSender(1, replicas=None, purgatory=None, image=lambda: image,
                               offsets=None, peers=broker)
        order: list[str] = []
        asked = broker.request

        async def remote(req, version, timeout_s=30.0):
            order.append("remote")
            return await asked(req, version, timeout_s)

        async def local(topic, partition, *args, **kwargs):
            order.append("local")
            return ErrorCode.NONE

        broker.request = remote
        markers.append_locally = local
        left = await markers.write_markers(7, 0, True, 5, [("t", 0), ("t", 1)])
        assert left == set()
        assert order == ["remote", "local"], f"try {attempt}: {order}"
