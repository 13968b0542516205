"""LiveCluster names nodes that died without the test killing them, with their logs' tails
(a node dying under a fault is the finding; on a CI machine its log is gone with the run)."""

import signal
import sys

from clients.cli.dev import ManagedProcess
from partition_server.testing import LiveCluster


def _node(cluster, name, code_line):
    return ManagedProcess(name, [sys.executable, "-c", code_line], "never printed", True,
                          cluster.layout.log_path(name))


def test_a_node_that_dies_is_reported_with_its_log_and_a_killed_one_is_not(tmp_path):
    cluster = LiveCluster(tmp_path)
    died = _node(cluster, "broker-0", "print('something broke: ValueError'); raise SystemExit(3)")
    killed = _node(cluster, "broker-1", "import time; time.sleep(60)")
    running = _node(cluster, "broker-2", "import time; time.sleep(60)")
    cluster.procs = [died, killed, running]
    try:
        died.proc.wait(30)
        died._pump_thread.join(30)                 # its last line is in the log file
        cluster.kill("broker-1", signal.SIGKILL)
        reports = cluster.unexpected_exits()
        assert len(reports) == 1, reports
        assert reports[0].startswith("broker-0 exited with code 3")
        assert "something broke: ValueError" in reports[0]
        try:
            cluster.assert_alive()
        except AssertionError as exc:
            assert "broker-0 exited with code 3" in str(exc)
        else:
            raise AssertionError("assert_alive passed with a dead node")
    finally:
        for p in cluster.procs:
            if p.proc.poll() is None:
                p.proc.kill()
                p.proc.wait()
