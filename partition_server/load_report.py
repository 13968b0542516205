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
  for what it held.
A partition this broker stopped leading is not withdrawn: its new leader reports it, and the
controller forgets partitions that left the image.
"""

from __future__ import annotations

GRANULARITY_BYTES = 1 << 20
GRANULARITY_FRACTION = 0.05
DEFAULT_INTERVAL_MS = 30_000


class LoadReporter:
    def __init__(self, interval_ms: int = DEFAULT_INTERVAL_MS):
        self.interval_ms = interval_ms
        self._acked: dict = {}          # {(topic, partition): size} the current peer holds
        self._peer = None               # whom `_acked` was delivered to (a connection)
        self._next_due_ms = 0

    def _fresh(self, peer) -> bool:
        """`peer` (None: not connected yet) does not hold our last report."""
        return peer is None or peer is not self._peer

    def due(self, now_ms: int, peer) -> bool:
        return self._fresh(peer) or now_ms >= self._next_due_ms

    def report(self, sizes: dict, peer) -> tuple[bool, dict]:
        """(full, {(topic, partition): size} to send) for the current `sizes` of partitions
        led here."""
        if self._fresh(peer):
            return True, dict(sizes)
        out = {}
        for tp, size in sizes.items():
            old = self._acked.get(tp)
            if old is None or abs(size - old) >= max(GRANULARITY_BYTES,
                                                     GRANULARITY_FRACTION * old):
                out[tp] = size
        return False, out

    def delivered(self, full: bool, sent: dict, peer, now_ms: int) -> None:
        """The heartbeat carrying (full, sent) was answered by `peer`."""
        if full:
            self._acked, self._peer = dict(sent), peer
        elif not self._fresh(peer):
            self._acked.update(sent)
        else:
            # a change list reached a controller that lacks its base (the active one moved
            # between computing and sending): the next report is full
            self._acked, self._peer = {}, None
        self._next_due_ms = now_ms + self.interval_ms

def by_topic(sizes: dict) -> dict[str, list[tuple[int, int]]]:
    """{topic: [(partition, size), ...]} in a fixed order, the wire's shape."""
    out: dict[str, list] = {}
    for (topic, partition), size in sorted(sizes.items()):
        out.setdefault(topic, []).append((partition, size))
    return out
