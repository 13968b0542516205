"""A heartbeat's exchange with one controller, in a task of its own so it can outlive the call.

Kafka's broker keeps one heartbeat in flight to the active controller and waits for its answer
on the same connection. Ours gives each heartbeat a budget of two intervals (a broker must find
a newly elected controller well inside its 9 s session), and a request that outlived its budget
used to close its connection. Against an active controller that is only slow that was the
wrong move: at 30,000 partitions its event loop ran steps of 0.3-1.3 s, and each retry needed
a new connection, a turn to accept it and one to answer ApiVersions before the heartbeat was
even sent, so the controller read no heartbeat for 9 s and fenced live brokers
(partition_server/tests/test_heartbeat_busy_controller.py reads none in 12 s that way).

So when the budget runs out after the request reached the controller (its kernel acknowledged
every byte: `BrokerConnection.all_acknowledged`), the exchange is parked: it keeps its
connection and waits for the answer, up to `PARKED_TIMEOUT_S`, while the broker's next calls
ask the other voters first and then wait on it again. The controller counts a heartbeat from its
arrival (metadata_quorum/service.py, as Kafka since KAFKA-17793), so a parked heartbeat keeps
the session alive as soon as the controller reads it. A voter cut off (packets dropped) has not
acknowledged the bytes: that exchange is cancelled and its connection closed, as before, so a
broker still moves to the controller elected in its place (issue 20's netfaults test).
"""

from __future__ import annotations

from typing import Callable

import trio

from common.connection import BrokerConnection, ConnectionClosed
from wire.errors import DecodeError

# An exchange (connecting included) takes this long at most (the call's 5 s request timeout
# before parking existed); then it is given up and the next call connects afresh.
PARKED_TIMEOUT_S = 5.0
# A connection whose exchange was given up is closed this much later, not at once: the
# controller fences a broker soon after its heartbeat connection closes (disconnect fencing,
# metadata_quorum/heartbeat_connections.py), and a broker that gave up on a slow controller is
# alive. Closed at once, it was fenced whenever its next heartbeat, on a new connection, was
# not read within the controller's 500 ms grace: at 30,000 partitions the one broker left
# leading everything after two others went down was fenced that way, all partitions offline
# (a chaos campaign round, its broker's clock jumped forward: every deadline passed at once).
# Kept open, the connection closes after the broker's session (9 s) would have ended anyway,
# by when a live broker has heartbeated on another one; a broker that dies closes it at once.
RETIRE_AFTER_S = 10.0
FAILURES = (ConnectionClosed, OSError, DecodeError, trio.TooSlowError)


class Exchange:
    """One request on one connection (connected first when `on_connected` is given: the
    connection is new), run by `run` in a nursery that outlives the caller."""

    def __init__(self, conn: BrokerConnection, message, version: int,
                 on_connected: Callable[[], None] | None = None):
        self.conn, self.message, self.version = conn, message, version
        self._on_connected = on_connected
        self.stage = "while connecting" if on_connected is not None else "after sending"
        self.done = trio.Event()
        self.response = None
        self.error: BaseException | None = None
        self._scope = trio.CancelScope()

    async def run(self) -> None:
        failed: list = []           # the socket a failed request left (see RETIRE_AFTER_S)
        self.conn.retire = failed.append
        self._scope.deadline = trio.current_time() + PARKED_TIMEOUT_S
        with self._scope:
            try:
                if self._on_connected is not None:
                    await self.conn.connect(timeout_s=PARKED_TIMEOUT_S)
                    self._on_connected()
                    self.stage = "after sending"
                self.response = await self.conn.request(self.message, self.version,
                                                        timeout_s=PARKED_TIMEOUT_S)
            except FAILURES as exc:
                self.error = exc
        if self._scope.cancelled_caught:
            self.error = trio.TooSlowError()
        self.done.set()
        if self.error is None:
            return
        try:
            if failed and isinstance(self.error, trio.TooSlowError):
                await trio.sleep(RETIRE_AFTER_S)    # given up, not broken: nothing reads it
        finally:
            with trio.CancelScope(shield=True):
                for stream in failed:
                    await trio.aclose_forcefully(stream)
                await self.conn.aclose()        # a failed connect leaves its socket open

    def cancel(self) -> None:
        """Give up on it: its connection is never used again (a late answer would be taken for
        the next request's) and is closed RETIRE_AFTER_S later."""
        self._scope.cancel()
