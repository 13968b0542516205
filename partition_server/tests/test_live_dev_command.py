"""`raftka dev`: the bootstrap line, a clean stop on SIGTERM, and resuming with the same data."""

import os
import signal
import subprocess
import sys
import time

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from partition_server.testing import free_base_port

pytestmark = pytest.mark.live


def start(data_dir, base):
    proc = subprocess.Popen([sys.executable, "-m", "clients.cli.main", "dev", "--data-dir",
                             str(data_dir), "--base-port", str(base), "--quiet"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline().strip()
    return proc, line


def test_dev_prints_bootstrap_stops_cleanly_and_resumes(tmp_path):
    base = free_base_port()
    proc, line = start(tmp_path, base)
    try:
        assert line == f"bootstrap.servers=127.0.0.1:{base},127.0.0.1:{base + 1},127.0.0.1:{base + 2}"
        admin = AdminClient({"bootstrap.servers": line.split("=", 1)[1]})
        for fut in admin.create_topics([NewTopic("kept", 2, 3)]).values():
            fut.result(30)
        assert _self_healing(admin) == {"raftka.balancer.enable": "true",
                                        "raftka.rereplication.timeout.ms": "60000"}
    finally:
        proc.send_signal(signal.SIGTERM)
        t0 = time.time()
        code = proc.wait(60)
    assert code == 0 and time.time() - t0 < 60
    err = proc.stderr.read()
    assert "stopped" in err
    # switched on by `raftka dev` (dev_selfheal), seen by a real client's DescribeConfigs
    assert "self-healing on: raftka.balancer.enable=true, raftka.rereplication.timeout.ms=60000" \
        in err, err
    proc, line = start(tmp_path, base)              # same data directory: same cluster
    try:
        admin = AdminClient({"bootstrap.servers": line.split("=", 1)[1]})
        topics = admin.list_topics(timeout=20).topics
        assert "kept" in topics and len(topics["kept"].partitions) == 2
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    assert "self-healing settings already set (kept)" in proc.stderr.read()


def _self_healing(admin) -> dict:
    """The broker-0 values of the self-healing configs, once the broker's metadata has them."""
    res = ConfigResource("broker", "0")
    deadline = time.monotonic() + 30
    while True:
        entries = admin.describe_configs([res])[res].result(30)
        got = {k: entries[k].value for k in ("raftka.balancer.enable",
                                             "raftka.rereplication.timeout.ms")}
        if got["raftka.balancer.enable"] == "true" or time.monotonic() > deadline:
            return got
        time.sleep(0.2)


def test_ctrl_c_stops_every_node_cleanly_despite_the_second_signal(tmp_path):
    """Ctrl-C in a terminal sends SIGINT to every process of the group, and `raftka dev` then
    sends each node a SIGTERM of its own: the second signal must not cut a node's clean stop
    short (trio re-delivered it with its default action, killing brokers before they closed
    their logs). Every node says it stopped, and the restarted brokers find a clean shutdown."""
    base = free_base_port()
    proc = subprocess.Popen([sys.executable, "-m", "clients.cli.main", "dev", "--data-dir",
                             str(tmp_path), "--base-port", str(base), "--quiet"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        line = proc.stdout.readline().strip()
        admin = AdminClient({"bootstrap.servers": line.split("=", 1)[1]})
        for fut in admin.create_topics([NewTopic("kept", 6, 3)]).values():
            fut.result(30)
    finally:
        os.killpg(proc.pid, signal.SIGINT)              # what the terminal does on Ctrl-C
        assert proc.wait(90) == 0
    logs = tmp_path / "logs"
    for name, stopped in [(f"broker-{b}", f"broker {b} stopped") for b in range(3)] + \
            [(f"controller-{c}", f"controller {c} stopped") for c in (3000, 3001, 3002)]:
        assert stopped in (logs / f"{name}.log").read_text(), f"{name} did not stop cleanly"
    sizes = {b: (logs / f"broker-{b}.log").stat().st_size for b in range(3)}
    proc, line = start(tmp_path, base)
    try:
        assert line.startswith("bootstrap.servers=")
        for b in range(3):
            with open(logs / f"broker-{b}.log") as f:
                f.seek(sizes[b])
                restart_log = f.read()
            assert "no clean shutdown" not in restart_log and "unclean shutdown" not in restart_log
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
