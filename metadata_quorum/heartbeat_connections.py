"""Disconnect fencing (`raftka.controller.disconnect.fence.ms`): which connection each broker
heartbeats on, and whether that connection's closing says the broker died.

A process that dies (SIGKILL, crash) has its sockets closed by the kernel. When a broker's
heartbeat connection closes and no heartbeat follows within the grace, the controller fences it
then instead of waiting out its whole session (broker.session.timeout.ms, 9 s): leadership moves
~0.5 s after a leader crashes. A paused or partitioned broker keeps its socket, so only the
session applies to it. Kafka has no such shortcut (sessions only).

A live broker gives a heartbeat up when its answer is late and the controller's kernel has not
acknowledged the request (its call gives up after two heartbeat intervals and tries again on a
new connection); when it has, the broker keeps the connection and waits on
(partition_server/heartbeat_exchange.py), up to 5 s. A connection given up is closed 10 s
later, not at once, so that its close does not fence a live broker (since 2026-11-28). At 30,000 partitions the active
controller answered heartbeats in 1-4 s behind big commits; each such close cut a live broker's
session short, and its retry, unread in a new socket while the controller worked, came after
the grace: a live broker fenced in 6 of 21 controlled shutdowns. So a connection whose last
heartbeat was answered later than the grace (or not at all yet) proves nothing when it closes:
a controller that slow to answer is too slow to read a retry within the grace either, and the
session decides, as in Kafka.

Pure bookkeeping (no I/O, no clock): the service reports arrivals, answers and closes.
"""

from __future__ import annotations


class HeartbeatConnections:
    def __init__(self, grace_ms: int):
        self.grace_ms = grace_ms
        self.latest: dict[int, object] = {}     # broker id -> the connection of its latest heartbeat
        self._answering: dict[object, int] = {}     # connection -> its heartbeat's arrival (ms)
        self._late: set = set()                 # connections whose last answer took > grace

    def arrived(self, conn, broker_id: int, now_ms: int) -> bool:
        """A heartbeat from `broker_id` arrived on `conn`; True when `conn` is new for it (the
        caller watches its close then)."""
        self._answering[conn] = now_ms
        if self.latest.get(broker_id) is conn:
            return False
        self.latest[broker_id] = conn
        return True

    def answered(self, conn, now_ms: int) -> None:
        arrived = self._answering.pop(conn, None)
        if arrived is not None and now_ms - arrived > self.grace_ms:
            self._late.add(conn)
        else:
            self._late.discard(conn)

    def closed(self, conn, broker_id: int) -> bool:
        """`conn` closed: True when this should cut `broker_id`'s session short (it was the
        broker's latest heartbeat connection, and its last heartbeat was answered in time)."""
        late = conn in self._late or conn in self._answering
        self._late.discard(conn)
        self._answering.pop(conn, None)
        if self.latest.get(broker_id) is not conn:
            return False                        # it heartbeats on a newer connection
        del self.latest[broker_id]
        return not late
