"""A node holds its data directories' locks for its life (Kafka's `.lock`), and a restarted
broker that proves it holds its predecessor's directory registers at once.

- A second broker process started on a running broker's log directory stops at once with
  Kafka's words and exit code 1, before it touches a segment or a port; so does a second
  controller on a running controller's Raft directory (common/dir_lock.py).
- A broker SIGKILLed and started again names its predecessor's epoch (KIP-966
  `PreviousBrokerEpoch`, from the directory it now holds the lock of), so the controller takes
  the new registration although the old session has not expired (metadata_quorum/controller/
  cluster_control.py). With a 60 s session timeout the restarted broker used to be refused
  DUPLICATE_BROKER_REGISTRATION for those 60 s."""

import subprocess
import sys
import time

import pytest

from partition_server.testing import LiveCluster

pytestmark = pytest.mark.live

SESSION = {"broker.session.timeout.ms": "60000"}


def test_a_second_node_on_a_running_nodes_directory_stops_with_a_clear_error(tmp_path):
    """A broker on a broker's log directory, a controller on a controller's Raft directory."""
    with LiveCluster(tmp_path, brokers=1) as cluster:
        configs = cluster.layout.data_dir / "configs"
        for module, name, holder in (("partition_server", "broker-0", "broker"),
                                     ("metadata_quorum", "controller-3000", "controller")):
            second = subprocess.run([sys.executable, "-m", module, "--config",
                                     str(configs / f"{name}.properties")],
                                    capture_output=True, text=True, timeout=120)
            assert second.returncode == 1, second.stderr[-2000:]
            assert "Failed to acquire lock on file .lock" in second.stderr
            assert f"A {holder} in another process is using this directory" in second.stderr
        cluster.assert_alive()                  # the first ones never noticed


def test_a_killed_broker_registers_again_before_its_old_session_expires(tmp_path):
    with LiveCluster(tmp_path, SESSION) as cluster:
        old_lines = len(cluster.layout.log_path("broker-1").read_text().splitlines())
        t0 = time.monotonic()
        cluster.restart_broker(1, timeout_s=120)     # SIGKILL, start again, until unfenced
        took = time.monotonic() - t0
        new_log = cluster.layout.log_path("broker-1").read_text().splitlines()[old_lines:]
        refused = [line for line in new_log if "DUPLICATE_BROKER_REGISTRATION" in line]
        assert not refused, refused[:3]
        assert took < 45, f"unfenced only after {took:.1f} s (the old session lasts 60 s)"
        cluster.assert_alive()
