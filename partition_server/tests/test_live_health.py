"""/health/ready and the alerting gauges on a real cluster (issue #22): every broker and
controller ready once up, one active controller; a paused broker → the other leaders report
under-replicated partitions and count an ISR shrink; that broker restarted while the quorum is
paused says why it is not ready (503, not registered), then becomes ready, and the leaders take
it back (under-replicated 0 everywhere, an ISR expansion counted)."""

import json
import re
import signal
import sys
import time
import urllib.error
import urllib.request

from confluent_kafka.admin import AdminClient, NewTopic

from clients.cli.dev import CONTROLLER_IDS, ManagedProcess
from partition_server.testing import LiveCluster


def _get(port: int, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _gauge(text: bytes, name: str) -> float:
    m = re.search(rf"^{name} (\S+)$", text.decode(), re.M)
    assert m, name
    return float(m.group(1))


def _wait(what: str, cond, timeout_s: float = 45):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            result = cond()
        except (OSError, urllib.error.URLError):
            result = None
        if result:
            return result
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_ready_everywhere_under_replicated_after_a_fence_and_not_ready_while_starting(tmp_path):
    # followers out of the ISR after 3 s (Kafka: 30 s): the leaders shrink before the fence
    cluster = LiveCluster(tmp_path, {"replica.lag.time.max.ms": "3000"})
    layout = cluster.layout         # controllers' /metrics on base+1050+index (raftka dev's)
    with cluster:
        ports = [layout.metrics_port(b) for b in (0, 1, 2)] + \
            [layout.controller_metrics_port(i) for i in range(len(CONTROLLER_IDS))]
        for port in ports:
            _wait(f"ready on {port}", lambda: _get(port, "/health/ready")[0] == 200)
            assert _get(port, "/health/live") == (200, b'{"live": true}\n')
        controller_metrics = [_get(p, "/metrics")[1] for p in ports[3:]]
        assert sum(_gauge(t, "raftka_controller_active") for t in controller_metrics) == 1
        assert all(_gauge(t, "raftka_controller_raft_term") >= 1 for t in controller_metrics)
        _wait("each broker's metadata lag on a controller", lambda: all(
            any(f'raftka_controller_broker_metadata_lag{{broker="{b}"}}'.encode() in
                _get(p, "/metrics")[1] for p in ports[3:]) for b in (0, 1, 2)))
        assert all(_gauge(_get(p, "/metrics")[1], "process_open_fds") > 0 for p in ports)

        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic("health", 3, 3)])["health"].result(30)
        _wait("the topic's leaders", lambda: all(
            p.leader >= 0 for p in admin.list_topics("health", timeout=5)
            .topics["health"].partitions.values()) or None)
        leaders = [p.leader for p in admin.list_topics("health", timeout=5)
                   .topics["health"].partitions.values()]
        assert 2 in leaders, leaders        # broker 2's fence below must move a leadership
        # a new partition's followers join its ISR as they catch up: wait for full ISRs first
        _wait("full ISRs", lambda: all(
            _gauge(_get(p, "/metrics")[1], "raftka_under_replicated_partitions") == 0
            for p in ports[:3]))
        assert b'raftka_requests_total{api="CreateTopics"}' in b"".join(
            _get(p, "/metrics")[1] for p in ports[:3])

        # a paused broker keeps its sockets: fenced when its session runs out, leaving the ISRs
        cluster.kill("broker-2", signal.SIGSTOP)
        _wait("under-replicated partitions on broker 0 or 1", lambda: any(
            _gauge(_get(p, "/metrics")[1], "raftka_under_replicated_partitions") > 0
            for p in ports[:2]))
        _wait("an ISR shrink", lambda: sum(
            _gauge(_get(p, "/metrics")[1], "raftka_isr_shrinks_total") for p in ports[:2]) > 0)
        # fenced: the partitions it led move to another ISR member, a clean election each
        clean = 'raftka_controller_leader_elections_total\\{kind="clean"\\}'
        _wait("a clean leader election on the active controller", lambda: sum(
            _gauge(_get(p, "/metrics")[1], clean) for p in ports[3:]) > 0)

        # broker 2 restarts while the quorum is paused: it cannot register, and says so
        cluster.kill("broker-2", signal.SIGKILL)
        for cid in CONTROLLER_IDS:
            cluster.kill(f"controller-{cid}", signal.SIGSTOP)
        try:
            path = layout.data_dir / "configs" / "broker-2.properties"
            new = ManagedProcess("broker-2", [sys.executable, "-m", "partition_server",
                                              "--config", str(path)],
                                 "unfenced", True, layout.log_path("broker-2"))
            cluster.procs[[p.name for p in cluster.procs].index("broker-2")] = new
            status, body = _wait("broker 2's health endpoint",
                                 lambda: _get(ports[2], "/health/ready"), 60)
        finally:
            for cid in CONTROLLER_IDS:
                cluster.kill(f"controller-{cid}", signal.SIGCONT)
        assert status == 503
        answer = json.loads(body)
        assert answer["ready"] is False and answer["broker_id"] == 2
        assert "not registered with the controller quorum" in answer["reasons"]
        _wait("broker 2 ready", lambda: _get(ports[2], "/health/ready")[0] == 200, 60)
        _wait("broker 2 back in the ISRs", lambda: all(
            _gauge(_get(p, "/metrics")[1], "raftka_under_replicated_partitions") == 0
            for p in ports[:3]))
        assert sum(_gauge(_get(p, "/metrics")[1], "raftka_isr_expands_total")
                   for p in ports[:3]) > 0
