"""`raftka consume` and `raftka groups ...` against a live cluster: output, exit codes, JSON,
and error cases (unknown topic/partition/group, bad flags, active group, unreachable cluster)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import Producer as CKProducer
from confluent_kafka.admin import AdminClient, NewTopic

from clients.cli.main import main
from partition_server.testing import LiveCluster

pytestmark = pytest.mark.live
TOPIC = "cli-topic"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LiveCluster(tmp_path_factory.mktemp("cli-consume"),
                    {"group.initial.rebalance.delay.ms": "300"})
    c.start()
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    for f in admin.create_topics([NewTopic(TOPIC, 2, 3)]).values():
        f.result(30)
    p = CKProducer({"bootstrap.servers": c.bootstrap, "linger.ms": 5})
    for i in range(40):       # partition 0: k0..k38 even; partition 1: odd
        p.produce(TOPIC, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=i % 2,
                  headers=[("h", b"1")])
    assert p.flush(30) == 0
    yield c
    c.stop()


def run(capsys, cluster, *argv, bootstrap=True):
    args = list(argv) + (["--bootstrap-server", cluster.bootstrap] if bootstrap else [])
    try:
        rc = main(args)
    except SystemExit as exc:            # argparse usage errors
        rc = exc.code
    out, err = capsys.readouterr()
    return rc, out, err


def test_consume_from_beginning_value_format(capsys, cluster):
    rc, out, err = run(capsys, cluster, "consume", "--topic", TOPIC, "--from-beginning",
                       "--max-messages", "40", "--timeout-ms", "10000")
    assert rc == 0, err
    lines = out.splitlines()
    assert sorted(lines) == sorted(f"v{i}" for i in range(40))
    p0 = [v for v in lines if int(v[1:]) % 2 == 0]
    assert p0 == [f"v{i}" for i in range(0, 40, 2)]             # in order within a partition
    assert "Processed a total of 40 messages" in err


def test_consume_partition_offset_and_formats(capsys, cluster):
    rc, out, err = run(capsys, cluster, "consume", "--topic", TOPIC, "--partition", "1",
                       "--offset", "5", "--max-messages", "3", "--format", "key-value",
                       "--key-separator", "=")
    assert rc == 0, err
    assert out.splitlines() == ["k11=v11", "k13=v13", "k15=v15"]
    rc, out, err = run(capsys, cluster, "consume", "--topic", TOPIC, "--partition", "0",
                       "--offset", "earliest", "--max-messages", "2", "--format", "json")
    assert rc == 0, err
    objs = [json.loads(line) for line in out.splitlines()]
    assert [(o["partition"], o["offset"], o["key"], o["value"]) for o in objs] == \
        [(0, 0, "k0", "v0"), (0, 1, "k2", "v2")]
    assert objs[0]["headers"] == [["h", "1"]] and objs[0]["topic"] == TOPIC
    # latest with a timeout: nothing new arrives, exits cleanly
    rc, out, err = run(capsys, cluster, "consume", "--topic", TOPIC, "--timeout-ms", "500")
    assert rc == 0 and out == "" and "Processed a total of 0 messages" in err


def test_consume_command_config_and_properties(capsys, cluster, tmp_path):
    conf = tmp_path / "client.properties"
    conf.write_text(f"# a Kafka-style client config\nbootstrap.servers={cluster.bootstrap}\n"
                    "max.poll.records=1\nsecurity.protocol=PLAINTEXT\n")
    rc, out, err = run(capsys, cluster, "consume", "--topic", TOPIC, "--partition", "0",
                       "--offset", "0", "--max-messages", "2", "--command-config", str(conf),
                       "--property", "client.id=cli-test", bootstrap=False)
    assert rc == 0 and out.splitlines() == ["v0", "v2"], err
    rc, _, err = run(capsys, cluster, "consume", "--topic", TOPIC, "--command-config",
                     str(tmp_path / "missing.properties"))
    assert rc == 1 and "cannot read" in err
    rc, _, err = run(capsys, cluster, "consume", "--topic", TOPIC, "--property", "oops")
    assert rc == 2 and "key=value" in err
    rc, _, err = run(capsys, cluster, "consume", "--topic", TOPIC, "--property",
                     "max.poll.records=lots")
    assert rc == 1 and "Invalid value lots for configuration max.poll.records: not an integer" in err


def test_consume_errors(capsys, cluster):
    rc, _, err = run(capsys, cluster, "consume", "--topic", "no-such-topic", "--timeout-ms", "100")
    assert rc == 1 and err.count("\n") == 1 and "unknown topic 'no-such-topic'" in err
    rc, _, err = run(capsys, cluster, "consume", "--topic", TOPIC, "--partition", "9")
    assert rc == 1 and "no partition 9" in err
    rc, _, err = run(capsys, cluster, "consume", "--topic", TOPIC, "--partition", "0",
                     "--group", "g")
    assert rc == 2 and "cannot be used with --group" in err
    rc, _, err = run(capsys, cluster, "consume", "--topic", TOPIC, "--offset", "3")
    assert rc == 2 and "--offset needs --partition" in err
    rc, _, err = run(capsys, cluster, "consume", "--topic", TOPIC, "--partition", "0",
                     "--offset", "soon")
    assert rc == 2
    rc, _, err = run(capsys, cluster, "consume", "--topic", TOPIC, "--bootstrap-server",
                     "127.0.0.1:1", bootstrap=False)
    assert rc == 1 and err.startswith("raftka consume: error: no broker reachable")
    assert "Traceback" not in err


def test_group_consume_commits_then_describe_reset_delete(capsys, cluster):
    group = f"cli-{uuid.uuid4().hex[:6]}"
    rc, out1, err = run(capsys, cluster, "consume", "--topic", TOPIC, "--group", group,
                        "--from-beginning", "--max-messages", "10", "--timeout-ms", "15000")
    assert rc == 0 and len(out1.splitlines()) == 10, err
    rc, out2, err = run(capsys, cluster, "consume", "--topic", TOPIC, "--group", group,
                        "--from-beginning", "--max-messages", "10", "--timeout-ms", "15000")
    assert rc == 0 and len(out2.splitlines()) == 10, err
    assert not set(out1.splitlines()) & set(out2.splitlines())   # resumed, nothing twice

    rc, out, err = run(capsys, cluster, "groups", "describe", "--group", group,
                       "--output", "json")
    assert rc == 0, err
    desc = json.loads(out)
    assert desc["state"] == "Empty"
    parts = {p["partition"]: p for p in desc["partitions"]}
    assert sum(p["current_offset"] for p in parts.values()) == 20
    assert all(p["log_end_offset"] == 20 and p["lag"] == 20 - p["current_offset"]
               for p in parts.values())
    rc, out, _ = run(capsys, cluster, "groups", "describe", "--group", group)
    assert rc == 0 and "LOG-END-OFFSET" in out and f"Consumer group '{group}'" in out

    rc, out, _ = run(capsys, cluster, "groups", "list", "--output", "json")
    assert rc == 0 and group in {g["group"] for g in json.loads(out)}
    rc, out, _ = run(capsys, cluster, "groups", "list")
    assert rc == 0 and out.startswith("GROUP") and group in out

    before = {p: parts[p]["current_offset"] for p in parts}
    rc, out, _ = run(capsys, cluster, "groups", "reset-offsets", "--group", group, "--topic",
                     TOPIC, "--to-earliest")
    assert rc == 0 and "dry run" in out
    assert _committed(capsys, cluster, group) == before                 # unchanged
    rc, out, _ = run(capsys, cluster, "groups", "reset-offsets", "--group", group, "--topic",
                     TOPIC, "--to-offset", "3", "--execute", "--output", "json")
    assert rc == 0 and json.loads(out)["executed"] is True
    assert _committed(capsys, cluster, group) == {0: 3, 1: 3}
    rc, _, _ = run(capsys, cluster, "groups", "reset-offsets", "--group", group, "--all-topics",
                   "--shift-by", "-5", "--execute")
    assert rc == 0 and _committed(capsys, cluster, group) == {0: 0, 1: 0}   # clamped to start
    rc, _, _ = run(capsys, cluster, "groups", "reset-offsets", "--group", group, "--topic",
                   TOPIC, "--to-latest", "--execute")
    assert rc == 0 and _committed(capsys, cluster, group) == {0: 20, 1: 20}
    rc, _, err = run(capsys, cluster, "groups", "reset-offsets", "--group", group, "--topic",
                     "nope", "--to-latest")
    assert rc == 1 and "unknown topic 'nope'" in err
    rc, _, err = run(capsys, cluster, "groups", "reset-offsets", "--group", group, "--topic",
                     TOPIC)
    assert rc == 2                                        # no --to-*

    rc, out, err = run(capsys, cluster, "groups", "delete", "--group", group)
    assert rc == 0 and f"('{group}') was successful" in out, err
    rc, _, err = run(capsys, cluster, "groups", "delete", "--group", group)
    assert rc == 1 and "GROUP_ID_NOT_FOUND" in err and err.count("\n") == 1
    rc, _, err = run(capsys, cluster, "groups", "describe", "--group", group)
    assert rc == 1 and "does not exist" in err


def _committed(capsys, cluster, group) -> dict[int, int]:
    rc, out, err = run(capsys, cluster, "groups", "describe", "--group", group,
                       "--output", "json")
    assert rc == 0, err
    return {p["partition"]: p["current_offset"] for p in json.loads(out)["partitions"]}


def test_active_group_cannot_be_reset_or_deleted(capsys, cluster):
    group = f"active-{uuid.uuid4().hex[:6]}"
    c = CKConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                    "auto.offset.reset": "earliest", "session.timeout.ms": 10000})
    c.subscribe([TOPIC])
    try:
        for _ in range(100):
            if c.poll(0.2) is not None and c.assignment():
                break
        c.commit(asynchronous=False)
        rc, out, err = run(capsys, cluster, "groups", "describe", "--group", group,
                           "--output", "json")
        desc = json.loads(out)
        assert rc == 0 and desc["state"] == "Stable" and desc["members"] == 1
        assert all(p["consumer_id"] for p in desc["partitions"])
        rc, _, err = run(capsys, cluster, "groups", "reset-offsets", "--group", group,
                         "--topic", TOPIC, "--to-earliest", "--execute")
        assert rc == 1 and "inactive" in err
        rc, _, err = run(capsys, cluster, "groups", "delete", "--group", group)
        assert rc == 1 and "NON_EMPTY_GROUP" in err
    finally:
        c.close()


def test_entry_point_with_env_bootstrap(cluster):
    env = dict(os.environ, RAFTKA_BOOTSTRAP=cluster.bootstrap)
    res = subprocess.run([sys.executable, "-m", "clients.cli.main", "consume", "--topic", TOPIC,
                          "--from-beginning", "--max-messages", "4", "--output", "json"],
                         capture_output=True, text=True, env=env, timeout=60)
    assert res.returncode == 0, res.stderr
    assert len([json.loads(line) for line in res.stdout.splitlines()]) == 4
    res = subprocess.run([sys.executable, "-m", "clients.cli.main", "groups", "describe",
                          "--group", "never-seen"], capture_output=True, text=True, env=env,
                         timeout=60)
    assert res.returncode == 1 and "does not exist" in res.stderr
    assert "Traceback" not in res.stderr
