"""`raftka reassign`'s pure part (clients/cli/reassign_plan.py): Kafka's JSON formats read and
written, bad plans refused with a message naming the entry, generate's even placement, the
throttle configs execute sets, verify's verdicts and the progress numbers."""

import json
import random
from collections import Counter

import pytest

from clients.cli import reassign_plan as rp
from clients.cli.main import main


def plan_text(*entries, version=1):
    return json.dumps({"version": version, "partitions": [
        {"topic": t, "partition": p, "replicas": r} for t, p, r in entries]})


def test_a_plan_round_trips_in_kafkas_format():
    text = ('{"version":1,"partitions":[{"topic":"foo","partition":1,"replicas":[3,1],'
            '"log_dirs":["any","any"]},{"topic":"foo","partition":0,"replicas":[1,2]}]}')
    plan = rp.parse_reassignment(text)
    assert plan == {("foo", 1): [3, 1], ("foo", 0): [1, 2]}
    assert json.loads(rp.dumps(plan)) == {"version": 1, "partitions": [
        {"topic": "foo", "partition": 0, "replicas": [1, 2], "log_dirs": ["any", "any"]},
        {"topic": "foo", "partition": 1, "replicas": [3, 1], "log_dirs": ["any", "any"]}]}
    assert rp.parse_reassignment(rp.dumps(plan)) == plan
    assert rp.parse_topics_to_move('{"topics":[{"topic":"a"},{"topic":"b"}],"version":1}') == \
        ["a", "b"]


@pytest.mark.parametrize("text,message", [
    ("{not json", "not valid JSON"),
    ("[]", "must be a JSON object"),
    (plan_text(("t", 0, [1]), version=2), "unsupported version 2"),
    ('{"version":1,"partitions":[]}', 'non-empty "partitions"'),
    (plan_text(("t", 0, [1, 2, 1])), "t-0: duplicate replica in [1, 2, 1]"),
    (plan_text(("t", 0, [])), 't-0: "replicas" must be a non-empty list'),
    (plan_text(("t", -1, [1])), '"partition" must be an integer >= 0'),
    (plan_text(("t", 0, ["1"])), "must be broker ids"),
    (plan_text(("", 0, [1])), '"topic" must be a non-empty string'),
    (plan_text(("t", 0, [1]), ("t", 0, [2])), "t-0 is listed twice"),
    ('{"partitions":[{"topic":"t","partition":0,"replicas":[1,2],"log_dirs":["any"]}]}',
     "one entry per replica"),
    ('{"partitions":[{"topic":"t","partition":0,"replicas":[1],"log_dirs":["d"]}]}',
     '"any" or an absolute path'),
    ('{"partitions":[{"topic":"t","partition":0,"replicas":[1],"log_dirs":[7]}]}',
     '"any" or an absolute path'),
])
def test_bad_plans_are_refused_naming_the_entry(text, message):
    with pytest.raises(rp.PlanError) as err:
        rp.parse_reassignment(text)
    assert message in str(err.value)


def test_log_dirs_name_a_directory_per_replica():
    """JBOD: a path places (or moves) that broker's replica there; "any" leaves it."""
    text = ('{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2],'
            '"log_dirs":["/data/b1-d2","any"]},{"topic":"t","partition":1,"replicas":[2]}]}')
    assert rp.parse_reassignment(text) == {("t", 0): [1, 2], ("t", 1): [2]}
    assert rp.parse_log_dirs(text) == {("t", 0, 1): "/data/b1-d2"}


def test_bad_topics_files_and_broker_lists():
    for text, message in (('{"topics":[]}', 'non-empty "topics"'),
                          ('{"topics":[{"name":"x"}]}', 'expected {"topic": "<name>"}'),
                          ('{"topics":[{"topic":"x"},{"topic":"x"}]}', "listed twice")):
        with pytest.raises(rp.PlanError, match=".*") as err:
            rp.parse_topics_to_move(text)
        assert message in str(err.value)
    assert rp.parse_broker_list("1, 2,3") == [1, 2, 3]
    for bad in ("", "a,b", "1,1", "-1"):
        with pytest.raises(rp.PlanError):
            rp.parse_broker_list(bad)
    with pytest.raises(rp.PlanError, match=r"t-0: unknown broker\(s\) \[9\]"):
        rp.check_brokers({("t", 0): [1, 9]}, [0, 1, 2])


