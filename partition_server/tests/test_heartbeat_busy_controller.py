"""Heartbeats to an active controller whose event loop is busy (ControllerClient.call_active).

At 30,000 partitions an active controller's loop ran steps of 0.3-1.3 s (big commands applied
to the image). A heartbeat not answered within its budget closed its connection, and each
retry needed a new connection, a turn to accept it and a turn to answer its ApiVersions
before the heartbeat itself was even sent: the controller read no heartbeat for 9 s and fenced
live brokers. The fake controller here is that loop: one event at a time (an accepted
connection, a request read, a connection closed), each followed by a blocking step."""

import selectors
import socket
import threading
import time

import trio

from partition_server.controller_client import ControllerClient
from partition_server.tests.test_controller_client import api_versions_response
from wire.connection import ServerConnection
from wire.errors import ErrorCode
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import RESPONSES

STEP_S = 1.2      # the busy loop's step: longer than the heartbeat's budget (2 × 0.5 s)


def _answer(req):
    if req.api_key == ApiKey.API_VERSIONS:
        return api_versions_response()
    return RESPONSES[ApiKey.BROKER_HEARTBEAT](error_code=ErrorCode.NONE, is_caught_up=True,
                                              is_fenced=False)


class BusyController:
    """A controller (its own thread) that blocks `step_s` after every event it handles; it
    notes when it read each heartbeat, and how many connections it accepted."""

    def __init__(self, step_s: float = STEP_S):
        self.step_s = step_s
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.heartbeats: list[float] = []
        self.accepted = 0
        self._stop = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        sel = selectors.DefaultSelector()
        sel.register(self.listener, selectors.EVENT_READ, None)
        while not self._stop:
            for key, _ in sel.select(timeout=0.05)[:1]:         # one event per step
                if key.data is None:
                    sock, _ = self.listener.accept()
                    self.accepted += 1
                    sel.register(sock, selectors.EVENT_READ, ServerConnection(
                        {ApiKey.API_VERSIONS: (0, 3), ApiKey.BROKER_HEARTBEAT: (0, 1)}))
                else:
                    self._serve(sel, key.fileobj, key.data)
                time.sleep(self.step_s)

    def _serve(self, sel, sock, conn):
        data = sock.recv(65536)
        if not data:
            self._closed(sock)
            sel.unregister(sock)
            sock.close()
            return
        conn.receive_data(data)
        while (req := conn.next_request()) is not None:
            self._handle(sock, conn, req)

    def _closed(self, sock):
        pass

    def _handle(self, sock, conn, req):
        if req.api_key == ApiKey.BROKER_HEARTBEAT:
            self.heartbeats.append(time.monotonic())
        try:
            sock.sendall(b"".join(conn.send_response_chunks(req, _answer(req))))
        except OSError:
            pass                                    # the broker gave up on this connection

    def close(self):
        self._stop = True
        self._thread.join(5)
        self.listener.close()


def _heartbeat_for(voters: dict, seconds: float) -> None:
    client = ControllerClient(0, voters, "127.0.0.1", 9092, None, heartbeat_interval_ms=500)
    client.broker_epoch = 1

    async def main():
        async with trio.open_nursery() as n:
            n.start_soon(client.heartbeat_loop, lambda: None)
            await trio.sleep(seconds)
            n.cancel_scope.cancel()
        await client.aclose()

    trio.run(main)


def test_a_busy_active_controller_keeps_reading_heartbeats_on_one_connection():
    """Before heartbeat_exchange.py it read none in 12 s."""
    busy = BusyController()
    started = time.monotonic()
    try:
        _heartbeat_for({3000: ("127.0.0.1", busy.port)}, 12)
    finally:
        busy.close()
    reads = [started] + busy.heartbeats
    gaps = [b - a for a, b in zip(reads, reads[1:])]
    # each heartbeat is read at the loop's next step or the one after: never a session's
    # worth of silence (9 s); one connection, kept while the controller is merely slow
    assert len(busy.heartbeats) >= 4 and max(gaps) < 3 * STEP_S + 0.5, gaps
    assert busy.accepted == 1, busy.accepted


def test_a_paused_controller_that_has_the_heartbeat_does_not_hold_back_the_new_one():
    """A paused process's kernel still accepts and acknowledges (the heartbeat is parked
    there), and the controller elected in its place hears from the broker at its next call."""
    paused = socket.create_server(("127.0.0.1", 0))     # listens; its process reads nothing
    active = BusyController(step_s=0)
    started = time.monotonic()
    try:
        _heartbeat_for({3000: ("127.0.0.1", paused.getsockname()[1]),
                        3001: ("127.0.0.1", active.port)}, 5)
    finally:
        active.close()
        paused.close()
    # the first call waits out its budget (1 s) at the paused one, the next asks 3001 first
    # (waiting at the paused one first, it would reach 3001 only when the parked exchange
    # gives up, after 5 s)
    assert active.heartbeats and active.heartbeats[0] - started < 3.5, active.heartbeats
    assert len(active.heartbeats) >= 3, active.heartbeats


class MuteController(BusyController):
    """Answers ApiVersions, reads heartbeats and never answers them; notes when each
    connection's first heartbeat came and when the broker closed it."""

    def __init__(self):
        self.first_heartbeat: dict = {}
        self.closed: dict = {}
        super().__init__(step_s=0)

    def _closed(self, sock):
        self.closed[sock] = time.monotonic()

    def _handle(self, sock, conn, req):
        if req.api_key == ApiKey.BROKER_HEARTBEAT:
            self.first_heartbeat.setdefault(sock, time.monotonic())
        else:
            sock.sendall(b"".join(conn.send_response_chunks(req, _answer(req))))


def test_a_heartbeat_given_up_closes_its_connection_only_later(monkeypatch):
    """The controller fences a broker soon after its heartbeat connection closes (disconnect
    fencing); a broker that gave up on a slow controller is alive, so the connection it gave
    up is closed RETIRE_AFTER_S later, not at once (the sole broker left at 30,000 partitions
    was fenced that way in a campaign round)."""
    from partition_server import heartbeat_exchange
    monkeypatch.setattr(heartbeat_exchange, "PARKED_TIMEOUT_S", 1.0)
    monkeypatch.setattr(heartbeat_exchange, "RETIRE_AFTER_S", 3.0)
    mute = MuteController()
    try:
        _heartbeat_for({3000: ("127.0.0.1", mute.port)}, 6)
        deadline = time.monotonic() + 10
        while not mute.closed and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        mute.close()
    first = min(mute.first_heartbeat, key=mute.first_heartbeat.get)
    # given up 1 s after it was sent: closed at once before, 3 s later now
    assert mute.closed[first] - mute.first_heartbeat[first] > 2.5, (mute.first_heartbeat,
                                                                    mute.closed)
