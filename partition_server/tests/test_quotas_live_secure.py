"""A user quota on a SASL_SSL cluster (`raftka dev --secure`): the quota is set with
`raftka quotas --command-config` on the SCRAM super user's principal, and confluent-kafka logged
in as that user is held near it whatever its client id; removing it lifts the limit."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from common.properties import parse_properties as load_properties
from partition_server.testing import free_base_port
from partition_server.tests.test_quotas_live import QUOTA, _produce_for

pytestmark = pytest.mark.live


class _Secure:
    def __init__(self, bootstrap, props_path):
        self.bootstrap, self.props_path = bootstrap, props_path
        self.props = load_properties(open(props_path).read())


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    data = tmp_path_factory.mktemp("quotas-secure")
    proc = subprocess.Popen([sys.executable, "-m", "clients.cli.main", "dev", "--secure", "--quiet",
                             "--data-dir", str(data / "dev"), "--base-port", str(free_base_port()),
                             "--set", "quota.window.num=2"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        lines, deadline = {}, time.monotonic() + 90
        while "client.properties" not in lines and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            key, _, value = line.strip().partition("=")
            lines[key] = value
        assert "client.properties" in lines, lines
        yield _Secure(lines["bootstrap.servers"], lines["client.properties"])
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _cli(secure, *argv):
    out = subprocess.run([sys.executable, "-m", "clients.cli.main", "quotas", *argv,
                          "--bootstrap-server", secure.bootstrap,
                          "--command-config", secure.props_path, "--output", "json"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


class _Cluster:                      # what _produce_for needs: a bootstrap
    def __init__(self, bootstrap):
        self.bootstrap = bootstrap


def test_user_quota_applies_to_the_sasl_principal(secure):
    from confluent_kafka.admin import AdminClient, NewTopic
    conf = {"bootstrap.servers": secure.bootstrap, **secure.props}
    admin = AdminClient(conf)
    for f in admin.create_topics([NewTopic("q-sasl", 1, 1)]).values():
        f.result(30)
    user = secure.props["sasl.username"]
    assert _cli(secure, "set", "--user", user, f"producer_byte_rate={QUOTA}")["ok"] is True
    deadline = time.monotonic() + 10
    while _cli(secure, "list", "--user", user) == [] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _cli(secure, "list", "--user", user) == [
        {"entity": {"user": user}, "values": {"producer_byte_rate": float(QUOTA)}}]

    # the same load as test_quotas_live, logged in with SCRAM over TLS
    slow, throttle = _produce_for(_Cluster(secure.bootstrap), "q-sasl", "any-client", 4,
                                  secure.props)
    _cli(secure, "remove", "--user", user, "--all")
    deadline = time.monotonic() + 10
    while _cli(secure, "list") != [] and time.monotonic() < deadline:
        time.sleep(0.2)
    freed, _ = _produce_for(_Cluster(secure.bootstrap), "q-sasl", "any-client", 2, secure.props)
    print(f"SASL user {user}: {slow / 1024:.0f} KB/s at the quota (throttle {throttle} ms), "
          f"{freed / 1024:.0f} KB/s after removal")
    assert 0.3 * QUOTA < slow < 2 * QUOTA and throttle > 0
    assert freed > 3 * QUOTA            # TLS + SCRAM on a shared 2-core machine: ~8x seen
