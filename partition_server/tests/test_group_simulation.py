"""Seeded simulation of classic-protocol rebalances on the pure group state machine (issue #7).

Simulated consumers follow the client side of the protocol (JoinGroup with MEMBER_ID_REQUIRED,
the leader computes a range assignment, SyncGroup, heartbeats, rejoin on REBALANCE_IN_PROGRESS /
ILLEGAL_GENERATION, a fresh member id after UNKNOWN_MEMBER_ID) over a network with random
delays, while members die, stall past their session timeout, leave and come back. Invariants:

- after every event: no partition is handed to two members in the same generation, every
  assignment a member receives was made by that generation's leader, and no member receives an
  assignment before its generation's record is stored (the store takes a while and sometimes
  fails, which must rebalance);
- once the faults stop, the group becomes Stable with every live member in it and every partition
  owned exactly once (liveness).

A failure prints its seed; `RAFTKA_GROUP_SIM_SEED=N` replays one seed, `RAFTKA_SOAK=1` runs many.
"""

from __future__ import annotations

import heapq
import os
import random

import msgpack
import pytest

from partition_server.group.state import (GroupConfig, GroupCoordinatorState, GroupState,
                                          JoinResult, StoreGroup, SyncResult)
from wire.errors import ErrorCode

PARTITIONS = 7
SESSION_MS, REBALANCE_MS, HEARTBEAT_MS = 6000, 20_000, 1000


class Sim:
    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.now = 0
        self.queue: list = []
        self.seq = 0
        self.coord = GroupCoordinatorState(GroupConfig(initial_rebalance_delay_ms=500))
        self.clients: list[Client] = []
        self.handed: dict[int, dict[int, str]] = {}     # generation → partition → member
        self.leaders: dict[int, str] = {}               # generation → leader member id
        self.stored: set[int] = set()                   # generations whose record is durable
        self.failed_stores = 0
        self.events = 0

    def at(self, t: int, fn, *args) -> None:
        self.seq += 1
        heapq.heappush(self.queue, (t, self.seq, fn, args))

    def net(self) -> int:
        return self.rng.randint(1, 40)

    def run_until(self, t_end: int) -> None:
        while self.queue and self.queue[0][0] <= t_end:
            t, _, fn, args = heapq.heappop(self.queue)
            self.now = max(self.now, t)
            fn(*args)
            self.events += 1
        self.now = t_end

    # -- the coordinator edge: requests arrive after a delay, answers go back after another -----

    def deliver(self, effects) -> None:
        for e in effects:
            if isinstance(e, StoreGroup):              # an acks=all append: slower, may fail
                self.at(self.now + 3 * self.net(), self._store_done, e)
                continue
            client = next((c for c in self.clients if c.member_id == e.member_id and c.waiting), None)
            if client is not None:
                self.at(self.now + self.net(), client.on_result, e)

    def _store_done(self, e: StoreGroup) -> None:
        err = ErrorCode.NONE
        if self.rng.random() < 0.1:
            err = ErrorCode.COORDINATOR_NOT_AVAILABLE
            self.failed_stores += 1
        else:
            self.stored.add(e.generation_id)
        self.deliver(self.coord.stored(e.group_id, e.generation_id, err, self.now))

    def tick(self) -> None:
        self.deliver(self.coord.tick(self.now))
        self.at(self.now + 100, self.tick)

    def record_sync(self, member_id: str, generation: int, assignment: bytes) -> None:
        assert generation in self.stored, \
            f"{member_id} got its generation {generation} assignment before it was stored"
        parts = msgpack.unpackb(assignment) if assignment else []
        owners = self.handed.setdefault(generation, {})
        for p in parts:
            other = owners.setdefault(p, member_id)
            assert other == member_id, \
                f"partition {p} handed to {other} and {member_id} in generation {generation}"


