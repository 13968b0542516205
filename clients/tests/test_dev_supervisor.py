"""`raftka dev`'s supervision state machine and control protocol (the pure parts), and the
Supervisor on real (tiny) child processes."""

import json
import socket
import subprocess
import sys
import threading

import pytest

from clients.cli.dev_control import (ControlServer, NotRunning, decode_request, encode, handle,
                                     request)
from clients.cli.dev_status import format_status, health_view
from clients.cli.dev_supervisor import (EXITED, PAUSED, RUNNING, CommandRefused, NodeState,
                                        Supervisor, resolve)


def test_state_machine_allows_only_what_makes_sense():
    n = NodeState("broker-1", 42)
    assert n.role == "broker" and NodeState("controller-3000", 1).role == "controller"
    with pytest.raises(CommandRefused, match="restart starts an exited node"):
        n.check("restart")
    with pytest.raises(CommandRefused, match="not paused"):
        n.check("resume")
    n.check("pause")
    n.after("pause")
    assert n.state == PAUSED
    with pytest.raises(CommandRefused, match="paused already"):
        n.check("pause")
    n.check("kill")                      # a paused node can be killed
    n.after("resume")
    assert n.state == RUNNING
    with pytest.raises(CommandRefused, match="unknown action"):
        n.check("explode")


def test_an_exit_is_reported_once_and_restart_resets_it():
    n = NodeState("broker-1", 42)
    line = n.exited(-9)
    assert "broker-1 exited (killed by SIGKILL)" in line and "restart broker-1" in line
    assert n.exited(-9) is None                       # once
    assert n.state == EXITED and n.exit_code == -9
    with pytest.raises(CommandRefused, match="has exited"):
        n.check("kill")
    n.check("restart")
    n.after("restart", pid=43)
    assert (n.state, n.pid, n.exit_code) == (RUNNING, 43, None)
    assert "exited (code 1)" in n.exited(1)           # a new exit is reported again


def test_node_names_resolve_by_full_name_or_bare_id():
    names = ["controller-3000", "broker-0", "broker-1"]
    assert resolve(names, "broker-1") == "broker-1"
    assert resolve(names, "1") == "broker-1"
    assert resolve(names, "3000") == "controller-3000"
    with pytest.raises(CommandRefused, match="no node 'broker-7'"):
        resolve(names, "broker-7")


def test_requests_are_validated():
    assert decode_request(encode({"op": "status"})) == ("status", None)
    assert decode_request(encode({"op": "kill", "node": "broker-1"})) == ("kill", "broker-1")
    for bad, why in [(b"not json\n", "not a JSON line"), (encode({"op": "format"}), "op must be"),
                     (encode({"op": "kill"}), "kill needs a node"), (b"[1]\n", "op must be")]:
        with pytest.raises(CommandRefused, match=why):
            decode_request(bad)


def test_status_table_shows_nodes_quorum_leader_and_partitions():
    view = {"nodes": [{"name": "controller-3000", "role": "controller", "pid": 10,
                       "state": "running", "exit_code": None},
                      {"name": "broker-1", "role": "broker", "pid": 11, "state": "exited",
                       "exit_code": -9}],
            "quorum_leader": 3000, "cluster_error": None,
            "partitions": [{"topic": "demo", "partition": 0, "leader": 2, "isr": [0, 2]}]}
    out = format_status(view)
    assert "controller-3000   controller      10  running" in out
    assert "broker-1          broker          11  exited (code -9)" in out
    assert "quorum leader: controller-3000" in out
    assert "demo-0                        2  0,2" in out
    view["cluster_error"] = "no broker is running"
    assert "cluster: not answering (no broker is running)" in format_status(view)


class Child:
    """A ManagedProcess stand-in only in what it runs: a real child process (sleep)."""

    def __init__(self, name):
        self.name = name
        self.proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        self.ready = threading.Event()
        self.ready.set()


