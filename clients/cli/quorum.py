"""`raftka quorum describe | add-controller | remove-controller`, like kafka-metadata-quorum.sh.

`describe`: the quorum's status (`describe --status --replication`): voters with their
endpoints, observers (brokers following the metadata stream).
`add-controller` / `remove-controller` (KIP-853): AddRaftVoter / RemoveRaftVoter, sent to a
broker (`--bootstrap-server`), which forwards them to the active controller, or with
`--bootstrap-controller` to the active controller itself (found from the voters DescribeQuorum
lists); NOT_CONTROLLER is retried until `--timeout-ms`. The new
controller must be running first, configured with the current voters in
controller.quorum.voters and its own Raft address in raftka.controller.raft.peers;
`--command-config` reads its id and endpoints from that file (Kafka reads the same flag).
`add-controller` then waits until the new voter has caught up with the leader's Raft log.

Asks any broker (`--bootstrap-server`, which forwards to the active controller) or a controller
directly (`--bootstrap-controller`) with DescribeQuorum. Voters' log end offsets are pysyncobj Raft
log indexes as the leader sees them (known on the leader only); the high watermark and observers'
offsets are metadata offsets.
"""

from __future__ import annotations

import json
import os
import sys

import trio

from clients.connection import BrokerConnection, ConnectionClosed
from common.security import PLAINTEXT
from wire.errors import ErrorCode
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS


async def describe(host: str, port: int, security=PLAINTEXT) -> dict:
    conn = BrokerConnection(host, port, "raftka-cli", security=security)
    await conn.connect()
    try:
        cls = REQUESTS[ApiKey.DESCRIBE_QUORUM]
        resp = await conn.request(cls(topics=[cls.TopicData(
            topic_name="__cluster_metadata", partitions=[cls.PartitionData(partition_index=0)])]), 2)
    finally:
        await conn.aclose()
    if resp.error_code != 0:
        raise RuntimeError(ErrorCode(resp.error_code).name)
    p = resp.topics[0].partitions[0]
    endpoints = {n.node_id: f"{n.listeners[0].host}:{n.listeners[0].port}" for n in resp.nodes
                 if n.listeners}
    leader_leo = next((v.log_end_offset for v in p.current_voters if v.replica_id == p.leader_id), -1)
    return {
        "leader_id": p.leader_id, "leader_epoch": p.leader_epoch, "high_watermark": p.high_watermark,
        "voters": [{"id": v.replica_id, "endpoint": endpoints.get(v.replica_id),
                    "log_end_offset": v.log_end_offset} for v in p.current_voters],
        "observers": [{"id": o.replica_id, "log_end_offset": o.log_end_offset,
                       "lag": max(0, p.high_watermark - o.log_end_offset),
                       "last_fetch_timestamp": o.last_fetch_timestamp} for o in p.observers],
        "_leader_leo": leader_leo,
    }


def cmd_describe(args) -> int:
    target = args.bootstrap_controller or args.bootstrap_server
    host, _, port = target.split(",")[0].rpartition(":")
    try:
        status = trio.run(describe, host, int(port))
    except (ConnectionClosed, OSError, trio.TooSlowError) as exc:
        print(f"raftka quorum describe: cannot reach {target}: {exc}", file=sys.stderr)
        return 1
    except RuntimeError as exc:
        print(f"raftka quorum describe: {exc}", file=sys.stderr)
        return 1
    status.pop("_leader_leo")
    if args.output == "json":
        print(json.dumps(status))
        return 0
    print(f"LeaderId:       {status['leader_id']}")
    print(f"LeaderEpoch:    {status['leader_epoch']}")
    print(f"HighWatermark:  {status['high_watermark']}")
    print(f"{'NodeId':>8} {'Role':<9} {'Endpoint':<22} {'LogEndOffset':>12}")
    for v in status["voters"]:
        role = "Leader" if v["id"] == status["leader_id"] else "Follower"
        print(f"{v['id']:>8} {role:<9} {v['endpoint'] or '-':<22} {v['log_end_offset']:>12}")
    for o in status["observers"]:
        print(f"{o['id']:>8} {'Observer':<9} {'-':<22} {o['log_end_offset']:>12}  lag {o['lag']}")
    return 0


# -- add-controller / remove-controller ---------------------------------------------------------

class QuorumError(Exception):
    """The quorum refused the change (Kafka error name and message)."""


