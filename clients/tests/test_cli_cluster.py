"""`raftka cluster` and `raftka dev --brokers/--add-broker` without a cluster: the decommission
planning rounds (pure), the describe rows, the dev layout and the add-broker checks."""

from __future__ import annotations

import socket

import pytest

from clients.cli import cluster
from clients.cli.cluster import broker_rows, next_moves
from clients.cli.dev import DevLayout, write_properties
from clients.cli.dev_add_broker import _base_port, run_add_broker
from clients.cli.main import main
from clients.cli.output import CommandError
from clients.cluster import TopicPartition as TP
from partition_server.testing import free_base_port


def test_next_moves_plans_from_the_target_of_a_move_in_progress():
    brokers = {1: None, 2: None, 3: None, 4: None}      # 0 is leaving (not in Metadata any more)
    replicas = {TP("a", 0): (0, 1, 2), TP("a", 1): (1, 2, 3),
                TP("a", 2): (1, 2, 3, 0),               # moving off 0 already
                TP("a", 3): (0, 2, 4, 1)}               # moving 1 -> 0: the target keeps 0
    targets = {TP("a", 2): (1, 2, 3), TP("a", 3): (0, 2, 4)}
    plan = next_moves(0, brokers, replicas, targets)
    assert set(plan) == {TP("a", 0), TP("a", 3)}
    assert plan[TP("a", 0)][1:] == [1, 2] and plan[TP("a", 0)][0] in (3, 4)
    assert plan[TP("a", 3)][1:] == [2, 4] and plan[TP("a", 3)][0] in (1, 3)
    # nothing left to plan once every move takes it off
    assert next_moves(0, brokers, {TP("a", 2): (1, 2, 3, 0)}, {TP("a", 2): (1, 2, 3)}) == {}


def test_broker_rows_count_replicas_leaders_and_offline_brokers():
    rows = broker_rows({1: "r1", 2: None}, {TP("a", 0): (1, 2, 5), TP("a", 1): (2, 1, 5)},
                       {TP("a", 0): 1, TP("a", 1): 2}, {1: 300, 2: 0})
    assert rows == [
        {"id": 1, "rack": "r1", "state": "active", "replicas": 2, "leaders": 1, "bytes": 300},
        {"id": 2, "rack": None, "state": "active", "replicas": 2, "leaders": 1, "bytes": 0},
        {"id": 5, "rack": None, "state": "offline", "replicas": 2, "leaders": 0, "bytes": None}]


def test_broker_rows_tell_fenced_from_unregistered_when_told_the_fenced_ones():
    rows = broker_rows({1: None}, {TP("a", 0): (1, 5), TP("a", 1): (1, 6)}, {TP("a", 0): 1},
                       fenced={6: "r2", 7: None})
    assert [(r["id"], r["state"], r["rack"], r["replicas"]) for r in rows] == [
        (1, "active", None, 2), (5, "unregistered", None, 1), (6, "fenced", "r2", 1),
        (7, "fenced", None, 0)]               # a fenced broker hosting nothing is listed too


def test_dev_layout_brokers(tmp_path):
    layout = DevLayout(tmp_path, 20000, brokers=5)
    assert layout.broker_ids == (0, 1, 2, 3, 4)
    assert layout.bootstrap_servers.split(",")[-1] == "127.0.0.1:20004"
    assert DevLayout(tmp_path, 20000).broker_ids == (0, 1, 2)       # default stays 3


def test_add_broker_reads_the_running_clusters_base_port(tmp_path, capsys):
    assert run_add_broker(str(tmp_path), 3, {}, True, 1, False) == 2
    assert "no `raftka dev` cluster" in capsys.readouterr().err
    base = free_base_port()
    layout = DevLayout(tmp_path, base)
    write_properties(tmp_path / "configs" / "controller-3000.properties",
                     layout.controller_properties(0))
    assert _base_port(tmp_path) == (base, None)
    at_own = DevLayout(tmp_path / "own", base, node_prefix="127.0.0")
    write_properties(tmp_path / "own" / "configs" / "controller-3000.properties",
                     at_own.controller_properties(0))
    assert _base_port(tmp_path / "own") == (base, "127.0.0")
    assert run_add_broker(str(tmp_path), -1, {}, True, 1, False) == 2
    with socket.socket() as busy:                 # broker 1's port taken: refused
        busy.bind(("127.0.0.1", layout.broker_port(1)))
        busy.listen()
        capsys.readouterr()
        assert run_add_broker(str(tmp_path), 1, {}, True, 1, False) == 1
        assert "is in use" in capsys.readouterr().err


def test_dev_refuses_a_bad_broker_count(tmp_path, capsys):
    assert main(["dev", "--data-dir", str(tmp_path), "--brokers", "0"]) == 2
    assert "--brokers must be" in capsys.readouterr().err


def test_next_moves_counts_every_partition_for_load():
    brokers = {1: None, 2: None, 3: None, 4: None}
    replicas = {TP("a", 0): (0, 1)} | {TP("b", p): (3, 2) for p in range(5)}
    # 3 and 2 hold five replicas each, 4 none: the replica leaving 0 goes to 4
    assert next_moves(0, brokers, replicas, {}) == {TP("a", 0): [4, 1]}


def test_next_moves_does_not_move_again_from_stale_metadata():
    brokers = {1: None, 2: None, 3: None}
    stale = {TP("a", 0): (0, 1, 2)}             # the broker asked has not seen the move finish
    assert next_moves(0, brokers, stale, {}, submitted={TP("a", 0)}) == {}
    # someone replaced our move with one back onto 0: plan it again
    back = {TP("a", 0): (0, 1, 2, 3)}
    assert next_moves(0, brokers, back, {TP("a", 0): (0, 1, 2)},
                      submitted={TP("a", 0)}) == {TP("a", 0): [3, 1, 2]}


def _snapshots(monkeypatch, shots):
    """`cluster.snapshot` answering `shots` in turn (brokers, replicas, targets), no waits."""
    answers = iter(shots)

    async def snapshot(admin):
        brokers, replicas, targets = next(answers)
        return brokers, replicas, {}, targets
    monkeypatch.setattr(cluster, "snapshot", snapshot)
    monkeypatch.setattr(cluster, "POLL_S", 0)


async def test_a_move_caught_ending_between_the_two_questions_is_asked_again(monkeypatch):
    # the balancer's move 1 -> 3 ended between the topics and the moves: four replicas, no
    # target, on 4 brokers (one of them leaving); the next snapshot shows it done
    brokers = {0: None, 1: None, 2: None, 3: None}
    _snapshots(monkeypatch, [
        (brokers, {TP("a", 0): (0, 2, 3, 1)}, {}),
        (brokers, {TP("a", 0): (0, 2, 3)}, {})])
    _, replicas, _, plan = await cluster.planned(None, 0, set())
    assert replicas == {TP("a", 0): (0, 2, 3)} and plan == {TP("a", 0): [1, 2, 3]}


async def test_a_partition_that_cannot_leave_fails_once_seen_in_a_row(monkeypatch):
    brokers = {0: None, 1: None, 2: None}
    _snapshots(monkeypatch, [(brokers, {TP("a", 0): (0, 1, 2)}, {})] * 3)
    with pytest.raises(CommandError, match="cannot drain broker 0 without lowering a "
                                           "replication factor: a-0 has 3 replicas"):
        await cluster.planned(None, 0, set())
