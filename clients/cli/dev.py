"""`raftka dev`: a local cluster of 3 controllers + 3 partition servers on 127.0.0.1
(`--brokers N` for N partition servers, ids 0..N-1; `--add-broker ID` joins one more broker to a
dev cluster already running from the same `--data-dir`).

Writes one Kafka-style `.properties` file per process under `<data-dir>/configs/`, starts each as
its own OS process (so a kill -9 of one is a real fault), waits until every broker reports that it
is registered and unfenced, then prints `bootstrap.servers=...` on a line of its own. SIGINT or
SIGTERM stops the brokers first (so they can hand off leadership) and then the controllers.
It supervises rather than tears down: a node that exits is reported on one line and the others
keep serving; `raftka dev status | kill | pause | resume | restart | isolate NODE` and `raftka
dev heal` from another terminal talk to it over a Unix socket under the data dir
(dev_supervisor.py, dev_control.py, dev_status.py, dev_netfaults.py). `--node-addresses` puts
each node at its own loopback address (what `isolate` needs). `--demo` also kills a partition leader under load and checks exactly-once
readback (dev_demo.py). Running it again with the same `--data-dir` resumes with the same data:
the config files are rewritten identically and every process recovers its own state.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

CONTROLLER_IDS = (3000, 3001, 3002)
# `--set` keys the controllers need too: they choose a new topic's partitions and replicas
# keys a `raftka dev` override passes to the controllers too (min.insync.replicas: the ELR of
# KIP-966 needs controllers and brokers to agree on it)
CONTROLLER_DEFAULTS = ("num.partitions", "default.replication.factor", "min.insync.replicas",
                       # a test seam both kinds of node read (common/process.py)
                       "raftka.clock.offset.file")
BROKER_IDS = (0, 1, 2)
STOP_TIMEOUT_S = 60          # per process at Ctrl-C, before SIGKILL
# broker ports are base+id and metrics base+1200+id, below the controllers' base+1000
# (their metrics base+1050, Raft ports base+1100)
MAX_BROKERS = 1000
DEV_NODE_PREFIX = "127.0.0"    # --node-addresses: 127.0.0.11.. (Linux routes all of 127/8 to lo)
FIRST_BROKER_HOST = 21          # --node-addresses: broker N at <prefix>.(21+N)
MAX_BROKERS_AT_OWN_ADDRESSES = 254 - FIRST_BROKER_HOST


@dataclass(frozen=True)
class DevLayout:
    """Ports and paths of the local cluster, derived from one base port."""
    data_dir: Path
    base_port: int = 9092
    overrides: dict[str, str] = field(default_factory=dict)
    # --secure: SASL_SSL listeners (SCRAM), a generated CA, ACLs enforced (clients/cli/secure_dev.py)
    secure: bool = False
    brokers: int = len(BROKER_IDS)      # --brokers: ids 0 .. brokers-1
    # --node-addresses: every node at its own loopback address, "<prefix>.11".. for the
    # controllers and "<prefix>.21".. for the brokers (prefix e.g. "127.0.0"), each connection a
    # node opens leaving from its address too, so kernel faults by address (chaos_tests/net) can
    # cut one node off. None: every node on 127.0.0.1 (what clients' default bootstrap expects)
    node_prefix: str | None = None
    # log directories per broker (JBOD): broker-N, then broker-N-d1, broker-N-d2, ...
    log_dirs: int = 1
    # extra environment variables per node name (broker-N, controller-C), on top of ours: the
    # campaign's time-jump class starts nodes under libfaketime this way (chaos_tests/campaign)
    node_env: dict[str, dict[str, str]] = field(default_factory=dict)

    def controller_host(self, index: int) -> str:
        return "127.0.0.1" if self.node_prefix is None else f"{self.node_prefix}.{11 + index}"

    def broker_host(self, broker_id: int) -> str:
        return "127.0.0.1" if self.node_prefix is None else \
            f"{self.node_prefix}.{FIRST_BROKER_HOST + broker_id}"

    def host_of(self, node: str) -> str:
        """The address of the node called `node` (broker-N, controller-C)."""
        kind, _, number = node.partition("-")
        if kind == "broker":
            return self.broker_host(int(number))
        return self.controller_host(CONTROLLER_IDS.index(int(number)))

    def node_hosts(self) -> dict[str, str]:
        """{node name: address} of every node of the layout."""
        return {**{f"controller-{c}": self.controller_host(i)
                   for i, c in enumerate(CONTROLLER_IDS)},
                **{f"broker-{b}": self.broker_host(b) for b in self.broker_ids}}

    def _source(self, host: str) -> dict[str, str]:
        return {} if self.node_prefix is None else {"raftka.network.source.address": host}

    @property
    def broker_ids(self) -> tuple[int, ...]:
        return tuple(range(self.brokers))

    def log_path(self, process_name: str) -> Path:
        return self.data_dir / "logs" / f"{process_name}.log"

    def broker_port(self, broker_id: int) -> int:
        return self.base_port + broker_id

    def controller_port(self, index: int) -> int:
        return self.base_port + 1000 + index

    def raft_port(self, index: int) -> int:
        return self.base_port + 1100 + index

    def metrics_port(self, broker_id: int) -> int:
        return self.base_port + 1200 + broker_id

    def controller_metrics_port(self, index: int) -> int:
        return self.base_port + 1050 + index

    def health_urls(self) -> dict[str, str]:
        """Node name → its /health/ready (`raftka dev status` asks each running node)."""
        urls = {f"broker-{b}": f"http://{self.broker_host(b)}:{self.metrics_port(b)}"
                "/health/ready" for b in self.broker_ids}
        return urls | {f"controller-{c}": f"http://{self.controller_host(i)}:"
                       f"{self.controller_metrics_port(i)}/health/ready"
                       for i, c in enumerate(CONTROLLER_IDS)}

    @property
    def voters(self) -> str:
        return ",".join(f"{cid}@{self.controller_host(i)}:{self.controller_port(i)}"
                        for i, cid in enumerate(CONTROLLER_IDS))

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"{self.broker_host(b)}:{self.broker_port(b)}" for b in self.broker_ids)

    def _secure(self):
        from clients.cli.secure_dev import SecureDev
        return SecureDev(self)

    def controller_properties(self, index: int) -> dict[str, str]:
        from clients.cli.secure_dev import dev_raft_password
        cid = CONTROLLER_IDS[index]
        return {
            "node.id": str(cid),
            "process.roles": "controller",
            "controller.quorum.voters": self.voters,
            "listeners": f"CONTROLLER://{self.controller_host(index)}:{self.controller_port(index)}",
            "raftka.controller.raft.peers": ",".join(
                f"{c}@{self.controller_host(i)}:{self.raft_port(i)}"
                for i, c in enumerate(CONTROLLER_IDS)),
            "metadata.log.dir": str(self.data_dir / f"controller-{cid}"),
            # random per data dir: a well-known one would let any local user run code on them
            "raftka.controller.raft.password": dev_raft_password(self.data_dir),
            # the controller picks the layout of a topic created without one (Kafka's KRaft
            # rule): RF 3, so the brokers' min.insync.replicas=2 can be met
            "default.replication.factor": "3",
            "min.insync.replicas": "2",        # the brokers' value (eligible leader replicas)
            # /metrics and /health/* (metadata_quorum/health.py)
            "raftka.metrics.listener": f"{self.controller_host(index)}:"
                                       f"{self.controller_metrics_port(index)}",
        } | self._source(self.controller_host(index)) | {k: v for k, v in self.overrides.items()
             if k in CONTROLLER_DEFAULTS or k.startswith("raftka.controller.")} \
          | (self._secure().controller_properties() if self.secure else {})

    def broker_properties(self, broker_id: int) -> dict[str, str]:
        props = {
            "node.id": str(broker_id),
            "process.roles": "broker",
            "controller.quorum.voters": self.voters,
            "listeners": f"PLAINTEXT://{self.broker_host(broker_id)}:{self.broker_port(broker_id)}",
            "log.dirs": ",".join([str(self.data_dir / f"broker-{broker_id}")] + [
                str(self.data_dir / f"broker-{broker_id}-d{i}") for i in range(1, self.log_dirs)]),
            "default.replication.factor": "3",
            "min.insync.replicas": "2",
            "offsets.topic.replication.factor": "3",
            # 50 (Kafka's default) offsets partitions x RF 3 is 150 logs for 3 local processes
            # on one machine; 6 keeps group start-up light
            "offsets.topic.num.partitions": "6",
            # Kafka's 3 s delay batches a production group's first joins; locally it only waits
            "group.initial.rebalance.delay.ms": "300",
            # likewise __transaction_state: 50 partitions x RF 3 on the first transaction is heavy
            "transaction.state.log.num.partitions": "6",
            "raftka.metrics.listener": f"{self.broker_host(broker_id)}:{self.metrics_port(broker_id)}",
        } | self._source(self.broker_host(broker_id))
        if self.secure:
            props.update(self._secure().broker_properties(broker_id))
        props.update(self.overrides)
        return props


def write_properties(path: Path, props: dict[str, str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    body = "".join(f"{k}={v}\n" for k, v in props.items())
    if any("password" in k for k in props):
        # the Raft password (and --secure's inter-node one) are in here: private before written
        path.touch(0o600)
        path.chmod(0o600)
    path.write_text("# written by `raftka dev`; edits are overwritten on the next start\n" + body)


class ManagedProcess:
    """One child process whose output is echoed with a prefix and scanned for a ready line."""

    def __init__(self, name: str, argv: list[str], ready_marker: str, quiet: bool,
                 log_path: Path | None = None, env: dict[str, str] | None = None):
        self.name = name
        self.ready = threading.Event()
        self._terminated = False
        self._marker = ready_marker
        self._quiet = quiet
        # Every line also goes to a per-process log file (appended across restarts) so a failed
        # live test or a quiet run can be diagnosed after the fact.
        self._log = None
        if log_path is not None:
            log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log = open(log_path, "a", buffering=1)
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, text=True, bufsize=1,
                                     env={**os.environ, **env} if env else None)
        self._pump_thread = threading.Thread(target=self._pump, daemon=True)
        self._pump_thread.start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        try:
            for line in self.proc.stdout:
                if self._marker in line:
                    self.ready.set()
                if self._log is not None:
                    self._log.write(line)
                if not self._quiet:
                    sys.stderr.write(f"[{self.name}] {line}")
        finally:
            # the child's output ended (it exited): a supervisor that restarts nodes for hours
            # must not keep one open log file per restart
            self.proc.stdout.close()
            if self._log is not None:
                self._log.close()

    def terminate(self) -> None:
        """SIGTERM, once: the node then stops cleanly (a second one is ignored by the node)."""
        if self.proc.poll() is None and not self._terminated:
            self._terminated = True
            self.proc.send_signal(signal.SIGTERM)

    def stop(self, timeout: float) -> None:
        self.terminate()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        # the node's last lines ("broker 0 stopped") reach its log before we return
        self._pump_thread.join(timeout=5)


def start_cluster(layout: DevLayout, quiet: bool = False) -> list[ManagedProcess]:
    """Start every process; return them in start order (controllers first)."""
    procs = [start_controller(layout, i, quiet) for i in range(len(CONTROLLER_IDS))]
    for bid in layout.broker_ids:
        procs.append(start_broker(layout, bid, quiet))
    return procs


def start_controller(layout: DevLayout, index: int, quiet: bool) -> ManagedProcess:
    """Write controller `index`'s config under the layout and start it (ready once listening)."""
    cid = CONTROLLER_IDS[index]
    path = layout.data_dir / "configs" / f"controller-{cid}.properties"
    write_properties(path, layout.controller_properties(index))
    return ManagedProcess(f"controller-{cid}",
                          [sys.executable, "-m", "metadata_quorum", "--config", str(path)],
                          "listening on", quiet, layout.log_path(f"controller-{cid}"),
                          layout.node_env.get(f"controller-{cid}"))


