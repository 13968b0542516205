"""A Raft follower held up past its election timeout while the leader heartbeats the others
does not depose it (quorum/elections.py, in DurableSyncObj): a short hold-up reads the
heartbeats that came meanwhile before the deadline is checked (`_read_before_electing`); a long
one, after which pysyncobj has dropped the silent connection, asks for pre-votes first and gets
none (`_pre_vote_first`, quorum/pre_vote.py). A leader that is really gone is still replaced.
Three voters in one process; the hold-up is a sleep at the start of one follower's tick, where
pysyncobj checks the deadline, which is set to pass during it."""

import threading
import time

import pytest

from metadata_quorum.quorum.elections import raft_clock
from metadata_quorum.quorum.raft import RaftQuorum
from partition_server.testing import free_base_port

CONNECTION_TIMEOUT_S = 0.8      # raft_timing's connectionTimeout for the default timeouts


def wait_for(what, cond, deadline_s=30):
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def start(tmp_path):
    base = free_base_port()
    peers = {i: f"127.0.0.1:{base + i}" for i in range(3)}
    return [RaftQuorum(i, peers, str(tmp_path / str(i)), "test-password") for i in range(3)]


def settled_leader(nodes):
    leader = wait_for("a leader", lambda: next((n for n in nodes if n.is_leader), None))
    wait_for("every node to know the leader",
             lambda: all(n.obj._getLeader() is not None for n in nodes))
    return leader


def hold_up_once(node, seconds: float) -> list:
    """Holds `node`'s next tick up for `seconds`, its election deadline passing meanwhile;
    returns a list that grows by one per tick after that."""
    held_up, ticks_after = threading.Event(), []
    tick = node.obj._onTick

    def tick_held_up_once(timeToWait=0.0):
        if not held_up.is_set():
            held_up.set()
            node.obj._SyncObj__raftElectionDeadline = raft_clock() + 0.1
            time.sleep(seconds)           # the leader heartbeats every 130 ms meanwhile
        else:
            ticks_after.append(1)
        tick(timeToWait)
    node.obj._onTick = tick_held_up_once
    return ticks_after


@pytest.mark.parametrize("held_up_s", [CONNECTION_TIMEOUT_S - 0.3, CONNECTION_TIMEOUT_S + 1.2],
                         ids=["under-the-connection-timeout", "past-it"])
def test_a_held_up_follower_does_not_depose_a_healthy_leader(tmp_path, held_up_s):
    nodes = start(tmp_path)
    try:
        leader = settled_leader(nodes)
        follower = next(n for n in nodes if n is not leader)
        term = leader.obj._getTerm()
        ticks_after = hold_up_once(follower, held_up_s)
        # two seconds of ticks after the hold-up: any election it caused has been called by then
        wait_for("ticks after the hold-up", lambda: len(ticks_after) >= 16, held_up_s + 30)
        assert leader.is_leader
        assert [n.obj._getTerm() for n in nodes] == [term] * 3
        wait_for("the follower to follow the leader again",
                 lambda: follower.obj._getLeader() == leader.obj.selfNode)
    finally:
        for n in nodes:
            n.destroy()


def test_a_leader_that_is_gone_is_replaced(tmp_path):
    nodes = start(tmp_path)
    try:
        leader = settled_leader(nodes)
        term = leader.obj._getTerm()
        leader.destroy()
        rest = [n for n in nodes if n is not leader]
        new = wait_for("a new leader", lambda: next((n for n in rest if n.is_leader), None))
        assert new.obj._getTerm() > term
        wait_for("the other node to follow it",
                 lambda: all(n.obj._getLeader() == new.obj.selfNode for n in rest))
    finally:
        for n in nodes:
            n.destroy()
