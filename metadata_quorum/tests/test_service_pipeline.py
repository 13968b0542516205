"""The controller service's pipelining (service.py + pipeline.py): commands from several clients
are proposed while earlier ones are still in flight, answers wait for their commit, a record-less
answer waits for what it read, and a failure fails everything in flight with NOT_CONTROLLER and
drops the speculative state. The Raft layer is test_service_transactions' stand-in over a real
MetadataLog, holding proposals until the test releases or fails them.
"""

import trio
import trio.testing

import pytest

from metadata_quorum import records as r
from metadata_quorum.quorum.raft import FENCED
from metadata_quorum.service import NotActive
from metadata_quorum.tests.test_service_transactions import FakeQuorum, make_service, settle


class HeldQuorum(FakeQuorum):
    """Holds proposals while `hold` is set; `release(n)` commits the first n in order,
    `fail()` fails every held one (a lost leadership)."""

    def __init__(self):
        super().__init__()
        self.hold = False
        self.held: list = []
        self.results: list = []

    def propose(self, batch: bytes, callback) -> None:
        if not self.hold:
            return super().propose(batch, callback)
        self.proposed += 1
        self.held.append((batch, callback))

    def release(self, n: int | None = None) -> None:
        n = len(self.held) if n is None else n
        now, self.held = self.held[:n], self.held[n:]
        for batch, callback in now:
            first = self.log.apply.__wrapped__(self.log, batch)
            self.applied += 1
            self.results.append(first)
            callback(first, 0)

    def fail(self) -> None:
        now, self.held = self.held, []
        for _, callback in now:
            callback(None, 4)                   # FAIL_REASON.NOT_LEADER


async def held_service():
    svc = await make_service()
    svc.quorum.__class__ = HeldQuorum           # the same log, now holding proposals
    svc.quorum.hold, svc.quorum.held, svc.quorum.results = False, [], []
    await svc.mutate(lambda now: ([r.RegisterBrokerRecord(0, "i", 1, "h", 1, fenced=False)], None))
    return svc


def create(svc, name):
    return lambda now: svc.controller.create_topics([{"name": name, "assignments": {0: [0]}}])


async def test_commands_of_several_clients_are_in_flight_at_once_and_answered_after_commit():
    svc = await held_service()
    svc.quorum.hold = True
    answers: dict = {}

    async def client(name, topic=None):
        answers[name] = (await svc.mutate(create(svc, topic or name)))[0].error

    async with trio.open_nursery() as nursery:
        for name in ("a", "b", "c"):
            nursery.start_soon(client, name)
        await settle()
        assert len(svc.quorum.held) == 3 and not answers        # proposed, none answered
        assert {"a", "b", "c"} <= set(svc.controller.image.topics)   # the speculative image
        assert not {"a", "b", "c"} & set(svc.committed_image.topics)
        # the same topic again: no records (it exists in flight); answered once the last
        # proposal in flight committed
        nursery.start_soon(client, "a2", "a")
        await settle()
        svc.quorum.release(2)
        await settle()
        # the first two proposed (trio runs the clients in any order) are answered; the
        # record-less one waits for the third
        assert len(answers) == 2 and "a2" not in answers
        svc.quorum.release()
    assert answers == {"a": 0, "b": 0, "c": 0, "a2": 36}      # TOPIC_ALREADY_EXISTS
    assert {"a", "b", "c"} <= set(svc.committed_image.topics)
    assert svc.controller.image is svc.committed_image          # idle: the committed image


async def test_a_recordless_answer_waits_for_the_state_it_read():
    svc = await held_service()
    svc.quorum.hold = True
    seen = []

    async def read():
        seen.append(await svc.mutate(lambda now: ([], "a" in svc.controller.image.topics)))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(svc.mutate, create(svc, "a"))
        await settle()
        nursery.start_soon(read)
        await settle()
        assert seen == []                       # it read "a" in flight: not answered yet
        svc.quorum.release()
    assert seen == [True]


async def test_a_failed_commit_fails_everything_in_flight_and_drops_the_speculative_state():
    svc = await held_service()
    svc.quorum.hold = True
    errors = []

    async def client(name):
        try:
            await svc.mutate(create(svc, name))
        except NotActive as exc:
            errors.append(str(exc))

    async with trio.open_nursery() as nursery:
        for name in ("a", "b", "c"):
            nursery.start_soon(client, name)
        await settle()
        held = list(svc.quorum.held)
        svc.quorum.held = held[:1]               # the first fails; the later two stay in the log
        svc.quorum.fail()
    assert len(errors) == 3 and not svc.active
    assert svc.controller.image is svc.committed_image
    assert not {"a", "b", "c"} & set(svc.committed_image.topics)
    with pytest.raises(NotActive):
        await svc.mutate(create(svc, "d"))
    # the later two commit after all (they were appended): computed on "a", they are fenced
    svc.quorum.held = held[1:]
    svc.quorum.release()
    await settle()
    assert svc.quorum.results == [FENCED, FENCED]
    assert not {"a", "b", "c"} & set(svc.committed_image.topics)
    svc.quorum.hold = False
    await svc.become_active()                   # what the leadership loop does next
    await svc.mutate(create(svc, "a"))
    await settle()
    assert "a" in svc.committed_image.topics


async def test_one_at_a_time_when_pipelining_is_off():
    svc = await held_service()
    svc.pipelined = False
    svc.quorum.hold = True
    async with trio.open_nursery() as nursery:
        for name in ("a", "b"):
            nursery.start_soon(svc.mutate, create(svc, name))
        await settle()
        assert len(svc.quorum.held) == 1        # the second waits for the first's commit
        svc.quorum.release()
        await settle()
        assert len(svc.quorum.held) == 1
        svc.quorum.release()
    assert {"a", "b"} <= set(svc.committed_image.topics)


async def test_a_commit_is_not_timed_out_while_this_node_applies_earlier_entries(
        monkeypatch, autojump_clock):
    """An entry's answer comes when this node applies it, after every entry before it: a node
    working through a backlog (a restart's replay) is not out of quorum. While the applied index
    moves, the wait goes on; a whole timeout without it moving is a timeout, as before. (Trio's
    virtual clock: the steps below fall where they are written, whatever the machine's load.)"""
    from metadata_quorum import service
    monkeypatch.setattr(service, "COMMIT_TIMEOUT_S", 0.05)
    svc = await held_service()
    svc.quorum.hold = True
    answers = []

    async def client():
        answers.append((await svc.mutate(create(svc, "slow")))[0].error)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(client)
        await settle()
        for _ in range(10):                     # 0.3 s of earlier entries applied, 6 timeouts
            await trio.sleep(0.03)
            svc.quorum.applied += 1
        svc.quorum.release()
    assert answers == [0] and svc.active
    svc.quorum.hold = True                      # nothing applied for a whole timeout: failed
    with pytest.raises(NotActive):
        await svc.mutate(create(svc, "stuck"))
