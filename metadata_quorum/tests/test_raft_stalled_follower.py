"""quorum/raft.py DurableSyncObj._read_before_electing: a follower whose Raft thread is held up
past its election timeout while the leader keeps heartbeating reads those heartbeats before it
checks its deadline, so a healthy leader is not deposed (pysyncobj has no pre-vote). Three voters
in one process; the hold-up is a sleep at the start of one follower's tick, where pysyncobj
checks the deadline. The hold-up (0.5 s) stays under the Raft connections' timeout (0.8 s, after
which pysyncobj drops a silent connection) and the follower's deadline is set to pass during it,
so the one variable is what the follower does first when it resumes."""

import threading
import time

from metadata_quorum.quorum.raft import RaftQuorum, raft_clock
from partition_server.testing import free_base_port

HELD_UP_S = 0.5


def wait_for(what, cond, deadline_s=30):
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_held_up_follower_reads_the_leaders_heartbeats_before_calling_an_election(tmp_path):
    base = free_base_port()
    peers = {i: f"127.0.0.1:{base + i}" for i in range(3)}
    nodes = [RaftQuorum(i, peers, str(tmp_path / str(i)), "test-password") for i in range(3)]
    try:
        leader = wait_for("a leader", lambda: next((n for n in nodes if n.is_leader), None))
        follower = next(n for n in nodes if n is not leader)
        wait_for("every node to know the leader",
                 lambda: all(n.obj._getLeader() is not None for n in nodes))
        term = leader.obj._getTerm()

        held_up, ticks_after = threading.Event(), []
        tick = follower.obj._onTick

        def tick_held_up_once(timeToWait=0.0):
            if not held_up.is_set():
                held_up.set()
                follower.obj._SyncObj__raftElectionDeadline = raft_clock() + 0.1
                time.sleep(HELD_UP_S)     # the leader heartbeats every 130 ms meanwhile
            else:
                ticks_after.append(1)
            tick(timeToWait)
        follower.obj._onTick = tick_held_up_once

        # a dozen ticks after the hold-up: any election it caused has been called by then
        wait_for("ticks after the hold-up", lambda: len(ticks_after) >= 12, HELD_UP_S + 30)
        assert leader.is_leader
        assert [n.obj._getTerm() for n in nodes] == [term] * 3
    finally:
        for n in nodes:
            n.destroy()
