"""AddRaftVoter / RemoveRaftVoter handlers against a fake Raft membership: the three steps, one
change at a time, failure and take-over paths (voter_handlers.py). The Raft side is a fake whose
membership the test controls; the records go through encode/decode and the real image."""

from types import SimpleNamespace

import trio

from metadata_quorum import records as r
from metadata_quorum.image import MetadataImage, Voter
from metadata_quorum.quorum.raft import FAIL_REASON
from metadata_quorum import voter_handlers as vh
from wire.errors import ErrorCode
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS

V = {i: Voter(i, f"127.0.0.1:{2000 + i}", "127.0.0.1", 1000 + i) for i in (1, 2, 3)}


class FakeQuorum:
    def __init__(self):
        self.connected = {v.raft_address: True for v in V.values()}
        self.gate: trio.Event | None = None      # set: hold membership changes until it fires
        self.deny = False
        self.transfers = 0

    def members(self):
        return dict(self.connected)

    def status(self):
        return {"commit_index": 10, "match_index": {i: 10 for i in V}}

    def change_membership(self, kind, address, callback):
        async def later():
            if self.gate is not None:
                await self.gate.wait()
            if self.deny:
                callback(None, FAIL_REASON.REQUEST_DENIED)
                return
            if kind == "add":
                self.connected[address] = True
            else:
                self.connected.pop(address, None)
            callback(None, FAIL_REASON.SUCCESS)
        self.nursery.start_soon(later)

    def transfer_leadership(self):
        self.transfers += 1


class FakeService:
    def __init__(self, nursery, node_id=1):
        self.config = SimpleNamespace(node_id=node_id)
        self.quorum = FakeQuorum()
        self.quorum.nursery = nursery
        self.controller = SimpleNamespace(image=MetadataImage())
        self.lock = trio.Lock()
        self.active = True
        self.voter_change_busy = False
        self.token = trio.lowlevel.current_trio_token()
        self.committed: list = []

    def current_voters(self):
        voters = self.controller.image.voters
        return dict(voters) if voters is not None else dict(V)

    def reachable_voters(self):
        up = {a for a, c in self.quorum.members().items() if c}
        return {v.node_id for v in self.current_voters().values() if v.raft_address in up}

    async def _abort_open_transaction(self):
        pass

    async def commit(self, records):
        for rec in records:
            rec = r.decode_record(r.encode_record(rec))
            self.committed.append(rec)
            image = self.controller.image
            self.controller.image = image.apply(image.offset + 1, rec)


def add_request(node_id=4, port=None, raft_port=2004):
    cls = REQUESTS[ApiKey.ADD_RAFT_VOTER]
    port = NEW_PORT if port is None else port
    return SimpleNamespace(api_version=0, body=cls(voter_id=node_id, timeout_ms=1000, listeners=[
        cls.Listener(name="CONTROLLER", host="127.0.0.1", port=port),
        cls.Listener(name="RAFT", host="127.0.0.1", port=raft_port)]))


def remove_request(node_id):
    return SimpleNamespace(api_version=0,
                           body=REQUESTS[ApiKey.REMOVE_RAFT_VOTER](voter_id=node_id))


def run(scenario):
    """`scenario(svc)` with the new voter's CONTROLLER listener (port 1004 in requests) served
    by a real socket: add_request() points at it."""
    async def main():
        global NEW_PORT
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(trio.serve_tcp, _hang_up, 0)
            NEW_PORT = listeners[0].socket.getsockname()[1]
            await scenario(FakeService(nursery))
            nursery.cancel_scope.cancel()
    trio.run(main)


async def _hang_up(stream):
    await stream.aclose()


NEW_PORT = 0


def test_add_commits_pending_then_the_new_set():
    async def scenario(svc):
        resp = await vh.handle_add_raft_voter(svc, add_request())
        assert resp.error_code == 0, resp.error_message
        kinds = [(type(x).__name__, x.change[:2]) for x in svc.committed]
        assert kinds == [("VotersRecord", ("add", 4)), ("VotersRecord", ())]
        assert sorted(svc.controller.image.voters) == [1, 2, 3, 4]
        assert "127.0.0.1:2004" in svc.quorum.members()
        assert not svc.voter_change_busy
    run(scenario)


def test_a_second_change_while_one_is_in_flight_is_refused():
    async def scenario(svc):
        svc.quorum.gate = trio.Event()
        first = []

        async def first_add():
            first.append(await vh.handle_add_raft_voter(svc, add_request()))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(first_add)
            while not svc.controller.image.voter_change:
                await trio.sleep(0.01)
            second = await vh.handle_add_raft_voter(svc, add_request(5, raft_port=2005))
            assert second.error_code == ErrorCode.REQUEST_TIMED_OUT
            assert "adding controller 4" in second.error_message
            third = await vh.handle_remove_raft_voter(svc, remove_request(2))
            assert third.error_code == ErrorCode.REQUEST_TIMED_OUT
            # the tick does not resolve a change its handler still owns
            assert svc.voter_change_busy
            svc.quorum.gate.set()
        assert first[0].error_code == 0
        assert sorted(svc.controller.image.voters) == [1, 2, 3, 4]
    run(scenario)


