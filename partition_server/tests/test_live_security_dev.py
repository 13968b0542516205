"""`raftka dev --secure`: prints bootstrap.servers= and client.properties=PATH, and that file
works with a librdkafka client (confluent-kafka) while a client without credentials is refused.
Its own module so the larger secure cluster of test_live_security.py is already stopped."""

import os
import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from partition_server.tests.test_live_security import _confluent_produce

pytestmark = pytest.mark.live


@pytest.mark.parametrize("own_addresses", [False, True], ids=["127.0.0.1", "node-addresses"])
def test_dev_secure_prints_usable_client_properties(tmp_path, own_addresses):
    """With --node-addresses too, the generated certificate names every node's own address
    (the two options used to be refused together)."""
    import signal
    import subprocess
    import sys
    from partition_server.testing import free_base_port, node_address_prefix
    prefix = node_address_prefix()
    extra = ["--node-addresses", prefix] if own_addresses else []
    proc = subprocess.Popen([sys.executable, "-m", "clients.cli.main", "dev", "--secure", "--quiet",
                             "--data-dir", str(tmp_path / "dev"), "--base-port", str(free_base_port()),
                             *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        lines = {}
        deadline = time.monotonic() + 90
        while "client.properties" not in lines and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            key, _, value = line.strip().partition("=")
            lines[key] = value
        assert "bootstrap.servers" in lines and "client.properties" in lines, lines
        if own_addresses:
            assert all(b.startswith(prefix + ".") for b in lines["bootstrap.servers"].split(","))
        from common.properties import parse_properties as load_properties
        props = load_properties(open(lines["client.properties"]).read())
        assert props["security.protocol"] == "SASL_SSL" and props["sasl.mechanism"] == "SCRAM-SHA-512"
        assert os.stat(lines["client.properties"]).st_mode & 0o077 == 0
        for name in ("broker-0", "controller-3000"):     # they hold the inter-node password
            assert os.stat(tmp_path / "dev" / "configs" / f"{name}.properties").st_mode & 0o077 == 0
        conf = {"bootstrap.servers": lines["bootstrap.servers"], **props}
        admin = AdminClient(conf)
        for f in admin.create_topics([NewTopic("dev-secure", 1, 3)]).values():
            f.result(20)
        assert _confluent_produce(conf, "dev-secure") is None
        # the same cluster refuses a client without credentials
        assert _confluent_produce({"bootstrap.servers": lines["bootstrap.servers"],
                                   "security.protocol": "SSL",
                                   "ssl.ca.location": props["ssl.ca.location"]},
                                  "dev-secure", None, 1500) is not None
        # `raftka dev status` logs in as the super user: the cluster's view, not a refusal
        out = subprocess.run([sys.executable, "-m", "clients.cli.main", "dev", "status",
                              "--output", "json", "--data-dir", str(tmp_path / "dev")],
                             capture_output=True, text=True, timeout=60)
        import json
        view = json.loads(out.stdout)
        assert view["cluster_error"] is None and view["quorum_leader"] in (3000, 3001, 3002)
        assert {p["topic"] for p in view["partitions"]} == {"dev-secure"}
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
