"""quorum/raft.py raft_timing: heartbeats every 130 ms under the default 400-800 ms election
timeout, the tick with them, and a configuration pysyncobj accepts for shorter timeouts too (it
asserts the minimum election timeout exceeds three heartbeat periods). quorum/elections.py
follower_poll_s: a follower with a leader polls until its election deadline."""

import pytest
from pysyncobj import SyncObjConf

from metadata_quorum.quorum.elections import DEADLINE_SLACK_S, MAX_FOLLOWER_POLL_S, follower_poll_s
from metadata_quorum.quorum.raft import JOIN_ELECTION_TIMEOUT_S, raft_timing


def test_default_timeouts_heartbeat_every_130_ms_with_the_tick():
    t = raft_timing((0.4, 0.8))
    assert t["appendEntriesPeriod"] == pytest.approx(0.13)
    assert t["autoTickPeriod"] == t["appendEntriesPeriod"]
    assert (t["raftMinTimeout"], t["raftMaxTimeout"]) == (0.4, 0.8)


@pytest.mark.parametrize("timeouts", [(0.4, 0.8), (0.2, 0.4), (0.1, 0.3),
                                      (JOIN_ELECTION_TIMEOUT_S, 2 * JOIN_ELECTION_TIMEOUT_S)])
def test_pysyncobj_accepts_the_timing(timeouts):
    t = raft_timing(timeouts)
    SyncObjConf(**t).validate()
    assert 3 * t["appendEntriesPeriod"] < t["raftMinTimeout"]
    assert t["appendEntriesPeriod"] <= 0.13       # a joining node heartbeats as any other


def test_a_follower_with_a_leader_sleeps_until_its_election_deadline():
    assert follower_poll_s(0.13, 0.5, True) == pytest.approx(0.5 + DEADLINE_SLACK_S)
    # woken just past the deadline, so the next tick sees it passed
    assert follower_poll_s(0.13, 0.5, True) > 0.5


@pytest.mark.parametrize("to_deadline_s,following", [
    (0.1, True),        # the deadline is nearer than a tick: the tick, as before
    (-0.2, True),       # passed (pre-vote or election under way)
    (0.5, False),       # a candidate, a leader, or a follower without a leader
])
def test_otherwise_the_tick(to_deadline_s, following):
    assert follower_poll_s(0.13, to_deadline_s, following) == 0.13


def test_never_longer_than_the_cap():
    assert follower_poll_s(0.13, 30.0, True) == MAX_FOLLOWER_POLL_S
