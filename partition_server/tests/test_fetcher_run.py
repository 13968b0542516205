"""FetcherManager.run keeps one fetcher task per leader followed, whatever the interleaving with
the metadata applier (`follow`/`unfollow` run in the broker's on_image task).

Campaign finding (issue 20, kill class, round 41): a broker restarted while the controller moved
135 partitions to another leader; its fetcher for that leader never started, so it never fetched
them again and the leader never re-admitted it to their ISRs. `run` read the leaders, then
awaited `nursery.start` for a new fetcher; a `follow` naming a new leader during that await set
the event `run` was not yet waiting on, and `run` then waited on the fresh one: the wake-up was
lost until some other leader came or went, which a 3-broker cluster may never see again.

No sockets in those: the image names no broker, so a fetcher task only idles in its loop (it
registers its session under its leader's id, which is how the tests see it running). The last
test gives it a fake leader on loopback that never answers a Fetch: the fetcher's timeout."""

import functools
import types

import pytest
import trio

from partition_server.replication.fetcher import FetcherManager

NO_BROKERS = types.SimpleNamespace(brokers={})


class Probe(FetcherManager):
    """A FetcherManager whose next fetcher task, as it starts, first runs `on_start`: what the
    broker's on_image task may do while `run` is suspended in `nursery.start`."""

    def __init__(self):
        super().__init__(2, {}, None, None, image=lambda: NO_BROKERS, security=None)
        self.on_start = None

    async def _fetch_from(self, leader: int, task_status=trio.TASK_STATUS_IGNORED) -> None:
        hook, self.on_start = self.on_start, None
        if hook is not None:
            hook()
        await super()._fetch_from(leader, task_status)


async def _running(fm: FetcherManager, leaders: set[int]) -> None:
    with trio.fail_after(10):
        while set(fm.sessions) != leaders:
            await trio.sleep(0.05)


async def test_a_leader_followed_while_another_fetcher_starts_gets_a_fetcher(autojump_clock):
    fm = Probe()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(fm.run)
        # while run starts the fetcher for leader 1, the next image moves a partition to 0
        fm.on_start = lambda: fm.follow("t", 1, 0)
        fm.follow("t", 0, 1)
        await _running(fm, {0, 1})
        nursery.cancel_scope.cancel()


async def test_a_leader_dropped_while_a_fetcher_starts_loses_its_fetcher(autojump_clock):
    fm = Probe()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(fm.run)
        fm.follow("t", 0, 0)
        await _running(fm, {0})
        # while run starts the fetcher for leader 1, the next image takes leader 0's only one
        fm.on_start = lambda: fm.unfollow("t", 0)
        fm.follow("t", 1, 1)
        await _running(fm, {1})
        nursery.cancel_scope.cancel()


async def test_fetchers_follow_a_burst_of_leader_moves(autojump_clock):
    """Catch-up after a restart replays old leaderships image by image: the tasks end where the
    last image says, whatever run saw in between."""
    fm = Probe()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(fm.run)
        for leader in (0, 1, 0, 1, 0):
            fm.follow("t", 0, leader)
            await trio.lowlevel.checkpoint()
        fm.follow("t", 1, 1)
        await _running(fm, {0, 1})
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("answered_fetches", [0, 6])
async def test_a_leader_that_never_answers_a_fetch_is_left_and_reconnected(autojump_clock,
                                                                            answered_fetches):
    """A fetch outliving replica.fetch.wait.max.ms + 4-5 s ends the link (one cancel scope over
    the fetcher's requests, its deadline moved on when a second or more behind) and the fetcher
    connects again. A fake leader on loopback answers ApiVersions and the first
    `answered_fetches` Fetches (0.3 s each: the deadline moves on meanwhile), then swallows
    every Fetch."""
    from common.security import PLAINTEXT
    from wire.connection import ServerConnection
    from wire.messages.api_keys import ApiKey
    from wire.messages.index_generated import RESPONSES
    from partition_server.replication.partition import Role

    fetches: list[float] = []           # when each Fetch arrived
    connections: list[float] = []

    async def leader(stream):
        connections.append(trio.current_time())
        conn = ServerConnection({ApiKey.API_VERSIONS: (0, 3), ApiKey.FETCH: (4, 12)})
        while True:
            data = await stream.receive_some(65536)
            if not data:
                return
            conn.receive_data(data)
            while (req := conn.next_request()) is not None:
                if req.api_key == ApiKey.FETCH:
                    fetches.append(trio.current_time())
                    if len(fetches) <= answered_fetches:    # the first few: answered, empty
                        await trio.sleep(0.3)
                        await stream.send_all(b"".join(conn.send_response_chunks(
                            req, RESPONSES[ApiKey.FETCH](error_code=0, session_id=0,
                                                        responses=[]))))
                    continue                                # the rest: never answered
                versions = RESPONSES[ApiKey.API_VERSIONS].ApiVersion
                await stream.send_all(b"".join(conn.send_response_chunks(
                    req, RESPONSES[ApiKey.API_VERSIONS](error_code=0, api_keys=[
                        versions(api_key=ApiKey.FETCH, min_version=4, max_version=12)]))))

    hosted = types.SimpleNamespace(
        offline=False, state=types.SimpleNamespace(role=Role.FOLLOWER, isr=[2], leader_epoch=0),
        log=types.SimpleNamespace(log_end_offset=0, latest_epoch=-1, log_start_offset=0))
    replicas = types.SimpleNamespace(get=lambda topic, partition: hosted)
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(functools.partial(trio.serve_tcp, leader, 0,
                                                            host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        image = types.SimpleNamespace(brokers={1: types.SimpleNamespace(host="127.0.0.1",
                                                                          port=port)})
        fm = FetcherManager(2, {"replica.fetch.wait.max.ms": 500,
                                "replica.fetch.max.bytes": 1 << 20}, replicas, None,
                            image=lambda: image, security=PLAINTEXT)
        nursery.start_soon(fm.run)
        fm.follow("t", 0, 1)
        with trio.fail_after(60):
            while len(connections) < 2:
                await trio.sleep(0.1)
        nursery.cancel_scope.cancel()
    assert len(fetches) > answered_fetches, "the fetcher never fetched unanswered"
    # the second connection came once the first unanswered fetch had waited its deadline
    waited = connections[1] - fetches[answered_fetches]
    assert 4.5 <= waited <= 5.5 + 0.2 + 0.1, waited     # + the link's 0.2 s pause, a poll step
