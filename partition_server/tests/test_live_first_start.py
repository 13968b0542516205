"""Issue #21 item 3: a cluster started on an empty data directory prints no warning about an
unclean shutdown or lost records (there was no shutdown at all), while a broker that really
died (SIGKILL) still says so when it comes back."""

import re
import signal

import pytest

from partition_server.testing import LiveCluster

pytestmark = pytest.mark.live

SHUTDOWN_WARNING = re.compile(r"WARNING.*(clean|shutdown|unflushed|lost)", re.IGNORECASE)


def _shutdown_warnings(text: str) -> list[str]:
    return [line for line in text.splitlines() if SHUTDOWN_WARNING.search(line)]


def test_fresh_start_is_quiet_and_a_killed_broker_warns(tmp_path):
    with LiveCluster(tmp_path) as cluster:
        logs = sorted((tmp_path / "logs").glob("*.log"))
        # every node's output (stdout and stderr go to its log file) up to being ready
        assert [p.name for p in logs] == ["broker-0.log", "broker-1.log", "broker-2.log",
                                          "controller-3000.log", "controller-3001.log",
                                          "controller-3002.log"]
        for path in logs:
            assert _shutdown_warnings(path.read_text()) == [], path.name

        broker_log = tmp_path / "logs" / "broker-1.log"
        seen = len(broker_log.read_text())
        cluster.kill("broker-1", signal.SIGKILL)
        cluster.restart_broker(1)      # returns once it is registered and unfenced again
        after = _shutdown_warnings(broker_log.read_text()[seen:])
        assert len(after) == 1 and "not clean" in after[0], after