def start_node(layout: DevLayout, name: str, quiet: bool) -> ManagedProcess:
    """Start the node called `name` (broker-N, controller-C) again, with the same config."""
    kind, _, number = name.partition("-")
    if kind == "broker":
        return start_broker(layout, int(number), quiet)
    return start_controller(layout, CONTROLLER_IDS.index(int(number)), quiet)


def start_broker(layout: DevLayout, broker_id: int, quiet: bool) -> ManagedProcess:
    """Write broker `broker_id`'s config under the layout and start it (ready once unfenced)."""
    path = layout.data_dir / "configs" / f"broker-{broker_id}.properties"
    write_properties(path, layout.broker_properties(broker_id))
    return ManagedProcess(f"broker-{broker_id}",
                          [sys.executable, "-m", "partition_server", "--config", str(path)],
                          "unfenced", quiet, layout.log_path(f"broker-{broker_id}"),
                          layout.node_env.get(f"broker-{broker_id}"))


def wait_ready(procs: list[ManagedProcess], timeout_s: float) -> str | None:
    """None when every process is ready, else a one-line reason."""
    deadline = time.monotonic() + timeout_s
    for p in procs:
        while not p.ready.wait(0.1):
            if p.proc.poll() is not None:
                return f"{p.name} exited with code {p.proc.returncode} before it was ready"
            if time.monotonic() > deadline:
                return f"{p.name} not ready after {timeout_s:.0f}s"
    return None


