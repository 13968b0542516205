"""Virtual clock, event queue and an in-memory network that misbehaves on purpose.

Everything that happens in a simulation is an event on one queue ordered by (virtual time,
sequence number); all randomness comes from one seeded `random.Random`, so a seed replays the
same run exactly. Nothing here reads the wall clock.
"""

from __future__ import annotations

import dataclasses
import heapq
import random
from typing import Callable


class Scheduler:
    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.now = 0                      # virtual milliseconds
        self._queue: list = []
        self._seq = 0
        self.events = 0

    def at(self, time_ms: int, fn: Callable, *args) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (max(time_ms, self.now), self._seq, fn, args))

    def after(self, delay_ms: int, fn: Callable, *args) -> None:
        self.at(self.now + delay_ms, fn, *args)

    def step(self) -> bool:
        if not self._queue:
            return False
        self.now, _, fn, args = heapq.heappop(self._queue)
        self.events += 1
        fn(*args)
        return True


@dataclasses.dataclass
class LinkFaults:
    """How the network treats every message right now (the nemesis changes these)."""
    drop: float = 0.0                 # probability a message is lost
    duplicate: float = 0.0            # probability it is delivered twice
    min_delay_ms: int = 1
    max_delay_ms: int = 5             # each copy gets its own delay: reordering comes from here


class Network:
    """Messages between named nodes. A node is reachable when it is up; a cut link (either
    direction or both) drops silently, like a partition that blackholes packets.

    Request/response pairing and "connection" semantics are the nodes' business: every node
    keeps the id of what it is waiting for and ignores stale or duplicated answers, the way a
    client drops a connection after a timeout and never reads its late replies.
    """

    def __init__(self, sched: Scheduler):
        self.sched = sched
        self.nodes: dict = {}
        self.faults = LinkFaults()
        self.cut: set[tuple] = set()      # (src, dst) pairs that lose every message
        self.slow: dict = {}              # node → extra delay (ms) on everything it sends/gets
        self.sent = 0
        self.delivered = 0

    def add(self, name, node) -> None:
        self.nodes[name] = node

    def send(self, src, dst, msg) -> None:
        self.sent += 1
        if (src, dst) in self.cut:
            return
        rng = self.sched.rng
        f = self.faults
        if f.drop and rng.random() < f.drop:
            return
        copies = 2 if f.duplicate and rng.random() < f.duplicate else 1
        extra = self.slow.get(src, 0) + self.slow.get(dst, 0)
        for _ in range(copies):
            self.sched.after(rng.randint(f.min_delay_ms, f.max_delay_ms) + extra, self._deliver,
                             src, dst, msg)

    def _deliver(self, src, dst, msg) -> None:
        if (src, dst) in self.cut:
            return                        # cut while in flight
        node = self.nodes.get(dst)
        if node is not None and node.accepts():
            self.delivered += 1
            node.receive(src, msg)

    # -- partitions -----------------------------------------------------------------------------

    def isolate(self, name, others) -> None:
        for o in others:
            if o != name:
                self.cut.add((name, o))
                self.cut.add((o, name))

    def cut_one_way(self, src, dst) -> None:
        self.cut.add((src, dst))

    def heal(self) -> None:
        self.cut.clear()
