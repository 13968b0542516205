"""configs/observability (issue #22 item 3) against a real `raftka dev` cluster: every metric name
the Grafana dashboard and the Prometheus alert rules use is emitted by the /metrics of a live
node once the cluster has seen ordinary traffic (a topic, a quota, a transaction, a consumer
group); the rules pass `promtool check rules` where promtool is installed (Debian's prometheus
package) and a structural check everywhere. Item 2: `raftka dev status` shows each node's
/health/ready: every node ready, a paused broker not answering."""

import json
import os
import re
import signal
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from clients.cli.dev import CONTROLLER_IDS, DevLayout
from partition_server.tests.test_live_dev_supervise import ctl, next_line, start_dev, wait_status
from partition_server.testing import free_base_port

pytestmark = pytest.mark.live

CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "observability"
NAME = re.compile(r"\b((?:raftka|process)_[a-z0-9_]+)\b")


def dashboard_exprs() -> list[str]:
    dash = json.loads((CONFIGS / "grafana-dashboard.json").read_text())
    exprs = []
    for panel in dash["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["targets"], panel["title"]
        assert 0 <= panel["gridPos"]["x"] and panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        refs = [t["refId"] for t in panel["targets"]]
        assert len(set(refs)) == len(refs), panel["title"]
        exprs += [t["expr"] for t in panel["targets"]]
    return exprs


def rule_exprs() -> list[str]:
    doc = yaml.safe_load((CONFIGS / "alerts.yml").read_text())
    exprs, alerts = [], set()
    for group in doc["groups"]:
        assert group["name"] and group["rules"]
        for rule in group["rules"]:
            assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule
            assert rule["alert"] not in alerts and rule["labels"]["severity"] in (
                "warning", "critical") and rule["annotations"]["summary"]
            alerts.add(rule["alert"])
            exprs.append(rule["expr"])
    # what issue #22 asks the rules to cover
    assert {"RaftkaUnderReplicatedPartitions", "RaftkaOfflinePartitions",
            "RaftkaNoActiveController", "RaftkaConsumerLagSeconds", "RaftkaLogDiskAlmostFull",
            "RaftkaUnderMinIsrPartitions"} <= alerts
    return exprs


def test_rules_pass_promtool_where_installed():
    rule_exprs()
    promtool = shutil.which("promtool")
    if promtool is not None:            # apt-get install prometheus; the structural check above
        out = subprocess.run([promtool, "check", "rules", str(CONFIGS / "alerts.yml")],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stdout + out.stderr
        out = subprocess.run([promtool, "check", "config", str(CONFIGS / "prometheus.yml")],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stdout + out.stderr


def scraped_names(ports) -> set[str]:
    names = set()
    for port in ports:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            for line in r.read().decode().splitlines():
                if line and not line.startswith("#"):
                    names.add(re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", line).group(0))
    return names


def sum_of(ports, sample: str) -> float:
    total = 0.0
    for port in ports:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(sample + " "):
                    total += float(line.rsplit(" ", 1)[1])
    return total


def traffic(bootstrap: str, data_dir: Path) -> Consumer:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("obs", 3, 3)])["obs"].result(30)
    quota = subprocess.run([sys.executable, "-m", "clients.cli.main", "quotas", "set",
                            "--bootstrap-server", bootstrap, "--client-id", "obs-producer",
                            "producer_byte_rate=100000000"], capture_output=True, text=True,
                           timeout=60)
    assert quota.returncode == 0, quota.stderr
    p = Producer({"bootstrap.servers": bootstrap, "client.id": "obs-producer",
                  "transactional.id": "obs-txn", "log_level": 0})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(150):
        p.produce("obs", b"value-%d" % i, partition=i % 3)
    p.commit_transaction(30)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "obs-group", "log_level": 0,
                  "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    c.subscribe(["obs"])
    seen, deadline = 0, time.monotonic() + 40
    while seen < 100 and time.monotonic() < deadline:     # leave some lag for the lag gauges
        m = c.poll(0.5)
        if m is not None and not m.error():
            seen += 1
    assert seen >= 100
    c.commit(asynchronous=False)
    return c


def _health(view, name) -> dict:
    return next(n for n in view["nodes"] if n["name"] == name)["health"]


def test_every_metric_the_dashboard_and_rules_use_is_emitted_and_dev_status_shows_health(
        tmp_path):
    wanted = {n for e in dashboard_exprs() + rule_exprs() for n in NAME.findall(e)}
    base = free_base_port()
    layout = DevLayout(tmp_path, base)
    ports = [layout.metrics_port(b) for b in layout.broker_ids] + \
        [layout.controller_metrics_port(i) for i in range(len(CONTROLLER_IDS))]
    proc, lines = start_dev(tmp_path, base)
    consumer = None
    try:
        line, _ = next_line(lines, "bootstrap.servers=", 90)
        view = wait_status(tmp_path, lambda v: all(
            n.get("health", {}).get("ready") for n in v["nodes"]))
        assert len(view["nodes"]) == 6
        code, out, _ = ctl(tmp_path, "status")
        assert code == 0 and "READY" in out and out.count("  ready") == 6, out

        consumer = traffic(line.split("=", 1)[1], tmp_path)
        deadline = time.monotonic() + 45
        while (missing := wanted - scraped_names(ports)) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not missing, f"used by configs/observability, emitted by no node: {missing}"
        # acks=all Produce requests waited for their replication: remote time, then a send
        assert sum_of(ports[:3], 'raftka_request_remote_time_ms_sum{api="Produce"}') > 0
        assert sum_of(ports[:3], 'raftka_request_send_time_ms_count{api="Produce"}') > 0
        assert sum_of(ports[:3], 'raftka_topic_messages_in_total{topic="obs"}') == 150
        assert sum_of(ports[:3], 'raftka_connections_created_total{listener="PLAINTEXT"}') > 0

        # stopped behind the supervisor's back: it says running, the node answers nothing
        pid = next(n["pid"] for n in view["nodes"] if n["name"] == "broker-1")
        os.kill(pid, signal.SIGSTOP)
        try:
            view = wait_status(tmp_path, lambda v: _health(v, "broker-1")["ready"] is None)
        finally:
            os.kill(pid, signal.SIGCONT)
        assert "no answer from" in _health(view, "broker-1")["reasons"][0]
        assert _health(view, "broker-0")["ready"] is True
    finally:
        if consumer is not None:
            consumer.close()
        proc.terminate()
        proc.wait(90)
