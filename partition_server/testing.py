"""Test helpers: a real local cluster (3 controllers + 3 brokers as OS processes on 127.0.0.1,
or each at its own loopback address: `node_addresses=True`).

Built on `raftka dev`'s layout so the tests exercise exactly what users run. Ports are picked
free at start; every child is killed at the end, even when a test fails.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from clients.cli.dev import (BROKER_IDS, CONTROLLER_IDS, DevLayout, ManagedProcess, start_cluster,
                             stop_cluster, wait_ready, write_properties)


LOG_TAIL_LINES = 60


def _ports_free(ports) -> bool:
    for port in ports:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                return False
    return True


def port_range(low: int = 10000, high: int = 31500) -> tuple[int, int]:
    """The slice of [low, high) this test process picks listening ports from. Under
    pytest-xdist each worker gets a slice of its own: picking at random and checking that the
    ports are free does not stop two workers from picking the same block at once (the check
    comes a second or two before the nodes bind)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if not worker.startswith("gw") or count <= 1:
        return low, high
    index = int(worker[2:]) % count
    width = (high - low) // count
    return low + index * width, low + (index + 1) * width


def free_base_port(broker_ids=BROKER_IDS) -> int:
    rng = random.Random(os.getpid() ^ time.time_ns())
    # below Linux's ephemeral range (32768+): a client socket's random local port must not
    # take a port a node is about to listen on (base + up to 1202)
    low, high = port_range()
    for _ in range(200):
        base = rng.randrange(low, high - 1300)
        ports = [base + b for b in broker_ids] + [base + 1000 + i for i in range(3)] + \
                [base + 1050 + i for i in range(3)] + [base + 1100 + i for i in range(3)] + \
                [base + 1200 + b for b in broker_ids]
        if _ports_free(ports):
            return base
    raise RuntimeError("no free port range on 127.0.0.1")


def node_address_prefix() -> str:
    """A random "127.a.b" for a cluster whose nodes have their own addresses (127.a.b.11, ...):
    tests running at once on one machine (other workers, other checkouts) get different
    addresses, so a kernel fault one installs by address never touches another's nodes."""
    rng = random.Random(os.getpid() ^ time.time_ns())
    return f"127.{rng.randrange(100, 255)}.{rng.randrange(0, 256)}"


class LiveCluster:
    def __init__(self, data_dir: Path, overrides: dict[str, str] | None = None,
                 brokers: int = len(BROKER_IDS), spare_brokers: int = 0,
                 node_addresses: bool = False, log_dirs: int = 1):
        """`brokers` started (ids 0..brokers-1); ports kept free for `spare_brokers` more ids
        after them, to join later (`raftka dev --add-broker`). `node_addresses`: every node
        listens at, and connects from, its own loopback address (DevLayout.node_prefix)."""
        ids = range(brokers + spare_brokers)
        self.layout = DevLayout(Path(data_dir), free_base_port(ids), overrides or {},
                                brokers=brokers,
                                node_prefix=node_address_prefix() if node_addresses else None,
                                log_dirs=log_dirs)
        self.procs: list[ManagedProcess] = []
        self._stopped_by_us: set[str] = set()      # names killed or stopped by the test

    @property
    def bootstrap(self) -> str:
        return self.layout.bootstrap_servers

    def start(self, timeout_s: float = 60) -> "LiveCluster":
        self.procs = start_cluster(self.layout, quiet=True)
        problem = wait_ready(self.procs, timeout_s)
        if problem:
            self.stop()
            raise RuntimeError(problem)
        return self

    def proc(self, name: str) -> ManagedProcess:
        return next(p for p in self.procs if p.name == name)

    def kill(self, name: str, sig=signal.SIGKILL) -> None:
        p = self.proc(name)
        if sig in (signal.SIGKILL, signal.SIGTERM):
            self._stopped_by_us.add(name)
        p.proc.send_signal(sig)
        if sig in (signal.SIGKILL, signal.SIGTERM):
            p.proc.wait(30)

    def restart_broker(self, broker_id: int, timeout_s: float = 60, wait: bool = True) -> None:
        """`wait`: until it is ready (unfenced: an active controller must be reachable), else
        it is left starting (the caller may wait on `proc(name)` itself, for as long as it can)."""
        old = self.proc(f"broker-{broker_id}")
        if old.proc.poll() is None:
            old.proc.kill()
            old.proc.wait()
        path = self.layout.data_dir / "configs" / f"broker-{broker_id}.properties"
        new = ManagedProcess(f"broker-{broker_id}",
                             [sys.executable, "-m", "partition_server", "--config", str(path)],
                             "unfenced", True, self.layout.log_path(f"broker-{broker_id}"),
                             self.layout.node_env.get(f"broker-{broker_id}"))
        self.procs[self.procs.index(old)] = new
        self._stopped_by_us.discard(new.name)
        problem = wait_ready([new], timeout_s) if wait else None
        if problem:
            raise RuntimeError(problem)

    def restart_controller(self, index: int, timeout_s: float = 60, wait: bool = True) -> None:
        cid = CONTROLLER_IDS[index]
        old = self.proc(f"controller-{cid}")
        if old.proc.poll() is None:
            old.proc.kill()
            old.proc.wait()
        path = self.layout.data_dir / "configs" / f"controller-{cid}.properties"
        write_properties(path, self.layout.controller_properties(index))
        new = ManagedProcess(f"controller-{cid}",
                             [sys.executable, "-m", "metadata_quorum", "--config", str(path)],
                             "listening on", True, self.layout.log_path(f"controller-{cid}"),
                             self.layout.node_env.get(f"controller-{cid}"))
        self.procs[self.procs.index(old)] = new
        self._stopped_by_us.discard(new.name)
        problem = wait_ready([new], timeout_s) if wait else None
        if problem:
            raise RuntimeError(problem)

    def unexpected_exits(self) -> list[str]:
        """Each node that exited without the test killing it, with its exit code and the tail
        of its log: a node that dies under a fault is the finding, and on a CI machine its log
        is gone with the run."""
        found = []
        for p in self.procs:
            code = p.proc.poll()
            if code is None or p.name in self._stopped_by_us:
                continue
            path = self.layout.log_path(p.name)
            try:
                tail = path.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
            except OSError as exc:
                tail = [f"(no log: {exc})"]
            found.append(f"{p.name} exited with code {code}; the end of its log:\n" +
                         "\n".join(tail))
        return found

    def assert_alive(self) -> None:
        """Every node the test did not kill still runs (else: which died, and their logs)."""
        dead = self.unexpected_exits()
        assert not dead, "\n\n".join(dead)

    def stop(self) -> None:
        for report in self.unexpected_exits():
            print(report, file=sys.stderr, flush=True)
        stop_cluster(self.procs)
        for p in self.procs:
            if p.proc.poll() is None:
                p.proc.kill()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def run_script(python: str, script: Path, *args: str, timeout_s: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([python, str(script), *args], capture_output=True, text=True,
                          timeout=timeout_s)
