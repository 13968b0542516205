"""The control socket of a running `raftka dev` (issue 21 item 1): `raftka dev status | kill |
pause | resume | restart | isolate NODE` and `raftka dev heal` in another terminal talk to it
(isolate/heal: dev_netfaults.py).

A Unix socket at `<data-dir>/dev.sock` (only local users with access to the data dir reach it),
one JSON line per request and one per reply, then the connection closes:
    {"op": "status"}                      -> {"ok": true, "nodes": [...], "bootstrap": "..."}
    {"op": "kill", "node": "broker-1"}    -> {"ok": true, "message": "..."}
    {"op": "heal"}                        -> {"ok": true, "message": "..."}
    anything refused                      -> {"ok": false, "error": "..."}
`status` then asks the cluster itself (from the client's process, so a slow cluster never blocks
the supervisor) for the quorum leader (DescribeQuorum) and each partition's leader and ISR
(Metadata).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
from pathlib import Path

from clients.cli.dev_netfaults import NET_OPS
from clients.cli.dev_supervisor import ACTIONS, CommandRefused

SOCKET_NAME = "dev.sock"
OPS = ("status",) + ACTIONS + NET_OPS
NO_NODE = ("status", "heal")
MAX_LINE = 4096


def socket_path(data_dir: Path) -> Path:
    return Path(data_dir) / SOCKET_NAME


# -- the protocol (pure) ---------------------------------------------------------------------

def encode(obj: dict) -> bytes:
    return (json.dumps(obj) + "\n").encode()


def decode_request(line: bytes) -> tuple[str, str | None]:
    """(op, node) of one request line; CommandRefused says what is wrong with it."""
    try:
        req = json.loads(line)
    except ValueError:
        raise CommandRefused("request is not a JSON line") from None
    if not isinstance(req, dict) or req.get("op") not in OPS:
        raise CommandRefused(f"op must be one of {', '.join(OPS)}")
    node = req.get("node")
    if req["op"] not in NO_NODE and not isinstance(node, str):
        raise CommandRefused(f"{req['op']} needs a node (e.g. broker-1)")
    return req["op"], node


def handle(supervisor, bootstrap: str, line: bytes,
           client_properties: str | None = None, health_urls: dict | None = None,
           net=None) -> dict:
    """The reply to one request line (a status names each node's /health/ready URL; `net`:
    the cluster's dev_netfaults.DevNetFaults)."""
    try:
        op, node = decode_request(line)
        if op == "status":
            return {"ok": True, "nodes": supervisor.status(), "bootstrap": bootstrap,
                    "client_properties": client_properties, "health": health_urls or {},
                    "isolated": sorted(net.isolated) if net is not None else []}
        if op in NET_OPS:
            if net is None:
                raise CommandRefused(f"{op} is not available from this `raftka dev`")
            return {"ok": True, "message": net.command(op, node)}
        return {"ok": True, "message": supervisor.command(op, node)}
    except CommandRefused as exc:
        return {"ok": False, "error": str(exc)}
    except Exception as exc:        # noqa: BLE001 — e.g. a restart whose process cannot start:
        return {"ok": False, "error": f"failed: {exc!r}"}      # answered; the server lives on


# -- the server, a thread of `raftka dev` ------------------------------------------------------

class ControlServer:
    def __init__(self, data_dir: Path, supervisor, bootstrap: str, net=None):
        self.path = socket_path(data_dir)
        self._net = net
        self._supervisor = supervisor
        self._bootstrap = bootstrap
        self._sock: socket.socket | None = None
        # `raftka dev --secure`: the super user's client.properties, for `status` to log in
        self.client_properties: str | None = None
        self.health_urls: dict[str, str] = {}       # node name → its /health/ready URL

    def start(self) -> str | None:
        """Listen; None, or why not (another `raftka dev` answers on this data dir)."""
        if self.path.exists():
            try:
                with socket.socket(socket.AF_UNIX) as probe:
                    probe.connect(str(self.path))
                return f"another `raftka dev` is running on {self.path.parent}"
            except OSError:
                self.path.unlink()          # left by a `raftka dev` that was killed
        self._sock = socket.socket(socket.AF_UNIX)
        try:
            self._sock.bind(str(self.path))
        except OSError as exc:
            # e.g. a data dir whose path is longer than a Unix socket address may be (~107
            # bytes): the cluster still runs, only without remote control
            self._sock.close()
            self._sock = None
            print(f"raftka dev: no control socket at {self.path} ({exc}); `raftka dev status"
                  f"|kill|...` will not reach this cluster", file=sys.stderr, flush=True)
            return None
        os.chmod(self.path, 0o600)
        self._sock.listen(8)
        threading.Thread(target=self._serve, daemon=True, name="dev-control").start()
        return None

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return                      # closed
            with conn:
                conn.settimeout(5)
                try:
                    line = conn.makefile("rb").readline(MAX_LINE)
                    conn.sendall(encode(handle(self._supervisor, self._bootstrap, line,
                                              self.client_properties, self.health_urls,
                                              self._net)))
                except OSError:
                    pass                    # the client went away; nothing to answer

    def close(self) -> None:
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_RDWR)     # wakes the accept() (close alone
            except OSError:                               # does not, on Linux)
                pass
            self._sock.close()
            self._sock = None
            try:
                self.path.unlink()
            except OSError:
                pass


# -- the client: `raftka dev ACTION [NODE]` ------------------------------------------------------

class NotRunning(Exception):
    pass


def request(data_dir: Path, op: str, node: str | None = None, timeout: float = 30) -> dict:
    path = socket_path(data_dir)
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(timeout)
        try:
            s.connect(str(path))
        except (FileNotFoundError, ConnectionRefusedError):
            raise NotRunning(f"no `raftka dev` is running on {Path(data_dir).resolve()} "
                             f"(no one answers on {path})") from None
        s.sendall(encode({"op": op, "node": node}))
        reply = s.makefile("rb").readline()
    return json.loads(reply)


def run_control(data_dir: str, action: str, node: str | None, output: str) -> int:
    if action not in NO_NODE and not node:
        print(f"raftka dev {action}: name a node, e.g. `raftka dev {action} broker-1`",
              file=sys.stderr)
        return 2
    try:
        reply = request(Path(data_dir), action, node)
    except NotRunning as exc:
        print(f"raftka dev {action}: {exc}", file=sys.stderr)
        return 3
    except (OSError, ValueError) as exc:
        print(f"raftka dev {action}: no answer from `raftka dev`: {exc}", file=sys.stderr)
        return 3
    if not reply.get("ok"):
        print(f"raftka dev {action}: {reply.get('error')}", file=sys.stderr)
        return 1
    if action != "status":
        print(reply["message"])
        return 0
    from clients.cli.dev_status import cluster_view, format_status, health_view
    for n in reply["nodes"]:
        if n["name"] in reply.get("isolated", []):
            n["state"] += ", isolated"
    view = {"nodes": health_view(reply["nodes"], reply.get("health") or {}),
            **cluster_view(reply["nodes"], reply["bootstrap"], reply.get("client_properties"))}
    print(json.dumps(view) if output == "json" else format_status(view))
    return 0
