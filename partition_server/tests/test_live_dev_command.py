"""`raftka dev`: the bootstrap line, a clean stop on SIGTERM, resuming with the same data, and a
clean stop of every node on Ctrl-C despite the second signal.

One data directory goes through three starts (fresh, resumed after SIGTERM, resumed after
Ctrl-C): each resume is what the previous stop is checked by, so the stops share starts instead
of each test paying a fresh start of its own (a start of the 6-node cluster costs ~10 s)."""

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
    # its own process group: Ctrl-C in a terminal signals the whole group (killpg below)
    proc = subprocess.Popen([sys.executable, "-m", "clients.cli.main", "dev", "--data-dir",
                             str(data_dir), "--base-port", str(base), "--quiet"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    line = proc.stdout.readline().strip()
    return proc, line


def test_dev_prints_bootstrap_stops_cleanly_resumes_and_stops_every_node_on_ctrl_c(tmp_path):
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
    before_ctrl_c = _log_sizes(tmp_path)
    proc, line = start(tmp_path, base)              # same data directory: same cluster
    try:
        admin = AdminClient({"bootstrap.servers": line.split("=", 1)[1]})
        topics = admin.list_topics(timeout=20).topics
        assert "kept" in topics and len(topics["kept"].partitions) == 2
        for fut in admin.create_topics([NewTopic("kept-6", 6, 3)]).values():
            fut.result(30)
    finally:
        _ctrl_c(proc)
    assert "self-healing settings already set (kept)" in proc.stderr.read()
    _assert_ctrl_c_stopped_every_node_cleanly(tmp_path, base, before_ctrl_c)


def _ctrl_c(proc):
    """Ctrl-C in a terminal sends SIGINT to every process of the group, and `raftka dev` then
    sends each node a SIGTERM of its own: the second signal must not cut a node's clean stop
    short (trio re-delivered it with its default action, killing brokers before they closed
    their logs)."""
    os.killpg(proc.pid, signal.SIGINT)              # what the terminal does on Ctrl-C
    assert proc.wait(90) == 0


NODES = [f"broker-{b}" for b in range(3)] + [f"controller-{c}" for c in (3000, 3001, 3002)]


def _log_sizes(data_dir) -> dict[str, int]:
    logs = data_dir / "logs"
    return {n: (logs / f"{n}.log").stat().st_size for n in NODES}


def _assert_ctrl_c_stopped_every_node_cleanly(data_dir, base, before: dict[str, int]):
    """Every node says it stopped (in the log it wrote since `before`: this run's, not the
    SIGTERM-stopped run's), and the restarted brokers find a clean shutdown."""
    logs = data_dir / "logs"
    for name in NODES:
        kind, node_id = name.split("-")
        with open(logs / f"{name}.log") as f:
            f.seek(before[name])
            run_log = f.read()
        assert f"{kind} {node_id} stopped" in run_log, f"{name} did not stop cleanly"
    sizes = {b: (logs / f"broker-{b}.log").stat().st_size for b in range(3)}
    proc, line = start(data_dir, base)
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
