"""The client commands against `raftka dev --secure` (SASL_SSL, SCRAM, ACLs enforced) with the
client.properties it prints as --command-config. Subprocesses only: TLS/SASL are installed
process-wide, so they must not leak into other tests' plaintext connections."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from partition_server.testing import free_base_port

pytestmark = pytest.mark.live
CLI = [sys.executable, "-m", "clients.cli.main"]


def _cli(*args, stdin=None):
    return subprocess.run(CLI + list(args), capture_output=True, text=True, input=stdin,
                          timeout=90)


def test_commands_with_secure_command_config(tmp_path):
    errlog = open(tmp_path / "dev.stderr", "w")
    proc = subprocess.Popen(CLI + ["dev", "--secure", "--quiet", "--data-dir",
                                   str(tmp_path / "dev"), "--base-port", str(free_base_port())],
                            stdout=subprocess.PIPE, stderr=errlog, text=True)
    try:
        lines: dict[str, str] = {}
        deadline = time.monotonic() + 120
        while "client.properties" not in lines and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            key, _, value = line.strip().partition("=")
            lines[key] = value
        assert "client.properties" in lines, (lines, proc.poll(),
                                              (tmp_path / "dev.stderr").read_text()[-2000:])
        conn = ["--bootstrap-server", lines["bootstrap.servers"], "--command-config",
                lines["client.properties"]]
        r = _cli("topics", "create", "--topic", "sec", "--partitions", "2",
                 "--replication-factor", "3", *conn)
        assert r.returncode == 0 and "Topic sec created." in r.stdout, r.stderr
        r = _cli("produce", "--topic", "sec", *conn, "--output", "json", stdin="a\nb\nc\n")
        assert r.returncode == 0 and json.loads(r.stdout)["delivered"] == 3, r.stderr
        r = _cli("acls", "add", "--allow-principal", "User:alice", "--operation", "read",
                 "--topic", "sec", *conn)
        assert r.returncode == 0, r.stderr
        r = _cli("acls", "list", "--topic", "sec", *conn, "--output", "json")
        assert r.returncode == 0 and [a["principal"] for a in json.loads(r.stdout)] == \
            ["User:alice"], r.stderr
        # without credentials the same cluster is unusable: a clear failure, no traceback
        r = _cli("topics", "list", "--bootstrap-server", lines["bootstrap.servers"])
        assert r.returncode != 0 and "Traceback" not in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        errlog.close()
