"""`raftka dev`'s ManagedProcess on real child processes: ready detection, the per-node log, and
that an exited child leaves no open file behind (a supervisor restarts nodes for hours)."""

import sys

from clients.cli.dev import ManagedProcess


def test_output_reaches_the_log_and_files_close_when_the_child_exits(tmp_path):
    log = tmp_path / "logs" / "node.log"
    code = "import sys; print('booting'); print('node listening on x'); sys.stdout.flush()"
    p = ManagedProcess("node", [sys.executable, "-c", code], "listening on", quiet=True,
                       log_path=log)
    assert p.ready.wait(30), "the ready line was not seen"
    assert p.proc.wait(30) == 0
    p.stop(timeout=30)
    assert log.read_text().splitlines() == ["booting", "node listening on x"]
    assert p._log.closed and p.proc.stdout.closed


def test_a_restarted_node_appends_to_the_same_log(tmp_path):
    log = tmp_path / "node.log"
    for word in ("first", "second"):
        p = ManagedProcess("node", [sys.executable, "-c", f"print('{word} ready')"], "ready",
                           quiet=True, log_path=log)
        assert p.ready.wait(30)
        p.stop(timeout=30)
        assert p._log.closed
    assert log.read_text().splitlines() == ["first ready", "second ready"]