class Client:
    def __init__(self, sim: Sim, name: str):
        self.sim, self.name = sim, name
        self.member_id = ""
        self.generation = -1
        self.assignment: list[int] = []
        self.state = "unjoined"
        self.alive = True
        self.stalled_until = 0
        self.waiting = False
        self.epoch = 0              # bumps on each (re)join so stale callbacks are ignored

    def active(self) -> bool:
        return self.alive and self.sim.now >= self.stalled_until

    def join(self) -> None:
        if not self.alive:
            return
        if self.sim.now < self.stalled_until:            # a stalled client acts when it wakes
            return self.sim.at(self.stalled_until, self.join)
        self.state, self.waiting, self.assignment = "joining", True, []
        self.epoch += 1
        self.sim.at(self.sim.now + self.sim.net(), self._join_arrives, self.epoch)

    def _join_arrives(self, epoch: int) -> None:
        res, effects, mid = self.sim.coord.join(
            "g", self.member_id, None, self.name, "/sim", SESSION_MS, REBALANCE_MS, "consumer",
            [("range", b"sub")], True, self.sim.now)
        if not self.member_id:
            self.member_id = mid
        self.sim.deliver(effects)
        if res is not None:
            self.sim.at(self.sim.now + self.sim.net(), self.on_result, res)

    def on_result(self, res) -> None:
        if not self.alive:
            return
        if self.sim.now < self.stalled_until:           # a stalled client reads it later
            self.sim.at(self.stalled_until, self.on_result, res)
            return
        self.waiting = False
        if isinstance(res, JoinResult):
            if res.error == ErrorCode.MEMBER_ID_REQUIRED:
                self.member_id = res.member_id
                return self.join()
            if res.error != ErrorCode.NONE:
                return self._error(res.error)
            self.generation, self.state, self.waiting = res.generation_id, "syncing", True
            assignments = {}
            if res.leader == self.member_id:
                self.sim.leaders[res.generation_id] = self.member_id
                members = sorted(m for m, _, _ in res.members)
                for i, m in enumerate(members):          # range: contiguous slices
                    lo = i * PARTITIONS // len(members)
                    hi = (i + 1) * PARTITIONS // len(members)
                    assignments[m] = msgpack.packb(list(range(lo, hi)))
            self.sim.at(self.sim.now + self.sim.net(), self._sync_arrives, res.generation_id,
                        assignments)
        elif isinstance(res, SyncResult):
            if res.error != ErrorCode.NONE:
                return self._error(res.error)
            self.sim.record_sync(self.member_id, self.generation, res.assignment)
            self.assignment = msgpack.unpackb(res.assignment) if res.assignment else []
            self.state = "stable"
            self.sim.at(self.sim.now + HEARTBEAT_MS, self.heartbeat, self.epoch)

    def _sync_arrives(self, generation: int, assignments: dict) -> None:
        res, effects = self.sim.coord.sync("g", generation, self.member_id, assignments,
                                           now_ms=self.sim.now)
        self.sim.deliver(effects)
        if res is not None:
            self.sim.at(self.sim.now + self.sim.net(), self.on_result, res)

    def heartbeat(self, epoch: int) -> None:
        if epoch != self.epoch or self.state != "stable" or not self.alive:
            return
        if self.sim.now < self.stalled_until:
            return self.sim.at(self.stalled_until, self.heartbeat, epoch)
        err = self.sim.coord.heartbeat("g", self.generation, self.member_id, self.sim.now)
        if err != ErrorCode.NONE:
            return self.sim.at(self.sim.now + self.sim.net(), self._error, err)
        self.sim.at(self.sim.now + HEARTBEAT_MS, self.heartbeat, epoch)

    def _error(self, err: ErrorCode) -> None:
        if err in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID):
            self.member_id = ""
        self.generation, self.assignment = -1, []
        self.join()

    def leave(self) -> None:
        if self.member_id:
            self.sim.deliver(self.sim.coord.leave("g", [(self.member_id, None)], self.sim.now)[1])
        self.alive = False


def run(seed: int, members: int = 4, fault_ms: int = 60_000, faults: int = 12) -> Sim:
    sim = Sim(seed)
    rng = sim.rng
    sim.at(0, sim.tick)
    for i in range(members):
        c = Client(sim, f"c{i}")
        sim.clients.append(c)
        sim.at(rng.randint(0, 2000), c.join)

    def fault():
        live = [c for c in sim.clients if c.alive]
        kind = rng.choice(["die", "stall", "leave", "newcomer", "short-stall"])
        if kind == "newcomer" or not live:
            c = Client(sim, f"c{len(sim.clients)}")
            sim.clients.append(c)
            c.join()
        elif kind == "die":
            rng.choice(live).alive = False                       # vanishes without leaving
        elif kind == "leave":
            rng.choice(live).leave()
        else:
            c = rng.choice(live)
            c.stalled_until = sim.now + (rng.randint(7000, 15000) if kind == "stall"
                                         else rng.randint(100, 2000))
    for _ in range(faults):
        sim.at(rng.randint(3000, fault_ms), fault)
    sim.run_until(fault_ms)
    for i in range(2):                  # two members join after the faults: never empty at the end
        c = Client(sim, f"late{i}")
        sim.clients.append(c)
        c.join()
    # stalled clients that were expired rejoin once they wake (their heartbeat gets an error)
    sim.run_until(fault_ms + SESSION_MS * 3 + REBALANCE_MS * 2)
    return sim


def check_liveness(sim: Sim) -> None:
    live = [c for c in sim.clients if c.alive]
    assert len(live) >= 2
    g = sim.coord.groups["g"]
    assert g.state is GroupState.STABLE, f"group ended {g.state.value}"
    assert {c.member_id for c in live} == set(g.members), "live members and group members differ"
    assert all(c.state == "stable" and c.generation == g.generation_id for c in live)
    owned = sorted(p for c in live for p in c.assignment)
    assert owned == list(range(PARTITIONS)), f"partitions owned: {owned}"


def _seeds():
    if os.environ.get("RAFTKA_GROUP_SIM_SEED"):
        return [int(os.environ["RAFTKA_GROUP_SIM_SEED"])]
    return list(range(400 if os.environ.get("RAFTKA_SOAK") else 40))


@pytest.mark.parametrize("seed", _seeds())
def test_rebalance_simulation(seed):
    try:
        sim = run(seed)
        check_liveness(sim)
    except AssertionError as exc:
        raise AssertionError(f"seed {seed} (replay: RAFTKA_GROUP_SIM_SEED={seed}): {exc}") from None
    assert sim.events > 500
    assert len(sim.handed) >= 2          # the faults did cause rebalances
