"""`raftka console --command-config` against `raftka dev --secure` (SASL_SSL, SCRAM, ACLs
enforced): the console connects as the user its properties name, so it sees what that user
may see. A user allowed only to read topic `visible` gets that topic in the topics page and
the browser, an authorization error for topic `secret`, and the refusal in place of the
quorum section. Subprocesses only (TLS/SASL settings must not leak into other tests)."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from partition_server.testing import free_base_port

pytestmark = pytest.mark.live
CLI = [sys.executable, "-m", "clients.cli.main"]


def _cli(*args, stdin=None):
    r = subprocess.run(CLI + list(args), capture_output=True, text=True, input=stdin, timeout=90)
    assert r.returncode == 0, (args, r.stdout, r.stderr)
    return r


def _get(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _start_secure_dev(tmp_path):
    errlog = open(tmp_path / "dev.stderr", "w")
    proc = subprocess.Popen(CLI + ["dev", "--secure", "--quiet", "--data-dir",
                                   str(tmp_path / "dev"), "--base-port", str(free_base_port())],
                            stdout=subprocess.PIPE, stderr=errlog, text=True)
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
    return proc, errlog, lines


def _stop(proc) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def test_console_sees_what_its_principal_may_see(tmp_path):
    dev, errlog, lines = _start_secure_dev(tmp_path)
    console = None
    try:
        admin = ["--bootstrap-server", lines["bootstrap.servers"], "--command-config",
                 lines["client.properties"]]
        for topic in ("visible", "secret"):
            _cli("topics", "create", "--topic", topic, "--partitions", "1",
                 "--replication-factor", "3", *admin)
            _cli("produce", "--topic", topic, *admin, stdin=f"{topic}-1\n{topic}-2\n")
        _cli("users", "scram", "add", "--user", "viewer", "--password", "viewer-pw", *admin)
        _cli("acls", "add", "--allow-principal", "User:viewer", "--operation", "read",
             "--operation", "describe", "--topic", "visible", *admin)
        props = open(lines["client.properties"]).read()
        props = re.sub(r"(?m)^sasl\.username=.*$", "sasl.username=viewer", props)
        props = re.sub(r"(?m)^sasl\.password=.*$", "sasl.password=viewer-pw", props)
        (tmp_path / "viewer.properties").write_text(props)
        console = subprocess.Popen(CLI + ["console", "--bootstrap-server",
                                          lines["bootstrap.servers"], "--command-config",
                                          str(tmp_path / "viewer.properties"), "--port", "0"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        match = re.search(r"http://[\d.]+:\d+/", console.stdout.readline())
        assert match, console.stderr.read() if console.poll() is not None else "no URL"
        base = match.group(0)
        status, topics = _get(base + "api/topics")
        assert status == 200 and [t["name"] for t in topics["topics"]] == ["visible"]
        status, msgs = _get(base + "api/messages?topic=visible")
        assert status == 200 and [r["value"] for r in msgs["records"]] == \
            ["visible-1", "visible-2"]
        status, refused = _get(base + "api/messages?topic=secret")
        assert status == 502 and "uthoriz" in refused["error"], refused
        status, overview = _get(base + "api/overview")
        assert status == 200 and "uthoriz" in overview["quorum"]["error"], overview
    finally:
        if console is not None:
            console.terminate()
            console.wait(30)
        _stop(dev)
        errlog.close()
