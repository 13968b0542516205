"""`raftka topics|configs|acls` against one live cluster: output, exit codes, error cases."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest

from clients.cli.main import main
from partition_server.testing import LiveCluster


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    c = LiveCluster(tmp_path_factory.mktemp("cluster"))
    c.start()
    yield c
    c.stop()


class Cli:
    def __init__(self, bootstrap: str, capsys):
        self.bootstrap, self.capsys = bootstrap, capsys

    def __call__(self, *argv: str, bootstrap: bool = True):
        argv = list(argv)
        if bootstrap:
            argv += ["--bootstrap-server", self.bootstrap]
        self.capsys.readouterr()
        try:
            code = main(argv)
        except SystemExit as exc:      # argparse usage errors
            code = exc.code
        out, err = self.capsys.readouterr()
        assert "Traceback" not in err, err
        return code, out, err

    def json(self, *argv: str):
        code, out, err = self(*argv, "--output", "json")
        assert code == 0, err
        return json.loads(out)


@pytest.fixture
def cli(live, capsys):
    return Cli(live.bootstrap, capsys)


def _t(prefix="cli"):
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


@pytest.mark.live
def test_topics_commands(cli):
    t = _t()
    code, out, err = cli("topics", "create", "--topic", t, "--partitions", "3",
                         "--replication-factor", "2", "--config", "retention.ms=60000")
    assert code == 0 and f"Topic {t} created." in out, err
    code, out, err = cli("topics", "create", "--topic", t, "--partitions", "3")
    assert code == 1 and "TOPIC_ALREADY_EXISTS" in err and len(err.strip().splitlines()) == 1
    code, out, err = cli("topics", "create", "--topic", t, "--if-not-exists")
    assert code == 0
    code, out, err = cli("topics", "create", "--topic", _t(), "--replication-factor", "7")
    assert code == 1 and "INVALID_REPLICATION_FACTOR" in err
    code, out, err = cli("topics", "create", "--topic", _t(), "--partitions", "0")
    assert code == 2 and "--partitions" in err

    code, out, _ = cli("topics", "list")
    assert code == 0 and t in out.split() and "__consumer_offsets" not in out
    assert t in cli.json("topics", "list")
    # (__consumer_offsets exists only once a group has been used, so it may not show here)
    assert t in cli.json("topics", "list", "--include-internal")

    code, out, err = cli("topics", "describe", "--topic", t)
    assert code == 0 and f"Topic: {t}" in out and "PartitionCount: 3" in out
    assert "ReplicationFactor: 2" in out and "retention.ms=60000" in out
    d = cli.json("topics", "describe", "--topic", t)[t]
    assert d["partition_count"] == 3 and d["configs"] == {"retention.ms": "60000"}
    assert [p["partition"] for p in d["partitions"]] == [0, 1, 2]
    assert all(p["leader"] in p["replicas"] and len(p["isr"]) >= 1 for p in d["partitions"])
    code, out, err = cli("topics", "describe", "--topic", "missing-" + t)
    assert code == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in err and "missing-" + t in err

    code, out, err = cli("topics", "alter", "--topic", t, "--partitions", "5")
    assert code == 0 and "5 partitions" in out
    assert cli.json("topics", "describe", "--topic", t)[t]["partition_count"] == 5
    code, out, err = cli("topics", "alter", "--topic", t, "--partitions", "2")
    assert code == 1 and "INVALID_PARTITIONS" in err
    code, out, err = cli("topics", "alter", "--topic", "missing-" + t, "--partitions", "2")
    assert code == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in err

    res = cli.json("topics", "delete", "--topic", t)
    assert res[t]["ok"] is True
    assert t not in cli.json("topics", "list")
    code, out, err = cli("topics", "delete", "--topic", t)
    assert code == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in err
    assert cli("topics", "delete", "--topic", t, "--if-exists")[0] == 0


@pytest.mark.live
def test_configs_commands(cli):
    t = _t()
    assert cli("topics", "create", "--topic", t, "--partitions", "1")[0] == 0
    code, out, err = cli("configs", "alter", "--entity-type", "topics", "--entity-name", t,
                         "--add-config", "retention.ms=1234,segment.bytes=1048576")
    assert code == 0 and f"Completed updating config for topic {t}" in out, err
    got = cli.json("configs", "describe", "--entity-type", "topics", "--entity-name", t)
    vals = {c["name"]: (c["value"], c["source"]) for c in got["configs"]}
    assert vals == {"retention.ms": ("1234", "DYNAMIC_TOPIC_CONFIG"),
                    "segment.bytes": ("1048576", "DYNAMIC_TOPIC_CONFIG")}
    code, out, _ = cli("configs", "describe", "--entity-type", "topics", "--entity-name", t)
    assert code == 0 and "retention.ms" in out and "1234" in out
    everything = cli.json("configs", "describe", "--entity-type", "topics", "--entity-name", t,
                          "--all")
    assert any(c["source"] == "DEFAULT_CONFIG" for c in everything["configs"])
    assert cli("configs", "alter", "--entity-type", "topics", "--entity-name", t,
               "--delete-config", "retention.ms")[0] == 0
    got = cli.json("configs", "describe", "--entity-type", "topics", "--entity-name", t)
    assert [c["name"] for c in got["configs"]] == ["segment.bytes"]
    # errors: unknown config, unknown topic, nothing to do, bad broker id
    code, _, err = cli("configs", "alter", "--entity-type", "topics", "--entity-name", t,
                       "--add-config", "no.such.config=1")
    assert code == 1 and err.strip()
    code, _, err = cli("configs", "describe", "--entity-type", "topics", "--entity-name",
                       "missing-" + t)
    assert code == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in err
    code, _, err = cli("configs", "alter", "--entity-type", "topics", "--entity-name", t)
    assert code == 2 and "nothing to change" in err
    code, _, err = cli("configs", "describe", "--entity-type", "brokers", "--entity-name", "x")
    assert code == 2
    broker = cli.json("configs", "describe", "--entity-type", "brokers", "--entity-name", "0",
                      "--all")
    assert broker["configs"]


@pytest.mark.live
def test_acls_commands(cli):
    code, out, err = cli("acls", "add", "--allow-principal", "User:alice", "--operation", "read",
                         "--operation", "describe", "--topic", "acl-topic")
    assert code == 0 and "Added 2 ACL(s)" in out and "User:alice" in out, err
    code, out, err = cli("acls", "add", "--allow-principal", "alice", "--topic", "x")
    assert code == 2 and "User:name" in err
    code, out, err = cli("acls", "add", "--allow-principal", "User:bob")
    assert code == 2                       # a resource is required (argparse)
    code, out, err = cli("acls", "list", "--topic", "acl-topic")
    assert code == 0 and "User:alice" in out and "READ" in out, err
    listed = cli.json("acls", "list", "--topic", "acl-topic")
    assert {(a["principal"], a["operation"]) for a in listed} == {
        ("User:alice", "READ"), ("User:alice", "DESCRIBE")}
    assert cli.json("acls", "list", "--topic", "acl-topic", "--principal", "User:bob") == []
    res = cli.json("acls", "remove", "--topic", "acl-topic", "--operation", "read")
    assert [(a["principal"], a["operation"]) for a in res["removed"]] == [("User:alice", "READ")]
    code, out, err = cli("acls", "remove", "--topic", "acl-topic")
    assert code == 0 and "Removed 1 ACL(s)" in out
    code, out, err = cli("acls", "remove", "--topic", "acl-topic")
    assert code == 0 and "Removed 0 ACL(s)" in out
    code, out, err = cli("acls", "remove")
    assert code == 2


@pytest.mark.live
def test_unreachable_and_usage(cli, tmp_path):
    # nothing listens on port 1: exit 3, one line, quickly
    code, out, err = cli("topics", "list", "--bootstrap-server", "127.0.0.1:1", bootstrap=False)
    assert code == 3 and "cannot reach" in err and len(err.strip().splitlines()) == 1
    # RAFTKA_BOOTSTRAP and --command-config are honoured
    props = tmp_path / "client.properties"
    props.write_text(f"# comment\nbootstrap.servers={cli.bootstrap}\nclient.id=from-file\n")
    code, out, err = cli("topics", "list", "--command-config", str(props), bootstrap=False)
    assert code == 0, err
    code, out, err = cli("topics", "list", "--command-config", str(tmp_path / "nope"),
                         bootstrap=False)
    assert code == 2 and "cannot read" in err
    bad = tmp_path / "bad.properties"
    bad.write_text("just garbage\n")
    code, out, err = cli("topics", "list", "--command-config", str(bad), bootstrap=False)
    assert code == 2 and "key=value" in err
    # the installed entry point, as a user runs it: env var bootstrap, exit code, no traceback
    env = dict(os.environ, RAFTKA_BOOTSTRAP=cli.bootstrap)
    proc = subprocess.run([sys.executable, "-m", "clients.cli.main", "topics", "list",
                           "--output", "json"], capture_output=True, text=True, env=env,
                          timeout=60)
    assert proc.returncode == 0 and isinstance(json.loads(proc.stdout), list), proc.stderr
    proc = subprocess.run([sys.executable, "-m", "clients.cli.main", "topics", "describe",
                           "--topic", "definitely-missing"], capture_output=True, text=True,
                          env=env, timeout=60)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    for cmd in (["topics"], ["topics", "create", "--help"], ["configs", "alter", "--help"],
                ["acls", "add", "--help"], ["produce", "--help"], ["topics", "list", "--help"]):
        code, out, err = cli(*cmd, bootstrap=False)
        assert code in (0, 2) and "usage:" in out + err
