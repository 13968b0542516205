"""The seeded simulation with the balancer on (issue 19 item 6b): three brokers, RF 3, a fourth
broker joins at a random time amid the other faults (crashes, power losses, pauses, partitions,
flaky links). Every safety invariant after every event (no acknowledged record lost, one leader
per epoch, the ISR inside the replica set) and, at each balancer decision, its contract on the
image it decided from (simulation.on_balancer_moves: a moving partition is left alone; a copy
starts only from a partition in sync at its full replica set, RF kept; a reorder makes an
in-sync replica preferred). After healing: replica counts within ±1 over the 4 brokers, no
balancer move pending, every partition's replicas in sync and agreeing.

Seeds 1-40 run at 20,000 events (CI runs 1-8 at 15,000): all pass except 28, which fails at
event 15,879 (a leader's high watermark above an ISR member's log end) identically with the
balancer disabled — broker 3 then hosts nothing, its joining only changes the order of events;
not traced (the open power-loss finding of test_reassignment_sim.py has this shape). With random
reassignments as well ({"reassign": True}, 15,000 events) seeds 1-20 pass except 15, which fails
at event 8,911 identically with the balancer disabled (an acknowledged record missing from an ISR
member after random moves: a finding of the reassign mode, not of the balancer; left open)."""

import os

import pytest

from chaos_tests.sim.__main__ import parse_seeds
from chaos_tests.sim.simulation import run

SEEDS = parse_seeds(os.environ.get("RAFTKA_SIM_BALANCE_SEEDS", "1-8"))
EVENTS = int(os.environ.get("RAFTKA_SIM_EVENTS", "15000"))


@pytest.mark.parametrize("seed", SEEDS)
def test_seed_with_a_joining_broker_balances(seed):
    r = run(seed, EVENTS, {"balance": True})
    assert r.acked > 0 and r.faults.get("joined") == 1, r.faults
    assert r.converged              # includes: replica counts within ±1, no move pending


def test_the_seeds_do_move_replicas_under_faults():
    """The balancer starts a copy onto the new broker while the nemesis still strikes (4 of the
    first 6 seeds at 15,000 events; the others once the faults are healed)."""
    moved = sum(run(s, EVENTS, {"balance": True}).faults.get("balancer-move", 0)
                for s in SEEDS[:6])
    assert moved >= 3


@pytest.mark.parametrize("seed", [1, 7, 18])
def test_seed_with_reassignments_too(seed):
    r = run(seed, EVENTS, {"balance": True, "reassign": True})
    assert r.converged and r.faults.get("joined") == 1
