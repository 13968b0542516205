"""The seeded simulation with partition moves (KIP-455) among its faults: random targets and
cancels while brokers crash, pause, lose power and get cut off. Every safety invariant after
every event (no acknowledged record lost, one leader per epoch, the ISR inside the replica set),
then every move finishes and the replicas agree after healing.

Found and fixed with it: a cancel (or a replacing target) reverting uncleanly when only adding
replicas were in sync lost acknowledged records (seeds 20, 35 of 1-119: now refused as Kafka
does). While looking at seed 62, reasoning (not a failing seed) showed a replica removed and
added back within one metadata batch could join the ISR on its deleted log's fetch position: now
forgotten (PartitionState.restart_followers, unit-tested in partition_server/tests).
Open findings, not about reassignment (seen only because moves change the event sequence):
seeds 62 and 278 — a leader admits a follower to the ISR from a fetch sent just before that
follower lost power (still registered and unfenced, so the controller accepts; KIP-903's broker
epochs in AlterPartition would not catch it either); seed 274 — after a power loss cut a
follower's log, it stays stuck ("follower append at 169 below log end offset 171") and never
rejoins (the moves there only reorder replicas)."""

import os

import pytest

from chaos_tests.sim.__main__ import parse_seeds
from chaos_tests.sim.simulation import run

SEEDS = parse_seeds(os.environ.get("RAFTKA_SIM_REASSIGN_SEEDS", "1-8"))
EVENTS = int(os.environ.get("RAFTKA_SIM_EVENTS", "4000"))


@pytest.mark.parametrize("seed", SEEDS)
def test_seed_with_reassignments_keeps_invariants_and_converges(seed):
    r = run(seed, EVENTS, {"reassign": True})
    assert r.acked > 0 and r.faults.get("reassign", 0) > 0, r.faults
    assert r.converged
