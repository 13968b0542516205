"""The broker's metadata follower: replay is ordered, gap-checked, and never goes backwards."""

from metadata_quorum.records import TopicRecord, encode_record
from partition_server.controller_client import ControllerClient
from wire.records.batch import Record, build_batch


def batch(first_offset, names):
    import uuid
    return build_batch([Record(offset_delta=i, value=encode_record(TopicRecord(n, uuid.uuid4())))
                        for i, n in enumerate(names)], base_offset=first_offset)


def test_replay_moves_forward_only():
    c = ControllerClient(0, {3000: ("127.0.0.1", 1)}, "127.0.0.1", 9092, None)
    assert c._replay(batch(0, ["a", "b", "c"])) is not None
    assert c.image.offset == 2 and set(c.image.topics) == {"a", "b", "c"}
    # an older voter answers with records we already have: nothing changes
    assert c._replay(batch(0, ["x", "y"])) is None
    assert c.image.offset == 2 and "x" not in c.image.topics
    # overlapping: only the new tail applies
    c._replay(batch(2, ["c", "d"]))
    assert c.image.offset == 3 and "d" in c.image.topics
    # a gap is refused, the image stays where it was
    assert c._replay(batch(10, ["z"])) is None
    assert c.image.offset == 3 and "z" not in c.image.topics


async def test_waiters_wake_once_the_broker_has_applied_the_image():
    """Handlers answering CreateTopics wait (admin._await_metadata, 5 s bound) until the
    broker's own image shows the topics; the broker sets it at the end of on_image, after
    opening the new logs off the event loop. The wake-up must come after that too, not only
    when the records were replayed (then every big CreateTopics waited out its 5 s)."""
    import types

    import trio
    import trio.testing

    from partition_server.handlers.admin import _await_metadata
    from wire.messages.api_keys import ApiKey
    from wire.messages.index_generated import RESPONSES

    c = ControllerClient(0, {3000: ("127.0.0.1", 1)}, "127.0.0.1", 9092, None)
    fr = RESPONSES[ApiKey.FETCH]
    sent = []

    async def request(req, version, timeout_s):
        if sent:
            await trio.sleep_forever()
        sent.append(req)
        return fr(responses=[fr.FetchableTopicResponse(topic="__cluster_metadata", partitions=[
            fr.PartitionData(partition_index=0, high_watermark=1, records=batch(0, ["a"]))])])

    async def conn(voter, pool=None):
        return types.SimpleNamespace(request=request)
    c._conn = conn
    broker = types.SimpleNamespace(image=c.image)
    logs_opened = trio.Event()

    async def on_image(image):
        await logs_opened.wait()          # opening thousands of logs in threads
        broker.image = image

    class Context:                        # what handlers see: the broker's image
        client = c
        image = property(lambda self: broker.image)
    hctx = Context()
    answered = []
    created = RESPONSES[ApiKey.CREATE_TOPICS]
    resp = created(topics=[created.CreatableTopicResult(name="a", error_code=0)])
    async with trio.open_nursery() as nursery:
        nursery.start_soon(c.follow_metadata, on_image)

        async def handler():
            await _await_metadata(hctx, ApiKey.CREATE_TOPICS, None, resp, timeout_s=3600)
            answered.append(True)
        nursery.start_soon(handler)
        await trio.testing.wait_all_tasks_blocked()
        assert "a" in c.image.topics and "a" not in broker.image.topics and not answered
        logs_opened.set()
        await trio.testing.wait_all_tasks_blocked()
        assert answered                   # at once, not at the 3,600 s bound
        nursery.cancel_scope.cancel()


