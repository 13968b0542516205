"""Three real controller processes: several clients send CreateTopics one after another (so the
active controller has many commands in flight, pipelined) while the active controller is
SIGKILLed twice. Every CreateTopics answered with success is in the committed metadata stream of
every live controller, exactly once, and the controllers' streams are identical (issue 20 item 4,
the pipeline's "a success is never lost").
"""

import trio
import pytest

from clients.connection import ConnectionClosed
from metadata_quorum.tests.test_failover import Quorum, _request, register_broker, topics_in_stream
from wire.errors import DecodeError
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS

pytestmark = pytest.mark.live

CLIENTS = 6
PER_CLIENT = 30                 # acknowledged topics each client writes
KILLS = 2
DEADLINE_S = 45


def create_request(name: str):
    ct = REQUESTS[ApiKey.CREATE_TOPICS]
    return ct(topics=[ct.CreatableTopic(name=name, num_partitions=-1, replication_factor=-1,
                                        assignments=[ct.CreatableReplicaAssignment(
                                            partition_index=0, broker_ids=[0])])],
              timeout_ms=5000)


class Clients:
    def __init__(self, q: Quorum):
        self.q = q
        self.acked: list[str] = []              # answered 0: must be committed
        self.existed: list[str] = []            # answered 36 on a retry: an earlier try committed
        self.last_active = 0
        self.not_controller = 0

    async def create(self, name: str) -> None:
        """One topic, retried on every controller until one answers; the first controller
        tried is the one that answered last (the active one, normally)."""
        retried = False
        with trio.fail_after(DEADLINE_S):
            while True:
                for i in sorted(self.q.procs, key=lambda i: i != self.last_active):
                    try:
                        resp = await _request(self.q.port(i), create_request(name), 7, timeout=3)
                    except (ConnectionClosed, OSError, DecodeError, trio.TooSlowError):
                        retried = True
                        continue
                    code = resp.topics[0].error_code
                    if code == 0:
                        self.acked.append(name)
                        self.last_active = i
                        return
                    if code == 36 and retried:
                        self.existed.append(name)
                        return
                    assert code in (41, 7), f"{name}: unexpected error {code}"
                    self.not_controller += code == 41
                    retried = True
                await trio.sleep(0.05)

    async def client(self, k: int) -> None:
        for n in range(PER_CLIENT):
            await self.create(f"c{k}-{n}")


async def wait_for(predicate, what: str) -> None:
    with trio.fail_after(DEADLINE_S):
        while not predicate():
            await trio.sleep(0.01)


async def streams(q: Quorum, at_least: int) -> dict[int, list[str]]:
    """Every live controller's committed topic names, once each has `at_least` records."""
    out = {}
    for i in q.procs:
        with trio.fail_after(DEADLINE_S):
            while True:
                try:
                    names, hw = await topics_in_stream(q.port(i))
                    if hw >= at_least:
                        out[i] = names
                        break
                except (ConnectionClosed, OSError, DecodeError, trio.TooSlowError):
                    pass                        # a restarted controller may still be starting
                await trio.sleep(0.1)
    return out


def test_concurrent_create_topics_through_active_controller_kills(tmp_path):
    q = Quorum(tmp_path)
    q.start_all()
    try:
        async def scenario():
            await register_broker(q)
            c = Clients(q)
            await c.create("first")
            async with trio.open_nursery() as nursery:
                for k in range(CLIENTS):
                    nursery.start_soon(c.client, k)
                step = CLIENTS * PER_CLIENT // (2 * KILLS + 1)
                for _ in range(KILLS):
                    await wait_for(lambda n=len(c.acked) + step: len(c.acked) >= n, "progress")
                    victim = c.last_active      # the active controller, commands in flight
                    q.kill(victim)
                    await wait_for(lambda n=len(c.acked) + step: len(c.acked) >= n,
                                   "progress after the kill")
                    q.start(victim)             # back, so the next kill leaves a majority
            _, hw = await topics_in_stream(q.port(c.last_active))
            return c, await streams(q, hw)

        c, seen = trio.run(scenario)
    finally:
        q.stop_all()
    assert len(c.acked) + len(c.existed) == 1 + CLIENTS * PER_CLIENT
    first = next(iter(seen.values()))
    for i, names in seen.items():
        assert names == first, f"controller {i}'s stream differs"
    assert len(first) == len(set(first)), "a topic was created twice"
    missing = set(c.acked) - set(first)
    assert not missing, f"acknowledged but not committed: {sorted(missing)[:5]}"
    assert set(c.existed) <= set(first)
    print(f"{len(c.acked)} acknowledged, {len(c.existed)} already existed on a retry, "
          f"{c.not_controller} NOT_CONTROLLER answers")
