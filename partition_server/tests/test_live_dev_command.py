"""`raftka dev`: the bootstrap line, a clean stop on SIGTERM, and resuming with the same data."""

import signal
import subprocess
import sys
import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

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
    finally:
        proc.send_signal(signal.SIGTERM)
        t0 = time.time()
        code = proc.wait(60)
    assert code == 0 and time.time() - t0 < 60
    assert "stopped" in proc.stderr.read()
    proc, line = start(tmp_path, base)              # same data directory: same cluster
    try:
        admin = AdminClient({"bootstrap.servers": line.split("=", 1)[1]})
        topics = admin.list_topics(timeout=20).topics
        assert "kept" in topics and len(topics["kept"].partitions) == 2
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