def test_controlled_shutdown_heartbeats_at_once_not_after_the_interval():
    """Kafka's broker sends its controlled-shutdown heartbeat at once; ours waited out the 2 s
    interval twice (enter controlled shutdown, then be told to stop): every stop took ~4 s.
    Virtual time (MockClock): both heartbeats come well inside one interval."""
    import trio
    import trio.testing

    from wire.messages.index_generated import RESPONSES
    from wire.messages.api_keys import ApiKey

    c = ControllerClient(0, {3000: ("127.0.0.1", 1)}, "127.0.0.1", 9092, None,
                         heartbeat_interval_ms=60_000)
    c.fenced = False
    sent: list[tuple[float, bool]] = []

    async def call_active(req, **_):
        sent.append((trio.current_time(), req.want_shut_down))
        # the controller's answers: the first shutdown heartbeat enters controlled shutdown,
        # the next one (no leaderships left) is told to stop
        told_to_stop = sum(1 for _, want in sent if want) >= 2
        return RESPONSES[ApiKey.BROKER_HEARTBEAT](error_code=0, is_caught_up=True,
                                                  is_fenced=False, should_shut_down=told_to_stop)
    c.call_active = call_active

    async def main():
        async with trio.open_nursery() as n:
            n.start_soon(c.heartbeat_loop, lambda: None)
            await trio.sleep(1)                     # the first, ordinary heartbeat went out
            c.want_shutdown = True
            with trio.fail_after(5):                # far less than the 60 s interval
                while not c.should_shut_down:
                    await trio.sleep(0.01)
            n.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert [want for _, want in sent][:1] == [False] and sent[-1][1] is True
    assert sent[-1][0] < 5


def test_heartbeats_ask_to_stay_fenced_until_the_broker_is_ready():
    """Kafka's readyToUnfence: a broker that has caught up but not yet applied its image (it
    opens thousands of logs first) heartbeats with want_fence, so no leader is elected onto it
    while it cannot serve; once ready, at once (not after the interval) without it."""
    import trio
    import trio.testing

    from wire.messages.index_generated import RESPONSES
    from wire.messages.api_keys import ApiKey

    c = ControllerClient(0, {3000: ("127.0.0.1", 1)}, "127.0.0.1", 9092, None,
                         heartbeat_interval_ms=60_000)
    c.ready_to_unfence = False
    sent: list[tuple[float, bool]] = []

    async def call_active(req, **_):
        sent.append((trio.current_time(), req.want_fence))
        return RESPONSES[ApiKey.BROKER_HEARTBEAT](error_code=0, is_caught_up=True,
                                                  is_fenced=req.want_fence)
    c.call_active = call_active

    async def main():
        async with trio.open_nursery() as n:
            n.start_soon(c.heartbeat_loop, lambda: None)
            await trio.sleep(1)
            assert sent and all(want for _, want in sent) and c.fenced
            c.ready_to_unfence = True
            c.heartbeat_soon()
            await trio.sleep(0.01)
            assert sent[-1] == (1.0, False) and not c.fenced
            n.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert ControllerClient(0, {3000: ("127.0.0.1", 1)}, "127.0.0.1", 9092,
                            None).ready_to_unfence          # other users: as before


async def test_a_big_metadata_batch_is_replayed_off_the_event_loop():
    """A controlled shutdown at 30,000 partitions is a fetched batch of ~30,000 records; its
    replay (decode, apply to the image) held the broker's event loop for a quarter of a second
    and more. Big batches now go to a worker thread: a task ticking on the loop keeps ticking
    meanwhile (the GIL hands over every 5 ms of the replay's CPU time, however the machine is
    loaded), where on the loop it cannot tick at all until the replay is over. The result is
    the same image either way."""
    import trio

    from partition_server import controller_client as cc

    names = [f"t{i}" for i in range(20000)]
    data = batch(0, names)
    assert len(data) >= cc.REPLAY_OFF_LOOP_BYTES
    on_loop = ControllerClient(0, {3000: ("127.0.0.1", 1)}, "127.0.0.1", 9092, None)
    on_loop._replay(data)
    c = ControllerClient(0, {3000: ("127.0.0.1", 1)}, "127.0.0.1", 9092, None)
    ticks = [0]

    async def ticker():
        while True:
            await trio.sleep(0.001)
            ticks[0] += 1

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ticker)
        await trio.sleep(0.01)
        before = ticks[0]
        new = await c._replay_fetched(data)
        during = ticks[0] - before
        nursery.cancel_scope.cancel()
    assert new is c.image and c.image.offset == len(names) - 1
    assert set(c.image.topics) == set(on_loop.image.topics)
    assert during >= 3, during


