"""`raftka dev` supervises (issue 21 items 1, 2): a node killed from another terminal is
reported while the rest keep serving, and comes back with `restart`; `--demo` kills the demo
partition's leader under an acks=all producer and proves every acknowledged record readable
exactly once. Real `raftka dev` processes, controlled by real `raftka dev ACTION` processes."""

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from partition_server.testing import free_base_port

pytestmark = pytest.mark.live


def start_dev(data_dir, base, *extra):
    proc = subprocess.Popen([sys.executable, "-m", "clients.cli.main", "dev", "--data-dir",
                             str(data_dir), "--base-port", str(base), "--quiet", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True).start()
    return proc, lines


def next_line(lines, match, timeout):
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
        except queue.Empty:
            break
        seen.append(line)
        if match in line:
            return line.strip(), seen
    raise AssertionError(f"no line with {match!r} within {timeout}s: {seen}")


def ctl(data_dir, *args):
    out = subprocess.run([sys.executable, "-m", "clients.cli.main", "dev", *args, "--data-dir",
                          str(data_dir)], capture_output=True, text=True, timeout=60)
    return out.returncode, out.stdout, out.stderr


def wait_status(data_dir, predicate, timeout=60):
    deadline = time.monotonic() + timeout
    while True:
        code, out, err = ctl(data_dir, "status", "--output", "json")
        assert code == 0, err
        view = json.loads(out)
        if predicate(view):
            return view
        assert time.monotonic() < deadline, f"status never matched: {view}"
        time.sleep(0.3)


def node(view, name):
    return next(n for n in view["nodes"] if n["name"] == name)


def test_killed_broker_is_reported_the_rest_keep_serving_and_restart_brings_it_back(tmp_path):
    base = free_base_port()
    proc, lines = start_dev(tmp_path, base)
    try:
        line, _ = next_line(lines, "bootstrap.servers=", 90)
        admin = AdminClient({"bootstrap.servers": line.split("=", 1)[1]})
        for fut in admin.create_topics([NewTopic("kept", 1, 3)]).values():
            fut.result(30)
        code, out, err = ctl(tmp_path, "kill", "broker-1")
        assert code == 0 and "broker-1 (pid" in out and "killed with SIGKILL" in out, err
        view = wait_status(tmp_path, lambda v: node(v, "broker-1")["state"] == "exited"
                           and v["cluster_error"] is None and v["partitions"]
                           and all(1 not in p["isr"] for p in v["partitions"]))
        assert node(view, "broker-1")["exit_code"] == -9
        assert view["quorum_leader"] in (3000, 3001, 3002)
        assert node(view, "broker-0")["state"] == node(view, "broker-2")["state"] == "running"
        assert proc.poll() is None                       # `raftka dev` itself keeps running
        _produce_and_consume(f"127.0.0.1:{base},127.0.0.1:{base + 2}", "during the outage")
        code, out, err = ctl(tmp_path, "restart", "broker-1")
        assert code == 0 and "broker-1 restarted (pid" in out, err
        view = wait_status(tmp_path, lambda v: node(v, "broker-1")["state"] == "running"
                           and v["partitions"] and all(1 in p["isr"] for p in v["partitions"]),
                           timeout=90)
        code, out, _ = ctl(tmp_path, "status")
        assert code == 0 and "quorum leader: controller-" in out and "kept-0" in out
        code, _, err = ctl(tmp_path, "restart", "broker-1")        # running: refused, clearly
        assert code == 1 and "broker-1 is running; restart starts an exited node" in err
        _pause_resume_and_controller_failover(tmp_path, view["quorum_leader"])
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(90) == 0
    err = proc.stderr.read()
    assert "raftka dev: broker-1 exited (killed by SIGKILL); the other nodes keep serving" in err
    assert err.count("broker-1 exited") == 1 and "stopped" in err
    code, _, err = ctl(tmp_path, "status")                 # nothing runs there any more
    assert code == 3 and "no `raftka dev` is running on" in err


def _pause_resume_and_controller_failover(data_dir, quorum_leader):
    assert ctl(data_dir, "pause", "2")[0] == 0                     # bare ids work too
    assert node(wait_status(data_dir, lambda v: True), "broker-2")["state"] == "paused"
    assert ctl(data_dir, "resume", "broker-2")[0] == 0
    code, out, err = ctl(data_dir, "kill", f"controller-{quorum_leader}")
    assert code == 0, err
    view = wait_status(data_dir, lambda v: v["quorum_leader"] not in (None, -1, quorum_leader))
    assert node(view, "broker-2")["state"] == "running"
    assert node(view, f"controller-{quorum_leader}")["state"] == "exited"
    assert ctl(data_dir, "restart", f"controller-{quorum_leader}")[0] == 0
    wait_status(data_dir, lambda v: all(n["state"] == "running" for n in v["nodes"]))


def _produce_and_consume(bootstrap, label):
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "message.timeout.ms": 60000})
    errors = []
    for i in range(10):
        producer.produce("kept", f"{label} {i}".encode(), partition=0,
                         on_delivery=lambda err, msg: errors.append(err))
    assert producer.flush(60) == 0 and errors == [None] * 10
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "g", "auto.offset.reset":
                         "earliest", "enable.auto.commit": False})
    consumer.assign([TopicPartition("kept", 0, 0)])
    got, deadline = [], time.monotonic() + 60
    while len(got) < 10 and time.monotonic() < deadline:
        msg = consumer.poll(1)
        if msg is not None and msg.error() is None:
            got.append(msg.value().decode())
    consumer.close()
    assert got == [f"{label} {i}" for i in range(10)]


def test_demo_kills_the_leader_and_proves_exactly_once(tmp_path):
    proc, lines = start_dev(tmp_path, free_base_port(), "--demo")
    try:
        line, seen = next_line(lines, "demo: exactly-once check:", 150)
        text = "".join(seen)
        assert "killing the leader of demo-0, broker-" in text
        assert "new leader of demo-0: broker-" in text
        assert "first acknowledged write" in text and "s after the kill" in text
        assert "restarted; unfenced" in text or "restarted (unfenced)" in text
        assert line.endswith("0 missing, 0 duplicated, 0 failed sends — every acknowledged "
                             "record is readable exactly once"), line
        acked = int(line.split(":", 2)[2].split()[0])
        assert acked >= 50                              # the producer was really writing
        code, out, _ = ctl(tmp_path, "status", "--output", "json")
        assert code == 0 and all(n["state"] == "running" for n in json.loads(out)["nodes"])
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(90) == 0


def test_ctrl_c_in_the_middle_of_the_demo_stops_everything_cleanly(tmp_path):
    """Ctrl-C while the demo's leader is down: `raftka dev` stops at once (the demo runs beside
    the supervisor, not in its way), restarts nothing, and the demo prints no failure."""
    proc = subprocess.Popen([sys.executable, "-m", "clients.cli.main", "dev", "--data-dir",
                             str(tmp_path), "--base-port", str(free_base_port()), "--quiet",
                             "--demo"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True).start()
    try:
        next_line(lines, "killing the leader of demo-0", 120)
    finally:
        os.killpg(proc.pid, signal.SIGINT)              # what the terminal does on Ctrl-C
        assert proc.wait(90) == 0
    rest = []
    while not lines.empty():
        rest.append(lines.get())
    assert not any("failed" in x for x in rest), rest
    assert "raftka dev: stopped" in proc.stderr.read()
    assert not (tmp_path / "dev.sock").exists()
