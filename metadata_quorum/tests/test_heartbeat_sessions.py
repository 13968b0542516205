"""Broker sessions on a slow active controller (heartbeat_connections.py, service.py): a
heartbeat counts from its arrival, not from its turn among the commands, and a heartbeat
connection the broker closed because our answer was late does not cut its session short; a
connection closed after a timely answer (a crashed broker) still does. Through the service's
wire dispatch with its Raft stand-in holding proposals (answers wait for their commit) and a
test clock."""

from __future__ import annotations

import trio

from metadata_quorum import service as service_module
from metadata_quorum.heartbeat_connections import HeartbeatConnections
from metadata_quorum.records import FenceBrokerRecord
from metadata_quorum.tests.test_service_pipeline import create, held_service
from metadata_quorum.tests.test_service_transactions import settle
from wire.connection import Request
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS

EPOCH = 1           # held_service registers broker 0 with epoch 1


class Clock:
    def __init__(self):
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


class Conn:
    """What the service keeps of a connection: hooks run once it is gone (common/network.py)."""

    def __init__(self):
        self.on_close: list = []

    def close(self) -> None:
        for hook in self.on_close:
            hook()


def heartbeat(epoch: int = EPOCH) -> Request:
    cls = REQUESTS[ApiKey.BROKER_HEARTBEAT]
    body = cls.decode(cls(broker_id=0, broker_epoch=epoch, current_metadata_offset=0).encode(1), 1)
    return Request(ApiKey.BROKER_HEARTBEAT, 1, 1, "broker-0", None, body, 0)


async def service(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(service_module, "now_ms", clock)
    svc = await held_service()
    svc.controller.heartbeats.touch(0, clock.ms)
    return svc, clock


def fenced(svc, now_ms: int) -> list[int]:
    return [rec.broker_id for rec in svc.controller.tick(now_ms, False)
            if isinstance(rec, FenceBrokerRecord)]


async def test_a_connection_closed_after_a_late_answer_leaves_the_session_to_its_timeout(monkeypatch):
    svc, clock = await service(monkeypatch)
    grace = svc.config.disconnect_fence_ms
    svc.quorum.hold = True
    conn, answers = Conn(), []
    async with trio.open_nursery() as nursery:
        # a command in flight: the heartbeat's answer waits for its commit
        nursery.start_soon(svc.mutate, create(svc, "t"))
        await settle()
        assert svc.quorum.held

        async def send():
            answers.append(await svc._dispatch_wire(conn, heartbeat()))
        nursery.start_soon(send)
        await settle()
        assert not answers                      # waits for the commit in flight
        clock.ms += 4_000                       # longer than the broker waits (2 intervals)
        svc.quorum.release()
    assert answers and answers[0].error_code == 0
    conn.close()                                # the broker had given up: a new connection
    clock.ms += grace + 100
    assert fenced(svc, clock.ms) == []          # its session (9 s from the arrival) runs on
    svc.quorum.hold = False
    again = Conn()
    await svc._dispatch_wire(again, heartbeat())    # its retry, on a new connection
    clock.ms += 8_000
    assert fenced(svc, clock.ms) == []


async def test_a_connection_closed_after_a_timely_answer_is_a_crash(monkeypatch):
    svc, clock = await service(monkeypatch)
    conn = Conn()
    await svc._dispatch_wire(conn, heartbeat())
    conn.close()                                # the kernel closed a killed broker's socket
    clock.ms += svc.config.disconnect_fence_ms // 2
    assert fenced(svc, clock.ms) == []
    clock.ms += svc.config.disconnect_fence_ms
    assert fenced(svc, clock.ms) == [0]         # long before its session would have ended


async def test_a_heartbeat_counts_from_its_arrival_not_from_its_turn(monkeypatch):
    svc, clock = await service(monkeypatch)
    timeout = svc.controller.heartbeats.session_timeout_ms
    answers = []
    async with trio.open_nursery() as nursery:
        await svc.lock.acquire()                # a long command holds the controller
        clock.ms += timeout - 1_000

        async def send():
            answers.append(await svc._dispatch_wire(Conn(), heartbeat()))
        nursery.start_soon(send)
        await settle()
        assert not answers
        clock.ms += 2_000                       # past the session of the heartbeat before
        assert fenced(svc, clock.ms) == []      # the waiting one counts
        svc.lock.release()
    assert answers[0].error_code == 0


async def test_a_stale_heartbeat_does_not_keep_a_session(monkeypatch):
    svc, clock = await service(monkeypatch)
    timeout = svc.controller.heartbeats.session_timeout_ms
    clock.ms += timeout - 1_000
    answer = await svc._dispatch_wire(Conn(), heartbeat(epoch=EPOCH + 7))
    assert answer.error_code != 0
    clock.ms += 2_000
    assert fenced(svc, clock.ms) == [0]


def test_connection_bookkeeping():
    conns = HeartbeatConnections(grace_ms=500)
    a, b = object(), object()
    assert conns.arrived(a, 1, 0) is True       # new: watch its close
    conns.answered(a, 10)
    assert conns.arrived(a, 1, 2_000) is False
    conns.answered(a, 2_010)
    assert conns.closed(a, 1) is True           # answered in time: a crash
    assert conns.arrived(b, 1, 3_000) is True
    conns.answered(b, 3_600)                    # late
    assert conns.closed(b, 1) is False
    conns.arrived(a, 2, 0)
    assert conns.closed(a, 2) is False          # closed while its heartbeat was being answered
    conns.arrived(a, 3, 0)
    conns.answered(a, 1)
    conns.arrived(b, 3, 5)                      # the broker moved to a newer connection
    conns.answered(b, 6)
    assert conns.closed(a, 3) is False
    assert conns.closed(b, 3) is True
    assert not conns.latest


def test_a_fencing_says_why():
    from metadata_quorum.controller.cluster_control import HeartbeatTracker
    tracker = HeartbeatTracker(9_000)
    tracker.touch(1, 0)
    tracker.touch(2, 0)
    tracker.cut_short(2, 1_000, 500)
    assert tracker.why_expired(1, 9_500) == \
        "no heartbeat for 9500 ms (broker.session.timeout.ms 9000)"
    assert tracker.why_expired(2, 1_600) == \
        "its heartbeat connection closed 600 ms ago and no heartbeat came"
    tracker.touch(2, 1_700)                     # a heartbeat came after all
    assert tracker.why_expired(2, 11_000).startswith("no heartbeat for 9300 ms")
    tracker.cut_short(2, 12_000, 500)
    tracker.reset_sessions([1, 2], 13_000)      # a newly active controller: fresh sessions
    assert tracker.why_expired(2, 22_500).startswith("no heartbeat for 9500 ms")
