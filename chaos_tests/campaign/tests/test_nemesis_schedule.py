"""A heal that restarts a node never holds the schedule past its next event.

A broker is ready once unfenced, which needs an active controller. A campaign round
(seed 4921, round 2) healed a disk-full fault by restarting the broker while an overlapping
split kept the controllers from it: the heal waited 60 s for readiness, so the split was
healed 60 s late, and the faults of 1-2 s outlasted librdkafka's message timeout. Here a fake
cluster plays that: the restarted broker becomes ready only when a paused controller is
continued, by the schedule's next event.
"""

from __future__ import annotations

import signal
import threading
import time

from chaos_tests.campaign.nemesis import Nemesis, run_schedule
from chaos_tests.campaign.schedule import FaultStep
from clients.cli.dev import wait_ready


class _Proc:
    def __init__(self, name: str):
        self.name = name
        self.ready = threading.Event()
        self.returncode = None
        self.proc = self

    def poll(self):
        return self.returncode


class _Cluster:
    """Just what the nemesis uses for kill, pause and restart; a broker restarted while
    `held` is set is ready only once the held controller is continued, or never, and exits,
    when `dies` is set."""

    def __init__(self, dies: bool = False):
        self.procs = [_Proc(n) for n in ("controller-3000", "broker-1")]
        self.held = False
        self.dies = dies
        self.restarts: list[tuple[str, bool]] = []

    def proc(self, name: str) -> _Proc:
        return next(p for p in self.procs if p.name == name)

    def kill(self, name: str, sig) -> None:
        if name.startswith("controller") and sig == signal.SIGSTOP:
            self.held = True
        if name.startswith("controller") and sig == signal.SIGCONT:
            self.held = False
            self.proc("broker-1").ready.set()

    def restart_broker(self, broker_id: int, timeout_s: float = 3, wait: bool = True) -> None:
        """As LiveCluster's (which waits up to 60 s): `wait` blocks until ready or timeout."""
        self.restarts.append((f"broker-{broker_id}", wait))
        new = _Proc(f"broker-{broker_id}")
        self.procs[1] = new
        if self.dies:
            new.returncode = 1
        elif not self.held:
            new.ready.set()
        problem = wait_ready([new], timeout_s) if wait else None
        if problem:
            raise RuntimeError(problem)


def _play(cluster: _Cluster, schedule: list[FaultStep]):
    nemesis, notes = Nemesis(cluster), []
    started = time.monotonic()
    windows = run_schedule(nemesis, schedule, started, notes)
    return windows, notes + nemesis.notes, time.monotonic() - started


# the controller paused for 0.6 s; within it, broker-1 killed and restarted at 0.15 s
SCHEDULE = [FaultStep("pause", ("controller-3000",), 0.0, 0.6),
            FaultStep("kill", ("broker-1",), 0.05, 0.1)]


def test_a_restart_waits_for_its_node_only_until_the_next_event():
    cluster = _Cluster()
    windows, notes, took = _play(cluster, SCHEDULE)
    pause_window = windows[0]
    # the pause is healed on time (it was healed ~60 s late when the restart waited for
    # readiness), and the broker, still starting then, became ready after it
    assert pause_window[1] < 2.0 and took < 2.0, windows
    assert cluster.restarts == [("broker-1", False)]
    assert cluster.proc("broker-1").ready.is_set()
    assert notes == ["broker-1 was still starting when the schedule's next event was due"]


def test_a_restart_whose_node_is_ready_in_time_notes_nothing():
    cluster = _Cluster()
    windows, notes, _ = _play(cluster, [FaultStep("kill", ("broker-1",), 0.0, 0.1),
                                        FaultStep("pause", ("controller-3000",), 0.5, 0.1)])
    assert notes == [] and cluster.proc("broker-1").ready.is_set()
    assert [round(w[0], 1) for w in windows] == [0.0, 0.5]


def test_a_node_that_exits_before_it_is_ready_is_a_failed_heal():
    cluster = _Cluster(dies=True)
    _, notes, took = _play(cluster, SCHEDULE)
    assert took < 2.0
    assert len(notes) == 1 and notes[0].startswith("heal of kill(broker-1)") and \
        "exited with code 1 before it was ready" in notes[0], notes