def _target(args) -> tuple[str, int]:
    target = args.bootstrap_controller or args.bootstrap_server
    host, _, port = target.split(",")[0].rpartition(":")
    return host, int(port)


async def _ask(endpoint: tuple[str, int], message, version: int, timeout_s: float = 10):
    conn = BrokerConnection(endpoint[0], endpoint[1], "raftka-cli")
    await conn.connect(timeout_s=3)
    try:
        return await conn.request(message, version, timeout_s=timeout_s)
    finally:
        await conn.aclose()


async def _voter_endpoints(bootstrap: tuple[str, int]) -> list[tuple[str, int]]:
    status = await describe(*bootstrap)
    out = []
    for v in status["voters"]:
        if v["endpoint"]:
            host, _, port = v["endpoint"].rpartition(":")
            out.append((host, int(port)))
    return out or [bootstrap]


async def send_to_active(bootstrap: tuple[str, int], message, timeout_s: float = 60,
                         via_broker: bool = False):
    """Send `message` to the active controller; returns the response (any error but
    NOT_CONTROLLER). Retries NOT_CONTROLLER and unreachable voters until `timeout_s`.
    `via_broker`: `bootstrap` is a broker, which forwards to the active controller."""
    last = "no controller answered"
    with trio.move_on_after(timeout_s):
        while True:
            endpoints = [bootstrap]
            if not via_broker:
                try:
                    endpoints = await _voter_endpoints(bootstrap)
                except (ConnectionClosed, OSError, trio.TooSlowError, RuntimeError):
                    pass
            for endpoint in endpoints:
                try:
                    resp = await _ask(endpoint, message, 0, timeout_s=max(timeout_s, 15))
                except (ConnectionClosed, OSError, trio.TooSlowError) as exc:
                    last = f"{endpoint[0]}:{endpoint[1]}: {exc!r}"
                    continue
                if resp.error_code != ErrorCode.NOT_CONTROLLER:
                    return resp
                last = resp.error_message or "NOT_CONTROLLER"
            await trio.sleep(0.3)
    raise trio.TooSlowError(last)


def _check(resp) -> None:
    if resp.error_code != 0:
        raise QuorumError(f"{ErrorCode(resp.error_code).name}: {resp.error_message or ''}".strip())


async def add_controller(bootstrap, node_id: int, listener: tuple[str, int],
                         raft: tuple[str, int], timeout_s: float = 60,
                         via_broker: bool = False) -> None:
    cls = REQUESTS[ApiKey.ADD_RAFT_VOTER]
    msg = cls(cluster_id=None, timeout_ms=int(timeout_s * 1000), voter_id=node_id,
              listeners=[cls.Listener(name="CONTROLLER", host=listener[0], port=listener[1]),
                         cls.Listener(name="RAFT", host=raft[0], port=raft[1])])
    _check(await send_to_active(bootstrap, msg, timeout_s, via_broker))


async def remove_controller(bootstrap, node_id: int, timeout_s: float = 60,
                            via_broker: bool = False) -> None:
    cls = REQUESTS[ApiKey.REMOVE_RAFT_VOTER]
    _check(await send_to_active(bootstrap, cls(cluster_id=None, voter_id=node_id), timeout_s,
                                via_broker))


async def wait_caught_up(bootstrap, node_id: int, timeout_s: float = 60) -> int:
    """Wait until the leader reports voter `node_id` at (or past) the leader's Raft log end
    as first seen here; returns that index."""
    target = None
    with trio.fail_after(timeout_s):
        while True:
            for endpoint in await _voter_endpoints(bootstrap):
                try:
                    status = await describe(*endpoint)
                except (ConnectionClosed, OSError, trio.TooSlowError, RuntimeError):
                    continue
                if status["_leader_leo"] < 0:
                    continue                # not the leader: it does not know the positions
                target = status["_leader_leo"] if target is None else target
                leo = next((v["log_end_offset"] for v in status["voters"]
                            if v["id"] == node_id), -1)
                if leo >= target:
                    return leo
            await trio.sleep(0.3)