def test_a_denied_membership_change_is_aborted_and_reported():
    async def scenario(svc):
        svc.quorum.deny = True
        resp = await vh.handle_add_raft_voter(svc, add_request())
        assert resp.error_code == ErrorCode.REQUEST_TIMED_OUT
        assert "REQUEST_DENIED" in resp.error_message
        image = svc.controller.image
        assert sorted(image.voters) == [1, 2, 3] and image.voter_change == ()
        # and the next change is accepted
        svc.quorum.deny = False
        assert (await vh.handle_add_raft_voter(svc, add_request())).error_code == 0
    run(scenario)


def test_removing_the_active_controller_hands_leadership_over_first():
    async def scenario(svc):
        resp = await vh.handle_remove_raft_voter(svc, remove_request(1))
        assert resp.error_code == ErrorCode.NOT_CONTROLLER
        assert svc.quorum.transfers == 1 and svc.committed == []
    run(scenario)


def test_the_last_voter_is_refused_rather_than_handed_over():
    async def scenario(svc):
        await svc.commit([r.VotersRecord((tuple(V[1]),))])      # a one-voter quorum
        resp = await vh.handle_remove_raft_voter(svc, remove_request(1))
        assert resp.error_code == ErrorCode.INVALID_REQUEST and "last voter" in \
            resp.error_message
        assert svc.quorum.transfers == 0
    run(scenario)


def test_remove_a_follower():
    async def scenario(svc):
        resp = await vh.handle_remove_raft_voter(svc, remove_request(3))
        assert resp.error_code == 0, resp.error_message
        assert sorted(svc.controller.image.voters) == [1, 2]
        assert V[3].raft_address not in svc.quorum.members()
        # pending, a NoOp the leaving voter must see committed, then the new set
        assert [type(x).__name__ for x in svc.committed] == ["VotersRecord", "NoOpRecord",
                                                              "VotersRecord"]
    run(scenario)


def test_not_active_answers_not_controller_and_writes_nothing():
    async def scenario(svc):
        svc.active = False
        # even for a request it would refuse (a follower's view of reachability is not the
        # leader's): the caller must move on to the active controller
        svc.quorum.connected[V[2].raft_address] = False
        svc.quorum.connected[V[3].raft_address] = False
        for resp in (await vh.handle_add_raft_voter(svc, add_request()),
                     await vh.handle_remove_raft_voter(svc, remove_request(3))):
            assert resp.error_code == ErrorCode.NOT_CONTROLLER
        assert svc.committed == []
    run(scenario)


def test_a_change_left_pending_by_a_previous_leader_is_finished_or_aborted():
    async def scenario(svc):
        new = Voter(4, "127.0.0.1:2004", "127.0.0.1", NEW_PORT)
        pending = r.VotersRecord(tuple(tuple(v) for v in V.values()), ("add",) + tuple(new))
        await svc.commit([pending])
        # the membership entry made it (this leader's membership has the new address)
        svc.quorum.connected[new.raft_address] = False
        assert await vh.resolve_pending(svc) is True
        assert sorted(svc.controller.image.voters) == [1, 2, 3, 4]
        assert svc.controller.image.voter_change == ()
        # a removal whose membership entry was lost: aborted, the voter stays
        await svc.commit([r.VotersRecord(svc.committed[-1].voters, ("remove", 2))])
        assert await vh.resolve_pending(svc) is False
        assert sorted(svc.controller.image.voters) == [1, 2, 3, 4]
        assert svc.controller.image.voter_change == ()
    run(scenario)


def test_a_new_voter_that_is_not_running_is_not_added():
    async def scenario(svc):
        with trio.socket.socket() as sock:         # a port nothing listens on
            await sock.bind(("127.0.0.1", 0))
            dead_port = sock.getsockname()[1]
        resp = await vh.handle_add_raft_voter(svc, add_request(port=dead_port))
        assert resp.error_code == ErrorCode.REQUEST_TIMED_OUT
        assert "does not answer" in resp.error_message and svc.committed == []
    run(scenario)


def test_a_voter_that_reconnects_a_moment_later_counts_as_reachable():
    """A new leader sees quiet follower links as down until it has reconnected them: a change
    refused for want of reachable voters is looked at again for a few seconds."""
    async def scenario(svc):
        svc.quorum.connected[V[2].raft_address] = False

        async def reconnect():
            await trio.sleep(0.5)
            svc.quorum.connected[V[2].raft_address] = True
        svc.quorum.nursery.start_soon(reconnect)
        resp = await vh.handle_remove_raft_voter(svc, remove_request(3))
        assert resp.error_code == 0, resp.error_message
        # one that stays down: refused once the settle time is over (voters {1, 2}, 2 down:
        # a third voter would need 2 reachable)
        svc.quorum.connected[V[2].raft_address] = False
        start = trio.current_time()
        resp = await vh.handle_add_raft_voter(svc, add_request())
        assert resp.error_code == ErrorCode.INVALID_REQUEST and "remove the unreachable" in \
            resp.error_message
        assert trio.current_time() - start >= vh.REACH_SETTLE_S
    run(scenario)
