"""`raftka dev` supervises its nodes (issue 21 item 1): a node that exits is reported once and the
rest keep serving; `kill`, `pause`, `resume` and `restart` act on one node at a time.

`NodeState` is the pure part: what a node is (running, paused, exited with a code) and which
commands its state allows — unit-tested without processes. `Supervisor` applies them to the real
child processes (dev.ManagedProcess) under one lock, because commands arrive on the control
socket's thread while the main thread polls for exits.

Why signals: `kill` is SIGKILL (a real crash: no controlled shutdown, the kernel closes the
node's sockets), `pause`/`resume` are SIGSTOP/SIGCONT (a hung process: its sockets stay open, so
the controller fences it only when its session times out), `restart` starts the same command
with the same config file again.
"""

from __future__ import annotations

import signal
import subprocess
import threading
from dataclasses import dataclass
from typing import Callable

RUNNING, PAUSED, EXITED = "running", "paused", "exited"
ACTIONS = ("kill", "pause", "resume", "restart")


class CommandRefused(Exception):
    """A command the node's state does not allow (the message says why, for the user)."""


@dataclass
class NodeState:
    """One node as the supervisor sees it; no I/O."""
    name: str
    pid: int
    state: str = RUNNING
    exit_code: int | None = None
    reported: bool = False          # its exit was announced (once)

    @property
    def role(self) -> str:
        return "controller" if self.name.startswith("controller") else "broker"

    def check(self, action: str) -> None:
        """Raise CommandRefused unless `action` makes sense in this state."""
        if action not in ACTIONS:
            raise CommandRefused(f"unknown action {action!r} (one of {', '.join(ACTIONS)})")
        if action == "restart":
            if self.state != EXITED:
                raise CommandRefused(f"{self.name} is {self.state}; restart starts an exited "
                                     f"node (kill it first)")
        elif self.state == EXITED:
            raise CommandRefused(f"{self.name} has exited (code {self.exit_code}); "
                                 f"`raftka dev restart {self.name}` starts it again")
        elif action == "pause" and self.state == PAUSED:
            raise CommandRefused(f"{self.name} is paused already")
        elif action == "resume" and self.state != PAUSED:
            raise CommandRefused(f"{self.name} is not paused")

    def after(self, action: str, pid: int | None = None) -> None:
        """The state once `action` was applied (kill: the exit is seen by `exited`)."""
        if action == "pause":
            self.state = PAUSED
        elif action == "resume":
            self.state = RUNNING
        elif action == "restart":
            self.state, self.exit_code, self.reported = RUNNING, None, False
            if pid is not None:
                self.pid = pid

    def exited(self, code: int) -> str | None:
        """Record an exit; the one line to report the first time, else None."""
        self.state, self.exit_code = EXITED, code
        if self.reported:
            return None
        self.reported = True
        how = f"killed by {signal.Signals(-code).name}" if code < 0 and \
            -code in signal.Signals._value2member_map_ else f"code {code}"
        return (f"raftka dev: {self.name} exited ({how}); the other nodes keep serving — "
                f"`raftka dev restart {self.name}` starts it again")

    def as_dict(self) -> dict:
        return {"name": self.name, "role": self.role, "pid": self.pid, "state": self.state,
                "exit_code": self.exit_code}


def resolve(names: list[str], node: str) -> str:
    """The node a user means: its full name (broker-1, controller-3000) or its bare id."""
    if node in names:
        return node
    for prefix in ("broker-", "controller-"):
        if prefix + node in names:
            return prefix + node
    raise CommandRefused(f"no node {node!r} (nodes: {', '.join(names)})")


class Supervisor:
    """The dev cluster's processes and their states; thread-safe.

    `start_node(name)` returns a new dev.ManagedProcess for a node (same config as before)."""

    def __init__(self, procs: list, start_node: Callable[[str], object]):
        self._lock = threading.Lock()
        self._procs: dict = {}
        self._states: dict[str, NodeState] = {}
        self._start_node = start_node
        self.closing = False
        self.add(procs)

    def close(self) -> list:
        """`raftka dev` is stopping: refuse every command from now on (a restart racing the
        shutdown would leave a node running); the processes to stop."""
        with self._lock:
            self.closing = True
            for name, state in self._states.items():
                if state.state == PAUSED and self._procs[name].proc.poll() is None:
                    # a stopped process would hold its SIGTERM until the stop timeout's SIGKILL
                    self._procs[name].proc.send_signal(signal.SIGCONT)
                    state.after("resume")
            return list(self._procs.values())

    def add(self, procs: list) -> None:
        with self._lock:
            for p in procs:
                self._procs[p.name] = p
                self._states[p.name] = NodeState(p.name, p.proc.pid)

    @property
    def procs(self) -> list:
        with self._lock:
            return list(self._procs.values())

    def poll(self) -> list[str]:
        """Notice nodes that exited since the last call; the lines to report."""
        lines = []
        with self._lock:
            for name, p in self._procs.items():
                code = p.proc.poll()
                if code is not None and not self._states[name].reported:
                    line = self._states[name].exited(code)
                    if line:
                        lines.append(line)
        return lines

    def status(self) -> list[dict]:
        self.poll_quietly()
        with self._lock:
            return [s.as_dict() for s in self._states.values()]

    def poll_quietly(self) -> None:
        """Exit codes for `status` without announcing them (the main loop announces)."""
        with self._lock:
            for name, p in self._procs.items():
                code = p.proc.poll()
                if code is not None:
                    self._states[name].state, self._states[name].exit_code = EXITED, code

    def command(self, action: str, node: str) -> str:
        """Apply one control command; the reply line. Raises CommandRefused."""
        self.poll_quietly()
        with self._lock:
            if self.closing:
                raise CommandRefused("raftka dev is stopping")
            name = resolve(list(self._procs), node)
            state = self._states[name]
            state.check(action)
            p = self._procs[name]
            if action == "kill":
                p.proc.send_signal(signal.SIGKILL)    # a paused (stopped) process dies too
                return f"{name} (pid {state.pid}) killed with SIGKILL"
            if action in ("pause", "resume"):
                p.proc.send_signal(signal.SIGSTOP if action == "pause" else signal.SIGCONT)
                state.after(action)
                done = "paused (SIGSTOP)" if action == "pause" else "resumed (SIGCONT)"
                return f"{name} (pid {state.pid}) {done}"
            new = self._start_node(name)
            self._procs[name] = new
            state.after("restart", new.proc.pid)
            return f"{name} restarted (pid {new.proc.pid}), same config"

    def status_of(self, name: str) -> str:
        self.poll_quietly()
        with self._lock:
            return self._states[name].state

    def node(self, name: str):
        with self._lock:
            return self._procs[name]

    def wait_exit(self, name: str, timeout: float) -> int | None:
        """The exit code of `name` once it has exited (None if still alive at the timeout)."""
        p = self.node(name)
        try:
            return p.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
