"""Nemesis schedules are seeded and well-formed; delta debugging finds the faults that matter."""

import pytest

from chaos_tests.campaign import schedule as sch
from chaos_tests.campaign.schedule import FaultStep, ddmin, make_schedule, parse_faults


def test_same_seed_same_schedule_and_seeds_differ():
    a = make_schedule(42, ["kill", "isolate", "split"], 12)
    assert a == make_schedule(42, ["kill", "isolate", "split"], 12)
    assert any(make_schedule(s, ["kill", "isolate", "split"], 12) != a for s in range(43, 50))
    assert sch.round_seed(7, 0) == sch.round_seed(7, 0) != sch.round_seed(7, 1)


def test_schedules_are_sequential_healed_early_and_use_only_asked_faults():
    for seed in range(200):
        steps = make_schedule(seed, ["pause", "bridge", "controller-kill"], 10, max_steps=3)
        assert 1 <= len(steps) <= 3 or steps == []
        for prev, nxt in zip(steps, steps[1:]):
            assert prev.end < nxt.at
        for s in steps:
            assert s.fault in ("pause", "bridge", "controller-kill") and s.end <= 8.0
            if s.fault == "pause":
                assert s.targets[0] in sch.BROKERS
            if s.fault == "controller-kill":
                assert s.targets[0] in sch.CONTROLLERS
            if s.fault == "bridge":
                assert len(set(s.targets)) == 3 and set(s.targets) <= set(sch.NODES)


def test_parse_faults_refuses_unknown_names_and_knows_all():
    assert parse_faults("kill, pause") == ["kill", "pause"]
    assert parse_faults("all") == list(sch.FAULT_CLASSES)
    with pytest.raises(ValueError, match="unknown fault class.*'explode'"):
        parse_faults("kill,explode")
    with pytest.raises(ValueError):
        parse_faults("")


def test_schedule_json_round_trip_and_bad_input():
    steps = make_schedule(3, ["split", "kill"], 12)
    assert sch.loads(sch.dumps(steps)) == steps
    with pytest.raises(ValueError, match="not a schedule"):
        sch.loads('[{"fault": "kill"}]')
    with pytest.raises(ValueError, match="unknown fault class"):
        sch.loads('[{"fault": "melt", "targets": ["broker-0"], "at": 1, "duration": 1}]')


def steps(n):
    return [FaultStep("kill", (f"broker-{i % 3}",), float(i), 1.0) for i in range(n)]


def test_ddmin_finds_the_one_fault_that_matters():
    items = steps(8)
    culprit = items[5]
    calls = []

    def fails(sub):
        calls.append(len(sub))
        return culprit in sub
    got, runs = ddmin(items, fails, budget=50)
    assert got == [culprit] and runs == len(calls)


def test_ddmin_finds_a_pair_and_respects_its_budget():
    items = steps(8)
    pair = {items[1], items[6]}
    got, _ = ddmin(items, lambda sub: pair <= set(sub), budget=60)
    assert set(got) == pair
    calls = []
    got, runs = ddmin(items, lambda sub: calls.append(1) or pair <= set(sub), budget=3)
    assert runs == len(calls) == 3 and pair <= set(got)


def test_ddmin_says_when_no_fault_is_needed():
    got, _ = ddmin(steps(4), lambda sub: True, budget=20)
    assert got == []


def test_net_faults_refused_clearly_without_nft(monkeypatch):
    from clients.cli.netfaults import nft
    monkeypatch.setattr(nft.shutil, "which", lambda name: None)
    sch.check_available(["kill", "pause"])          # no kernel fault asked: nothing to check
    with pytest.raises(nft.NetFaultUnavailable, match="isolate, split need kernel packet "
                       "filtering.*apt-get install -y nftables"):
        sch.check_available(["kill", "isolate", "split"])


def test_net_faults_refused_clearly_when_not_root(monkeypatch):
    from clients.cli.netfaults import nft
    monkeypatch.setattr(nft.os, "geteuid", lambda: 1000)
    with pytest.raises(nft.NetFaultUnavailable, match="need root"):
        sch.check_available(["loss"])


def test_campaign_command_exits_2_with_a_clear_message(monkeypatch, capsys):
    from chaos_tests.campaign.__main__ import main
    from clients.cli.netfaults import nft
    monkeypatch.setattr(nft.shutil, "which", lambda name: None)
    assert main(["--rounds", "1", "--faults", "isolate"]) == 2
    assert "fault classes isolate need kernel packet filtering" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--faults", "kill,nope"])


def test_shrink_reports_a_replayable_schedule(monkeypatch):
    """The campaign's shrink step over a round whose anomaly needs one `kill` (the live round
    replaced by a judge of the schedule; ddmin and the command line are what is tested)."""
    import types

    from chaos_tests.campaign import __main__ as campaign
    runs = []

    def fake_round(cluster, round_no, seed, steps, round_s):
        runs.append((round_no, list(steps)))
        return types.SimpleNamespace(ok=not any(s.fault == "kill" for s in steps))
    monkeypatch.setattr(campaign, "run_round", fake_round)
    schedule = [FaultStep("pause", ("broker-0",), 1, 1), FaultStep("kill", ("broker-1",), 3, 1),
                FaultStep("isolate", ("broker-2",), 5, 1), FaultStep("split", ("broker-0", "broker-1"), 7, 1)]
    failed = types.SimpleNamespace(round=4, seed=1234, schedule=schedule)
    args = campaign.parse_args(["--faults", "kill,pause,isolate,split", "--shrink-runs", "10"])
    shrunk = campaign._shrink(None, failed, args)
    assert shrunk["schedule"] == [{"fault": "kill", "targets": ["broker-1"], "at": 3,
                                   "duration": 1}]
    assert shrunk["runs"] == len(runs) <= 10 and all(r[0].startswith("4s") for r in runs)
    replay = shrunk["command"].split("--schedule ")[1].strip("'")
    again = campaign.parse_args(["--rounds", "1", "--schedule", replay])
    assert again.fixed == [schedule[1]]
