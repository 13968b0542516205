"""A controller's readiness and where its /metrics listens (metadata_quorum/health.py)."""

import pytest

from metadata_quorum.health import ControllerHealth, metrics_listener, readiness

READY = ControllerHealth(voter=True, leader_id=2, commit_index=40, last_applied=40, serving=True)


def test_a_voter_with_a_leader_and_everything_applied_is_ready():
    assert readiness(READY) == (True, [])


@pytest.mark.parametrize("change, reason", [
    (dict(voter=False), "not a voter of the controller quorum (joining: not added yet)"),
    (dict(leader_id=-1), "no Raft leader known"),
    (dict(last_applied=37), "metadata not applied: Raft entry 37 of 40"),
    (dict(serving=False), "controller service not started"),
])
def test_each_unready_state_says_why(change, reason):
    assert readiness(ControllerHealth(**{**READY.__dict__, **change})) == (False, [reason])


def test_combined_mode_leaves_the_metrics_listener_to_the_broker():
    assert metrics_listener({"raftka.metrics.listener": "h:1"}) == "h:1"
    assert metrics_listener({"process.roles": "broker,controller",
                             "raftka.metrics.listener": "h:1"}) is None
    assert metrics_listener({"process.roles": "broker,controller",
                             "raftka.metrics.listener": "h:1",
                             "raftka.controller.metrics.listener": "h:2"}) == "h:2"
