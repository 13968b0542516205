"""A broker's calls to the active controller reach the one elected after the controller it was
talking to is cut off. A cut-off controller (packets dropped, no reset) fails no faster than a
heartbeat's whole budget: the broker used to start every call with it, never tried another, and
was fenced (found by the netfaults test: the active controller isolated, two brokers fenced)."""

import trio

from partition_server.controller_client import ControllerClient, ControllerUnavailable
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS, RESPONSES

HEARTBEAT = RESPONSES[ApiKey.BROKER_HEARTBEAT]


class Blackhole:
    async def request(self, message, version, timeout_s):
        await trio.sleep_forever()                      # sent, never answered

    async def aclose(self):
        pass


class Answers:
    def __init__(self, resp):
        self.resp, self.calls = resp, 0

    async def request(self, message, version, timeout_s):
        self.calls += 1
        return self.resp


async def test_a_call_that_times_out_on_the_hinted_voter_moves_the_hint_on(autojump_clock):
    client = ControllerClient(0, {3000: ("h", 1), 3001: ("h", 2), 3002: ("h", 3)}, "h", 9, None)
    not_controller = Answers(HEARTBEAT(error_code=41))   # NOT_CONTROLLER
    active = Answers(HEARTBEAT(error_code=0))
    conns = {3000: Blackhole(), 3001: not_controller, 3002: active}

    async def conn(voter, pool=None):
        return conns[voter]
    client._conn = conn
    req = REQUESTS[ApiKey.BROKER_HEARTBEAT](broker_id=0, broker_epoch=1)
    assert client._active_hint == 3000
    try:
        await client.call_active(req, timeout_s=1.0, error_of=lambda r: r.error_code)
    except ControllerUnavailable:
        pass
    else:
        raise AssertionError("the cut-off controller answered")
    assert active.calls == 0                             # the budget went on the cut-off one
    resp = await client.call_active(req, timeout_s=1.0, error_of=lambda r: r.error_code)
    assert resp.error_code == 0 and active.calls == 1
    assert client._active_hint == 3002                   # and later calls go there first
    await client.call_active(req, timeout_s=1.0, error_of=lambda r: r.error_code)
    assert not_controller.calls == 1


class SlowForAlterPartition:
    """The active controller, busy: heartbeats answered, a big AlterPartition not in time."""

    def __init__(self):
        self.heartbeats = 0

    async def request(self, message, version, timeout_s):
        if message.API_KEY == ApiKey.ALTER_PARTITION:
            await trio.sleep_forever()
        self.heartbeats += 1
        return HEARTBEAT(error_code=0)

    async def aclose(self):
        pass


async def test_a_slow_call_does_not_move_the_hint_off_a_controller_that_answers_others(
        autojump_clock):
    client = ControllerClient(0, {3000: ("h", 1), 3001: ("h", 2), 3002: ("h", 3)}, "h", 9, None)
    busy, follower = SlowForAlterPartition(), Answers(HEARTBEAT(error_code=41))
    conns = {3000: busy, 3001: follower, 3002: follower}

    async def conn(voter, pool=None):
        return conns[voter]
    client._conn = conn
    heartbeat = REQUESTS[ApiKey.BROKER_HEARTBEAT](broker_id=0, broker_epoch=1)
    alter = REQUESTS[ApiKey.ALTER_PARTITION](broker_id=0, broker_epoch=1)

    async def heartbeat_midway():
        await trio.sleep(2)
        await client.call_active(heartbeat, timeout_s=4.0, error_of=lambda r: r.error_code)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(heartbeat_midway)
        try:
            await client.call_active(alter, timeout_s=5.0)
        except ControllerUnavailable:
            pass
        else:
            raise AssertionError("the busy controller answered the AlterPartition")
    assert busy.heartbeats == 1
    assert client._active_hint == 3000          # slow, not cut off: calls still start there
    await client.call_active(heartbeat, timeout_s=4.0, error_of=lambda r: r.error_code)
    assert follower.calls == 0 and busy.heartbeats == 2
