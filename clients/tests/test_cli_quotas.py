"""`raftka quotas set|list|remove` against a live cluster: output, JSON, exit codes, errors."""

from __future__ import annotations

import json
import time

import pytest

from clients.cli.main import main
from partition_server.testing import LiveCluster, free_base_port

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    c = LiveCluster(tmp_path_factory.mktemp("quotas-cli"))
    c.start()
    yield c
    c.stop()


@pytest.fixture
def cli(live, capsys):
    def call(*argv, bootstrap=live.bootstrap):
        argv = list(argv) + (["--bootstrap-server", bootstrap] if bootstrap else [])
        capsys.readouterr()
        try:
            code = main(argv)
        except SystemExit as exc:          # argparse usage errors
            code = exc.code
        out, err = capsys.readouterr()
        assert "Traceback" not in err, err
        return code, out, err
    return call


def _listed(cli, *filters, expect=None, timeout_s=10.0):
    """`quotas list --output json`, retried until it equals `expect` (brokers learn changes
    from the metadata stream, each at its own pace)."""
    deadline = time.monotonic() + timeout_s
    while True:
        code, out, err = cli("quotas", "list", *filters, "--output", "json")
        assert code == 0, err
        got = json.loads(out)
        if expect is None or got == expect or time.monotonic() > deadline:
            return got
        time.sleep(0.2)


def test_set_list_remove(cli):
    code, out, err = cli("quotas", "set", "--client-id", "app",
                         "producer_byte_rate=1048576,consumer_byte_rate=2097152")
    assert code == 0, err
    assert "Set producer_byte_rate=1048576, consumer_byte_rate=2097152 on client-id=app." in out
    code, _, err = cli("quotas", "set", "--user", "alice", "--client-id-default",
                       "request_percentage=12.5")
    assert code == 0, err
    code, _, err = cli("quotas", "set", "--user-default", "producer_byte_rate=500")
    assert code == 0, err

    app = {"entity": {"client-id": "app"},
           "values": {"consumer_byte_rate": 2097152.0, "producer_byte_rate": 1048576.0}}
    alice = {"entity": {"client-id": None, "user": "alice"},
             "values": {"request_percentage": 12.5}}
    anyone = {"entity": {"user": None}, "values": {"producer_byte_rate": 500.0}}
    everything = _listed(cli, expect=[app, alice, anyone])
    assert sorted(map(json.dumps, everything)) == sorted(map(json.dumps, [app, alice, anyone]))

    assert _listed(cli, "--user", "alice") == [alice]
    assert _listed(cli, "--user", "alice", "--strict") == []
    assert _listed(cli, "--user-default") == [anyone]
    assert _listed(cli, "--any-user") == [alice]
    assert _listed(cli, "--client-id", "app", "--strict") == [app]

    code, out, err = cli("quotas", "list", "--client-id", "app")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["Entity", "Quotas"]
    assert "client-id=app" in lines[1] and "producer_byte_rate=1048576" in lines[1]
    code, out, _ = cli("quotas", "list", "--user", "alice")
    assert "user=alice, client-id=<default>" in out and "request_percentage=12.5" in out

    # validate-only applies nothing
    code, out, err = cli("quotas", "set", "--client-id", "app", "producer_byte_rate=1",
                         "--validate-only")
    assert code == 0 and "Would set" in out, err
    time.sleep(0.5)
    assert _listed(cli, "--client-id", "app", "--strict") == [app]

    code, out, err = cli("quotas", "remove", "--client-id", "app", "producer_byte_rate")
    assert code == 0 and "Removed producer_byte_rate on client-id=app." in out, err
    app_left = {"entity": {"client-id": "app"}, "values": {"consumer_byte_rate": 2097152.0}}
    assert _listed(cli, "--client-id", "app", "--strict", expect=[app_left]) == [app_left]

    for ent in (["--client-id", "app"], ["--user", "alice", "--client-id-default"],
                ["--user-default"]):
        code, out, err = cli("quotas", "remove", *ent, "--all", "--output", "json")
        assert code == 0, err
        assert json.loads(out)["ok"] is True
    assert _listed(cli, expect=[]) == []
    code, out, err = cli("quotas", "remove", "--user-default", "--all")
    assert code == 0 and "No quotas on user=<default>." in out


def test_errors_are_one_line(cli):
    cases = [
        (("quotas", "set", "--client-id", "x", "producer_byte_rate=1.5"), 1, "whole number"),
        (("quotas", "set", "--client-id", "x", "controller_mutation_rate=5"), 1, "not supported"),
        (("quotas", "set", "--client-id", "x", "bogus=5"), 1, "unknown quota key"),
        (("quotas", "set", "--user", "u", "consumer_byte_rate=0"), 1, "must be positive"),
        (("quotas", "set", "--client-id", "x", "producer_byte_rate=fast"), 2, "not a number"),
        (("quotas", "set", "producer_byte_rate=5"), 2, "name an entity"),
        (("quotas", "set", "--client-id", "x", "producer_byte_rate"), 2, "key=value"),
        (("quotas", "remove", "--client-id", "x"), 2, "--all"),
        (("quotas", "set", "--client-id", "", "producer_byte_rate=5"), 2, "empty client-id"),
    ]
    for argv, want_code, text in cases:
        code, out, err = cli(*argv)
        assert code == want_code, (argv, code, err)
        assert text in err and len(err.strip().splitlines()) == 1, (argv, err)
    code, out, err = cli("quotas", "set", "--client-id", "x", "bogus=5", "--output", "json")
    assert code == 1 and json.loads(out)["ok"] is False and "bogus" in json.loads(out)["message"]
    assert _listed(cli) == []


def test_unreachable_cluster(cli):
    code, out, err = cli("quotas", "list", bootstrap=f"127.0.0.1:{free_base_port()}")
    assert code == 3 and len(err.strip().splitlines()) == 1, err