def test_supervisor_kills_pauses_restarts_real_processes_over_the_socket(tmp_path):
    started = []

    def start_node(name):
        started.append(Child(name))
        return started[-1]

    sup = Supervisor([Child("broker-0"), Child("broker-1")], start_node)
    server = ControlServer(tmp_path, sup, "127.0.0.1:1,127.0.0.1:2")
    assert server.start() is None
    assert "another `raftka dev` is running" in ControlServer(tmp_path, sup, "").start()
    try:
        assert request(tmp_path, "pause", "1")["message"].endswith("paused (SIGSTOP)")
        assert request(tmp_path, "resume", "broker-1")["ok"]
        assert request(tmp_path, "restart", "broker-1") == {
            "ok": False, "error": "broker-1 is running; restart starts an exited node "
                                  "(kill it first)"}
        assert "killed with SIGKILL" in request(tmp_path, "kill", "broker-1")["message"]
        assert sup.wait_exit("broker-1", 30) == -9
        lines = sup.poll()
        assert len(lines) == 1 and "broker-1 exited (killed by SIGKILL)" in lines[0]
        assert sup.poll() == []
        nodes = {n["name"]: n for n in request(tmp_path, "status")["nodes"]}
        assert nodes["broker-1"]["state"] == "exited" and nodes["broker-0"]["state"] == "running"
        assert "restarted" in request(tmp_path, "restart", "broker-1")["message"]
        assert sup.status_of("broker-1") == "running" and sup.node("broker-1") is started[0]
        request(tmp_path, "pause", "broker-0")
        assert len(sup.close()) == 2            # stopping: paused nodes resumed, so that
        assert sup.status_of("broker-0") == "running"       # their SIGTERM is acted on
        sup.node("broker-0").proc.terminate()
        assert sup.wait_exit("broker-0", 30) == -15
        with pytest.raises(CommandRefused, match="raftka dev is stopping"):
            sup.command("restart", "broker-1")   # no command may start a node now
    finally:
        server.close()
        for c in sup.procs:
            c.proc.kill()
            c.proc.wait()
    with pytest.raises(NotRunning, match="no `raftka dev` is running"):
        request(tmp_path, "status")


def test_handle_answers_refusals_as_errors_not_crashes():
    sup = Supervisor([], lambda name: None)
    reply = handle(sup, "", encode({"op": "kill", "node": "broker-9"}))
    assert reply["ok"] is False and "no node 'broker-9'" in reply["error"]
    assert json.loads(encode(reply)) == reply


def test_control_commands_without_a_node_or_a_daemon_are_refused(tmp_path, capsys):
    from clients.cli.dev_control import run_control
    assert run_control(str(tmp_path), "isolate", None, "table") == 2   # which node?
    assert "name a node" in capsys.readouterr().err
    assert run_control(str(tmp_path), "heal", None, "table") == 3      # needs none; none runs
    assert run_control(str(tmp_path), "kill", None, "table") == 2      # which node?
    assert run_control(str(tmp_path), "status", None, "table") == 3    # nothing runs there
    assert "no `raftka dev` is running on" in capsys.readouterr().err


def test_a_data_dir_too_long_for_a_socket_address_runs_without_control(tmp_path, capsys):
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    server = ControlServer(deep, Supervisor([], lambda name: None), "")
    assert server.start() is None                     # the cluster would still start
    assert "no control socket at" in capsys.readouterr().err
    server.close()
    from clients.cli.dev_control import run_control
    assert run_control(str(deep), "status", None, "table") == 3
    assert "no answer from `raftka dev`" in capsys.readouterr().err


def test_a_restart_that_cannot_start_is_answered_and_the_state_kept(tmp_path):
    def cannot_start(name):
        raise FileNotFoundError("no such interpreter")

    child = Child("broker-0")
    sup = Supervisor([child], cannot_start)
    child.proc.kill()
    child.proc.wait()
    reply = handle(sup, "", encode({"op": "restart", "node": "broker-0"}))
    assert reply == {"ok": False, "error": "failed: FileNotFoundError('no such interpreter')"}
    assert sup.status_of("broker-0") == "exited"


def test_status_asks_each_running_node_for_its_health_and_shows_why_not():
    import http.server
    import json as json_mod

    answers = {"/ok": (200, {"ready": True, "reasons": []}),
               "/no": (503, {"ready": False, "reasons": ["fenced by the controller",
                                                         "no metadata heard from the quorum yet"]}),
               "/garbage": (200, None)}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            status, body = answers[self.path]
            data = b"<html>" if body is None else json_mod.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))                  # bound, not listening: connection refused
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        nodes = [{"name": n, "role": "broker", "pid": 1, "state": s, "exit_code": None}
                 for n, s in (("broker-0", "running"), ("broker-1", "running"),
                              ("broker-2", "running"), ("broker-3", "running"),
                              ("broker-4", "exited"))]
        urls = {"broker-0": base + "/ok", "broker-1": base + "/no", "broker-2": base + "/garbage",
                "broker-3": f"http://127.0.0.1:{closed.getsockname()[1]}/health/ready",
                "broker-4": base + "/ok"}
        view = {"nodes": health_view(nodes, urls), "quorum_leader": None, "partitions": [],
                "cluster_error": None}
    finally:
        server.shutdown()
        closed.close()
    health = {n["name"]: n.get("health") for n in view["nodes"]}
    assert health["broker-0"] == {"ready": True, "reasons": []}
    assert health["broker-1"]["ready"] is False
    assert health["broker-2"]["ready"] is None and "not a health answer" in health["broker-2"][
        "reasons"][0]
    assert health["broker-3"]["ready"] is None and "no answer from" in health["broker-3"][
        "reasons"][0]
    assert health["broker-4"] is None               # exited: not asked
    out = format_status(view)
    assert "broker-0          broker           1  running   ready" in out
    assert ("not ready: fenced by the controller; no metadata heard from the quorum yet"
            in out)