def api_versions_response():
    """A fake controller's ApiVersions answer: BrokerHeartbeat v0-1 only."""
    from wire.messages.api_keys import ApiKey
    from wire.messages.index_generated import RESPONSES
    v = RESPONSES[ApiKey.API_VERSIONS].ApiVersion
    return RESPONSES[ApiKey.API_VERSIONS](error_code=0, api_keys=[
        v(api_key=ApiKey.BROKER_HEARTBEAT, min_version=0, max_version=1)])


def _fake_voter(active: bool):
    """A fake controller voter (a trio.serve_tcp handler): answers ApiVersions; heartbeats
    get NOT_CONTROLLER from a follower, nothing from the (too busy) active one."""
    from wire.connection import ServerConnection
    from wire.errors import ErrorCode
    from wire.messages.api_keys import ApiKey
    from wire.messages.index_generated import RESPONSES

    async def serve(stream):
        conn = ServerConnection({ApiKey.API_VERSIONS: (0, 3),
                                 ApiKey.BROKER_HEARTBEAT: (0, 1)})
        while data := await stream.receive_some(65536):
            conn.receive_data(data)
            while (req := conn.next_request()) is not None:
                if req.api_key == ApiKey.API_VERSIONS:
                    resp = api_versions_response()
                elif active:
                    continue                        # read, never answered
                else:
                    resp = RESPONSES[ApiKey.BROKER_HEARTBEAT](
                        error_code=ErrorCode.NOT_CONTROLLER)
                await stream.send_all(b"".join(conn.send_response_chunks(req, resp)))
    return serve


async def test_a_failed_call_says_what_each_voter_did():
    """A heartbeat that no voter answers in time is logged with what each one did: a session
    that lapses although heartbeats were sent (a controller too busy to read them) reads
    differently from one whose heartbeats never got out (nothing listening, only followers,
    a new connection whose first request, ApiVersions, was never answered)."""
    import functools
    import socket

    import pytest
    import trio

    from partition_server.controller_client import ControllerUnavailable
    from wire.messages.api_keys import ApiKey
    from wire.messages.index_generated import REQUESTS

    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    dead_port = closed.getsockname()[1]
    closed.close()                           # nothing listens there: connecting is refused
    silent = trio.socket.socket()
    await silent.bind(("127.0.0.1", 0))
    silent.listen()                          # the kernel accepts; no ApiVersions answer ever
    req = REQUESTS[ApiKey.BROKER_HEARTBEAT](broker_id=0, broker_epoch=1,
                                            current_metadata_offset=0)
    async with trio.open_nursery() as nursery:
        ports = []
        for active in (False, True):
            listeners = await nursery.start(functools.partial(
                trio.serve_tcp, _fake_voter(active), 0, host="127.0.0.1"))
            ports.append(listeners[0].socket.getsockname()[1])
        c = ControllerClient(0, {3000: ("127.0.0.1", dead_port), 3001: ("127.0.0.1", ports[0]),
                                 3002: ("127.0.0.1", ports[1])}, "127.0.0.1", 9092, None)
        c._active_hint = 3000
        trail: list = []
        with pytest.raises(ControllerUnavailable):
            await c.call_active(req, timeout_s=1.0, error_of=lambda r: r.error_code,
                                trail=trail)
        assert trail[0].startswith("3000: could not connect"), trail
        assert "3001: NOT_CONTROLLER" in trail, trail
        assert trail[-1] == "3002: no answer in time (after sending)", trail
        c = ControllerClient(0, {3003: ("127.0.0.1", silent.getsockname()[1])},
                             "127.0.0.1", 9092, None)
        trail = []
        with pytest.raises(ControllerUnavailable):
            await c.call_active(req, timeout_s=1.0, error_of=lambda r: r.error_code,
                                trail=trail)
        assert trail == ["3003: no answer in time (while connecting)"], trail
        nursery.cancel_scope.cancel()
    silent.close()
