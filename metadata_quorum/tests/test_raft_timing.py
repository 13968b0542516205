"""quorum/raft.py raft_timing: heartbeats every 130 ms under the default 400-800 ms election
timeout, the tick with them, and a configuration pysyncobj accepts for shorter timeouts too (it
asserts the minimum election timeout exceeds three heartbeat periods)."""

import pytest
from pysyncobj import SyncObjConf

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
