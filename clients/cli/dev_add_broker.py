"""`raftka dev --data-dir D --add-broker ID`: one more partition server joining the `raftka dev`
cluster already running from D (issue 19 item 4: a new broker id joins a running cluster).

The cluster's base port is read from the controllers' config files that `raftka dev` wrote
under D/configs, so the new broker gets the same layout as the others (port base+ID, data in
D/broker-ID, log in D/logs/broker-ID.log, its config in D/configs/broker-ID.properties). It
registers with the quorum, starts empty (the controller's balancer, which `raftka dev` switches
on, then moves replicas onto it until replica counts are even; with it off: reassign or
decommission onto it), prints `broker ID joined: ...` once unfenced and runs in the foreground
until Ctrl-C, which stops it cleanly.
"""

from __future__ import annotations

import signal
import socket
import sys
import threading
from pathlib import Path

from clients.cli.dev import (CONTROLLER_IDS, MAX_BROKERS, STOP_TIMEOUT_S, DevLayout,
                             start_broker, wait_ready)


def _base_port(data_dir: Path) -> tuple[int, str | None] | None:
    """The running dev cluster's base port (its first controller listens on base+1000) and node
    address prefix (None: every node on 127.0.0.1; else that controller is at <prefix>.11)."""
    path = data_dir / "configs" / f"controller-{CONTROLLER_IDS[0]}.properties"
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        key, _, value = line.partition("=")
        if key.strip() == "listeners":
            try:
                host, port = value.split("://", 1)[1].rsplit(":", 1)
                prefix = None if host == "127.0.0.1" else host.rsplit(".", 1)[0]
                return int(port) - 1000, prefix
            except (IndexError, ValueError):
                return None
    return None


def _port_free(host: str, port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def run_add_broker(data_dir: str, broker_id: int, overrides: dict[str, str], quiet: bool,
                   ready_timeout_s: float, secure: bool) -> int:
    root = Path(data_dir).resolve()
    found = _base_port(root)
    if found is None:
        print(f"raftka dev: no `raftka dev` cluster under {root} (no controller config in "
              f"{root / 'configs'})", file=sys.stderr)
        return 2
    if not 0 <= broker_id < MAX_BROKERS:
        print(f"raftka dev: --add-broker must be 0..{MAX_BROKERS - 1}", file=sys.stderr)
        return 2
    base, prefix = found
    layout = DevLayout(root, base, overrides, secure, node_prefix=prefix)
    if not _port_free(layout.broker_host(broker_id), layout.broker_port(broker_id)):
        # most likely that broker runs already: a second process on its log directory must
        # not start
        print(f"raftka dev: port {layout.broker_port(broker_id)} of broker {broker_id} is in "
              "use (is it running already?)", file=sys.stderr)
        return 1
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    proc = start_broker(layout, broker_id, quiet)
    try:
        problem = wait_ready([proc], ready_timeout_s)
        if problem:
            print(f"raftka dev: {problem}", file=sys.stderr)
            return 1
        print(f"broker {broker_id} joined: {layout.broker_host(broker_id)}:"
              f"{layout.broker_port(broker_id)}", flush=True)
        while not stop.wait(0.5):
            if proc.proc.poll() is not None:
                print(f"raftka dev: broker-{broker_id} exited", file=sys.stderr)
                return 1
        return 0
    finally:
        proc.stop(timeout=STOP_TIMEOUT_S)
        print(f"raftka dev: broker {broker_id} stopped", file=sys.stderr, flush=True)