def _new_controller(args) -> tuple[int, tuple[str, int], tuple[str, int]]:
    """The new controller's id, CONTROLLER listener and Raft address, from --command-config
    (its properties file) or the explicit flags."""
    from common.properties import ConfigError, load_properties, parse_endpoint, parse_voters
    if args.command_config:
        try:
            props = load_properties(args.command_config)
            node_id = int(props["node.id"])
            entries = [parse_endpoint(x) for x in props["listeners"].split(",") if x.strip()]
            chosen = next((e for e in entries if e[0] == "CONTROLLER"), entries[0])
            raft = parse_voters(props["raftka.controller.raft.peers"])[node_id]
        except (ConfigError, KeyError, ValueError, IndexError) as exc:
            raise ValueError(f"--command-config {args.command_config}: {exc!r}") from None
        return node_id, (chosen[1], chosen[2]), raft

    def endpoint(text, flag):
        host, _, port = (text or "").rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"{flag} expects host:port")
        return host, int(port)
    if args.controller_id is None:
        raise ValueError("give --command-config FILE, or --controller-id, --controller-listener "
                         "and --raft-address")
    return (args.controller_id, endpoint(args.controller_listener, "--controller-listener"),
            endpoint(args.raft_address, "--raft-address"))


def cmd_add(args) -> int:
    try:
        node_id, listener, raft = _new_controller(args)
    except ValueError as exc:
        print(f"raftka quorum add-controller: {exc}", file=sys.stderr)
        return 2
    return _run_change(args, "add-controller", node_id, lambda boot: add_controller(
        boot, node_id, listener, raft, args.timeout_ms / 1000, not args.bootstrap_controller))


def cmd_remove(args) -> int:
    return _run_change(args, "remove-controller", args.controller_id, lambda boot:
                       remove_controller(boot, args.controller_id, args.timeout_ms / 1000,
                                         not args.bootstrap_controller))


def _run_change(args, name: str, node_id: int, change) -> int:
    bootstrap = _target(args)

    async def go():
        await change(bootstrap)
        if name == "add-controller" and not args.no_wait:
            print(f"controller {node_id} added; waiting for it to catch up", flush=True)
            leo = await wait_caught_up(bootstrap, node_id, args.timeout_ms / 1000)
            print(f"controller {node_id} caught up with the leader (Raft index {leo})")
        else:
            print(f"controller {node_id} {'added' if name == 'add-controller' else 'removed'}")
    try:
        trio.run(go)
    except QuorumError as exc:
        print(f"raftka quorum {name}: {exc}", file=sys.stderr)
        return 1
    except (ConnectionClosed, OSError, trio.TooSlowError) as exc:
        print(f"raftka quorum {name}: no answer from the quorum: {exc}", file=sys.stderr)
        return 3
    return 0


def main(args) -> int:
    command = {"describe": cmd_describe, "add-controller": cmd_add,
               "remove-controller": cmd_remove}.get(args.quorum_command)
    if command is None:
        raise SystemExit("raftka quorum: choose describe, add-controller or remove-controller")
    return command(args)


def register(sub) -> None:
    q = sub.add_parser("quorum", help="metadata quorum: describe, add-controller, "
                                      "remove-controller")
    q_sub = q.add_subparsers(dest="quorum_command",
                             metavar="describe|add-controller|remove-controller")
    qd = q_sub.add_parser("describe", help="leader, epoch, high watermark, voters and observers")
    qa = q_sub.add_parser("add-controller", help="add a running controller as a voter (KIP-853)")
    qr = q_sub.add_parser("remove-controller", help="remove a voter from the quorum (KIP-853)")
    for p in (qd, qa, qr):
        p.add_argument("--bootstrap-server", default=os.environ.get("RAFTKA_BOOTSTRAP",
                                                                     "127.0.0.1:9092"))
        p.add_argument("--bootstrap-controller", help="ask a controller directly (host:port)")
    qd.add_argument("--output", choices=["table", "json"], default="table")
    qa.add_argument("--command-config", help="the new controller's properties file")
    qa.add_argument("--controller-id", type=int)
    qa.add_argument("--controller-listener", help="its CONTROLLER listener, host:port")
    qa.add_argument("--raft-address", help="its Raft (pysyncobj) address, host:port")
    qa.add_argument("--no-wait", action="store_true", help="do not wait for it to catch up")
    qr.add_argument("--controller-id", type=int, required=True)
    qr.add_argument("--controller-directory-id", help="accepted for Kafka compatibility; "
                    "raftka's voters have no directory ids")
    for p in (qa, qr):
        p.add_argument("--timeout-ms", type=int, default=60_000)
    q.set_defaults(func=main)