def stop_cluster(procs: list[ManagedProcess]) -> None:
    # Brokers first, in parallel-ish: each gets SIGTERM, then controllers once brokers are gone,
    # so controlled shutdown can still reach an active controller.
    brokers = [p for p in procs if p.name.startswith("broker")]
    controllers = [p for p in procs if p.name.startswith("controller")]
    for group in (brokers, controllers):
        for p in group:
            p.terminate()
        for p in group:
            # a broker with 10,000 replicas needs more than 15 s for its controlled shutdown
            # and closing its logs; SIGKILL mid-close makes its next start a crash recovery
            p.stop(timeout=STOP_TIMEOUT_S)


def run_dev(data_dir: str, base_port: int, overrides: dict[str, str], demo: bool,
            quiet: bool, ready_timeout_s: float = 60.0, secure: bool = False,
            brokers: int = len(BROKER_IDS), add_broker: int | None = None,
            node_prefix: str | None = None, log_dirs: int = 1) -> int:
    if add_broker is not None:
        from clients.cli.dev_add_broker import run_add_broker
        return run_add_broker(data_dir, add_broker, overrides, quiet, ready_timeout_s, secure)
    problem = _refuse_layout(brokers, node_prefix)
    if problem:
        print(f"raftka dev: {problem}", file=sys.stderr)
        return 2
    from clients.cli.dev_control import ControlServer
    from clients.cli.dev_netfaults import DevNetFaults
    from clients.cli.dev_supervisor import Supervisor
    if not 1 <= log_dirs <= 16:
        print("raftka dev: --log-dirs must be 1 to 16", file=sys.stderr)
        return 2
    layout = DevLayout(Path(data_dir).resolve(), base_port, overrides, secure, brokers,
                       node_prefix, log_dirs=log_dirs)
    layout.data_dir.mkdir(parents=True, exist_ok=True)
    supervisor = Supervisor([], lambda name: start_node(layout, name, quiet))
    net = DevNetFaults(layout)
    # the control socket first: it also refuses a second `raftka dev` on the same data dir
    control = ControlServer(layout.data_dir, supervisor, layout.bootstrap_servers, net)
    control.health_urls = layout.health_urls()
    problem = control.start()
    if problem:
        print(f"raftka dev: {problem}", file=sys.stderr)
        return 1
    leftover = net.clear_leftovers()
    if leftover:
        print(leftover, file=sys.stderr, flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    procs = start_cluster(layout, quiet)
    supervisor.add(procs)
    try:
        problem = wait_ready(procs, ready_timeout_s)
        if problem:
            print(f"raftka dev: {problem}", file=sys.stderr)
            return 1
        _announce(layout, demo, supervisor, control)
        while not stop.wait(0.5):
            for line in supervisor.poll():      # reported once; the rest keep serving
                print(line, file=sys.stderr, flush=True)
        return 0
    finally:
        control.close()
        net.close()                 # heal: no packet filter rule outlives the cluster
        stop_cluster(supervisor.close())
        print("raftka dev: stopped", file=sys.stderr, flush=True)


def _refuse_layout(brokers: int, node_prefix: str | None) -> str | None:
    if not 1 <= brokers <= MAX_BROKERS:
        return f"--brokers must be 1..{MAX_BROKERS}"
    if node_prefix is None:
        return None
    if brokers > MAX_BROKERS_AT_OWN_ADDRESSES:
        return (f"--node-addresses gives broker N the address {node_prefix}.(21+N): at most "
                f"{MAX_BROKERS_AT_OWN_ADDRESSES} brokers")
    return None


def _announce(layout: DevLayout, demo: bool, supervisor, control) -> None:
    """Once ready: self-healing on, the bootstrap line (and client.properties), the demo."""
    if layout.secure:
        from clients.cli.secure_dev import SecureDev
        properties = SecureDev(layout).bootstrap_super_user()
        control.client_properties = str(properties)
    from clients.cli.dev_selfheal import enable
    print(enable(layout), file=sys.stderr, flush=True)   # balancer, re-replication on
    print(f"bootstrap.servers={layout.bootstrap_servers}", flush=True)
    if layout.secure:
        print(f"client.properties={properties}", flush=True)
    net = "|isolate" if layout.node_prefix is not None else ""
    print(f"raftka dev: control with `raftka dev status|kill|pause|resume|restart{net} NODE "
          f"--data-dir {layout.data_dir}` from another terminal"
          + (" (`raftka dev heal` undoes isolate)" if net else ""), file=sys.stderr, flush=True)
    if demo:
        from clients.cli.demo import run_demo
        from common.security import PLAINTEXT, ClientSecurity
        security = PLAINTEXT
        if layout.secure:       # the demo's clients log in as the super user
            from clients.cli.secure_dev import SecureDev
            security = ClientSecurity.from_properties(SecureDev(layout).client_properties())
        # in a thread: the main loop keeps reporting exits (the demo's own kill too), and
        # Ctrl-C stops the cluster at once instead of after the demo's deadlines
        threading.Thread(target=run_demo, args=(layout.bootstrap_servers, security, supervisor),
                         daemon=True, name="demo").start()


# -- the `raftka dev` command line (registered by clients/cli/main.py) ----------------------------

def _parse_sets(items: list[str]) -> dict[str, str]:
    overrides: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SystemExit(f"raftka: --set expects key=value, got {item!r}")
        overrides[key.strip()] = value.strip()
    return overrides


def _node_prefix(text: str) -> str:
    parts = text.split(".")
    if len(parts) != 3 or parts[0] != "127" or \
            not all(p.isdigit() and 0 <= int(p) <= 255 for p in parts):
        import argparse
        raise argparse.ArgumentTypeError(f"{text!r}: a prefix like 127.0.0 (three numbers, "
                                         "the first 127: a loopback address)")
    return text


def cmd_dev(args) -> int:
    if args.action:
        from clients.cli.dev_control import run_control
        return run_control(args.data_dir, args.action, args.node, args.output)
    if args.node:
        raise SystemExit(f"raftka dev: unexpected argument {args.node!r}")
    return run_dev(args.data_dir, args.base_port, _parse_sets(args.set), args.demo, args.quiet,
                   secure=args.secure, brokers=args.brokers, add_broker=args.add_broker,
                   node_prefix=args.node_addresses, log_dirs=args.log_dirs)


def register(sub) -> None:
    dev = sub.add_parser("dev", help="run a local cluster: 3 controllers + 3 partition servers",
                         description="Start 3 controllers and 3 partition servers (--brokers N: "
                         "N) on 127.0.0.1 with data under --data-dir; prints "
                         "bootstrap.servers=... when ready; a node that exits is reported and "
                         "the rest keep serving; Ctrl-C stops everything. From another terminal: "
                         "raftka dev status|kill|pause|resume|restart NODE --data-dir D. "
                         "Running it again resumes with the same data. --add-broker ID joins "
                         "one more broker to the cluster running from --data-dir.")
    dev.add_argument("action", nargs="?",
                     choices=["status", "kill", "pause", "resume", "restart", "isolate", "heal"],
                     help="control the `raftka dev` running from --data-dir (another terminal): "
                          "status; kill (SIGKILL), pause (SIGSTOP), resume, restart NODE; "
                          "isolate NODE (cut it off the other nodes with nftables: needs "
                          "--node-addresses and root), heal (undo every isolate)")
    dev.add_argument("node", nargs="?", help="broker-N or controller-C (or the bare id)")
    dev.add_argument("--output", choices=["table", "json"], default="table",
                     help="status as a table or as JSON")
    dev.add_argument("--data-dir", default="./raftka-data", help="where all data lives")
    dev.add_argument("--base-port", type=int, default=9092,
                     help="brokers listen on base+id, controllers on base+1000..1002")
    dev.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="override a broker property (repeatable)")
    dev.add_argument("--demo", action="store_true",
                     help="once ready, create a topic, produce and consume a few records, "
                          "then kill demo-0's leader under an acks=all producer, restart it and "
                          "check every acknowledged record is read back exactly once")
    dev.add_argument("--quiet", action="store_true", help="do not echo process logs")
    dev.add_argument("--secure", action="store_true",
                     help="SASL_SSL listeners (SCRAM-SHA-512), a generated CA, ACLs enforced, a "
                          "super user; prints client.properties=PATH")
    dev.add_argument("--node-addresses", nargs="?", const=DEV_NODE_PREFIX, metavar="PREFIX",
                     type=_node_prefix,
                     help=f"every node at its own loopback address (PREFIX.11-13 the "
                          f"controllers, PREFIX.(21+N) broker N; PREFIX {DEV_NODE_PREFIX} "
                          "unless given, any 127.x.y), connecting from it too, so `raftka dev "
                          "isolate` can cut one off; the printed bootstrap.servers names "
                          "those addresses")
    dev.add_argument("--brokers", type=int, default=len(BROKER_IDS),
                     help="partition servers to run, ids 0..N-1 (default 3)")
    dev.add_argument("--log-dirs", type=int, default=1, metavar="N",
                     help="log directories per broker (JBOD): broker-ID, broker-ID-d1, ... "
                          "under --data-dir (default 1)")
    dev.add_argument("--add-broker", type=int, metavar="ID",
                     help="start one more broker with this id, joining the dev cluster running "
                          "from --data-dir (its base port is read from the configs there)")
    dev.set_defaults(func=cmd_dev)