def test_generate_keeps_the_replication_factor_and_spreads_evenly():
    current = {("a", p): [0, 1, 2] for p in range(12)}
    current.update({("b", 0): [0], ("c", 0): [1, 2]})
    proposed = rp.generate(current, ["a", "b"], [3, 4, 5, 6], random.Random(7))
    assert set(proposed) == {("a", p) for p in range(12)} | {("b", 0)}
    for key, replicas in proposed.items():
        assert len(replicas) == len(current[key]) and len(set(replicas)) == len(replicas)
        assert set(replicas) <= {3, 4, 5, 6}
    leaders = Counter(proposed[("a", p)][0] for p in range(12))
    replicas = Counter(b for p in range(12) for b in proposed[("a", p)])
    assert set(leaders.values()) == {3} and set(replicas.values()) == {9}
    with pytest.raises(rp.PlanError, match="replication factor 3 is larger than the 2"):
        rp.generate(current, ["a"], [1, 2])
    with pytest.raises(rp.PlanError, match="'zz' does not exist"):
        rp.generate(current, ["zz"], [1, 2])


def test_throttles_name_current_replicas_as_leaders_and_new_ones_as_followers():
    current = {("t", 0): [1, 2], ("t", 1): [2, 3], ("u", 0): [1]}
    plan = {("t", 0): [2, 4], ("t", 1): [2, 3], ("u", 0): [5]}
    assert rp.throttle_configs(current, plan) == {
        "t": ("0:1,0:2,1:2,1:3", "0:4"), "u": ("0:1", "0:5")}
    assert rp.throttled_brokers(current, plan) == [1, 2, 3, 4, 5]


def test_verdicts_and_progress():
    plan = {("t", 0): [2, 3], ("t", 1): [3, 1], ("t", 2): [1, 2]}
    current = {("t", 0): [2, 3, 1], ("t", 1): [3, 1], ("t", 2): [1, 3]}
    assert rp.verdicts(plan, current, {("t", 0)}) == {
        ("t", 0): (rp.IN_PROGRESS, [2, 3, 1]), ("t", 1): (rp.COMPLETE, [3, 1]),
        ("t", 2): (rp.MISMATCH, [1, 3])}
    rows = rp.progress({("t", 0): [3], ("t", 1): [4, 5]}, {("t", 0): 1, ("t", 1): 2},
                       {1: {("t", 0): 1000}, 2: {("t", 1): 400}, 3: {("t", 0): 250},
                        4: {("t", 1): 400}})
    assert [(r.copied, r.total, r.remaining) for r in rows] == [(250, 1000, 750), (400, 800, 400)]
    assert rows[0].fraction == 0.25 and rows[1].fraction == 0.5
    assert rp.eta_s(750, 250, 2.0) == 6.0 and rp.eta_s(750, 0, 2.0) is None
    assert rp.bar(0.25, 8) == "[##......]  25.0%"
    assert rp.human_bytes(512) == "512 B" and rp.human_bytes(3 * 1024 * 1024) == "3.0 MiB"


def test_the_cli_refuses_bad_input_with_a_message_and_exit_code(tmp_path, capsys):
    missing = tmp_path / "nope.json"
    bad = tmp_path / "bad.json"
    bad.write_text(plan_text(("t", 0, [1, 1])))
    for argv, message in (
            (["execute", "--reassignment-json-file", str(missing)], "cannot read"),
            (["verify", "--reassignment-json-file", str(bad)], "duplicate replica"),
            (["generate", "--topics-to-move-json-file", str(bad), "--broker-list", "1"],
             'non-empty "topics"')):
        # no cluster is contacted: the plan is refused first (an unused port proves it)
        code = main(["reassign", *argv, "--bootstrap-server", "127.0.0.1:1"])
        err = capsys.readouterr().err
        assert code == 2 and message in err and "Traceback" not in err, err
