"""What a broker tells the active controller about its load, for the balancer (issue 19 item
6b): the bytes on disk of the partitions it leads, carried by Raftka's tagged fields on
BrokerHeartbeat (wire/codegen/raftka_extensions.json). Pure: the caller passes sizes and times.

The controller keeps what it heard as soft state (metadata_quorum/controller/load_reports.py),
so a report only has to say what changed since the last report *that controller* answered:

- the first report to a controller over a connection is full (every partition led here, flagged
  `full`); a new connection may be a restarted controller or a new active one, whose state
  starts empty, so it is full again;
- later ones carry the partitions whose size moved by at least GRANULARITY_BYTES (or
  GRANULARITY_FRACTION of the size last reported) and partitions newly led, not every byte of
  growth: the balancer needs sizes to a few percent, not every heartbeat's bytes;
- a report is due every `interval_ms` (not every heartbeat: sizing every led log is O(led
  partitions), which an idle cluster must not pay each heartbeat);
- only an answered heartbeat counts as delivered: one that timed out is sent again in full
  for what it held;
- a heartbeat carries at most MAX_REPORT_PARTITIONS partitions: a full report of more goes out
  in parts, one per heartbeat, with `full` set on the last (the controller counts a broker's
  report complete only then). A broker that became the leader of 31,000 partitions (two of
  three brokers down) sent a 400 KB heartbeat; its controller, busy with those brokers'
  ISR changes, left most of it unacknowledged in the socket, so the heartbeat was given up and
  its connection closed (heartbeat_exchange.py), and the controller fenced the one live broker
  for the closed connection: every partition went offline. Kafka's heartbeats are tiny.
A partition this broker stopped leading is not withdrawn: its new leader reports it, and the
controller forgets partitions that left the image.
"""

from __future__ import annotations

GRANULARITY_BYTES = 1 << 20
GRANULARITY_FRACTION = 0.05
DEFAULT_INTERVAL_MS = 30_000
# ~13 bytes a partition on the wire: a report part stays ~26 KB, far inside a loopback
# socket's initial receive buffer (128 KB) even when the controller reads nothing for a while
MAX_REPORT_PARTITIONS = 2_000


class LoadReporter:
    def __init__(self, interval_ms: int = DEFAULT_INTERVAL_MS,
                 max_partitions: int = MAX_REPORT_PARTITIONS):
        self.interval_ms = interval_ms
        self.max_partitions = max_partitions
        self._acked: dict = {}          # {(topic, partition): size} the current peer holds
        self._peer = None               # whom `_acked` was delivered to (a connection)
        self._next_due_ms = 0
        # a full report going out in parts: to whom, and the parts it answered so far
        self._building = None
        self._parts: dict = {}
        self._more = False              # a change list was cut at max_partitions: go on soon

    def _fresh(self, peer) -> bool:
        """`peer` (None: not connected yet) does not hold our last report."""
        return peer is None or peer is not self._peer

    def due(self, now_ms: int, peer) -> bool:
        return self._fresh(peer) or self._more or now_ms >= self._next_due_ms

    def report(self, sizes: dict, peer) -> tuple[bool, dict]:
        """(full, {(topic, partition): size} to send) for the current `sizes` of partitions
        led here; `full` is set on a full report's last part only."""
        if self._fresh(peer):
            have = self._parts if peer is not None and peer is self._building else {}
            rest = [tp for tp in sizes if tp not in have]
            if len(rest) <= self.max_partitions:
                return True, {tp: sizes[tp] for tp in rest}
            return False, {tp: sizes[tp] for tp in sorted(rest)[:self.max_partitions]}
        out = {}
        for tp, size in sizes.items():
            old = self._acked.get(tp)
            if old is None or abs(size - old) >= max(GRANULARITY_BYTES,
                                                     GRANULARITY_FRACTION * old):
                out[tp] = size
        self._more = len(out) > self.max_partitions
        if self._more:
            out = {tp: out[tp] for tp in sorted(out)[:self.max_partitions]}
        return False, out

    def delivered(self, full: bool, sent: dict, peer, now_ms: int) -> None:
        """The heartbeat carrying (full, sent) was answered by `peer`."""
        if self._fresh(peer):
            # A part of a full report to `peer` (the last one when `full`). Or a change list
            # that reached a controller other than the one it was computed for (the active one
            # moved meanwhile): that controller lacks the base, so it counts as a first part
            # and a full report follows. Parts another peer answered do not count for this one.
            if peer is not self._building:
                self._building, self._parts = peer, {}
            self._parts.update(sent)
            if not full:
                return
            # (a last part computed for another peer leaves this one with less than the
            # whole: what it lacks is missing from `_acked`, so the next change lists say it)
            self._acked, self._peer = self._parts, peer
            self._building, self._parts = None, {}
        else:
            self._acked.update(sent)
        self._next_due_ms = now_ms + self.interval_ms


def by_topic(sizes: dict) -> dict[str, list[tuple[int, int]]]:
    """{topic: [(partition, size), ...]} in a fixed order, the wire's shape."""
    out: dict[str, list] = {}
    for (topic, partition), size in sorted(sizes.items()):
        out.setdefault(topic, []).append((partition, size))
    return out
