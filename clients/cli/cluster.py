"""`raftka cluster describe | decommission | unregister`: the brokers of a cluster and their
retirement (issue 19 item 4).

    describe      every broker with its replica and leader counts, the size of its logs
                  (DescribeLogDirs, for brokers that answer) and state: `active` (registered
                  and unfenced), `fenced` (registered, fenced: stopped, lost its session, or
                  not caught up yet; listed even when it hosts nothing) or `unregistered`
                  (named in replica lists, no registration). Fenced brokers come from
                  DescribeCluster with Raftka's tagged field (KIP-1073's IncludeFencedBrokers,
                  which our schema versions predate); a broker that does not answer it makes
                  those rows `offline` (fenced or unregistered, not told apart).
    decommission  drains every replica off broker N with AlterPartitionReassignments — new
                  placement by the controller's own rack-aware rule (placement.drain_plan:
                  replication factor kept, refused rather than shrunk) — shows the partitions
                  remaining until none is left, then unregisters N (UnregisterBroker). Partitions
                  that appear on N meanwhile (a topic created during the drain) are drained too.
                  Progress: partitions moved and remaining, and the bytes of the remaining
                  ones on N (DescribeLogDirs) while N answers.
                  Interrupted or timed out, it leaves the moves running: run it again to resume.
    balance --status  the controller's balancer's decision now, and why (cluster_balance.py)
    unregister    UnregisterBroker alone (kafka-cluster.sh unregister): the broker leaves
                  Metadata; replicas it still hosts stay in their replica lists, under-replicated
                  (KRaft's behaviour; the controller re-places them only when
                  raftka.rereplication.timeout.ms is set) — decommission first.

A broker still running when unregistered stays out of the cluster (it does not register again)
until its process restarts, as Kafka's does: stop it afterwards.
"""

from __future__ import annotations

import argparse
import time

import trio

from clients.admin import AdminClient
from clients.cli import cluster_balance
from clients.cli.output import (EXIT_FAILED, EXIT_OK, EXIT_USAGE, CommandError,
                                add_connection_args, client_config, print_json, print_table, run)
from clients.cluster import TopicPartition
from metadata_quorum.controller.placement import NotEnoughBrokers, drain_plan
from wire.errors import BrokerIdNotRegisteredError, KafkaError

PROG = "raftka cluster"
POLL_S = 1.0
STALE_SNAPSHOTS = 3            # in a row, before a partition that cannot leave counts


def register(sub) -> None:
    p = sub.add_parser("cluster", help="brokers: describe, decommission, unregister, balance",
                       description="The cluster's brokers (issue 19): list them with their "
                       "load, drain and retire one.")
    cs = p.add_subparsers(dest="cluster_command",
                          metavar="describe|decommission|unregister|balance")
    d = cs.add_parser("describe", help="brokers with replica and leader counts, state")
    add_connection_args(d)
    dec = cs.add_parser("decommission", help="move every replica off a broker, then "
                        "unregister it")
    dec.add_argument("--broker", type=int, required=True, help="the broker id to retire")
    dec.add_argument("--timeout-s", type=float, default=3600,
                     help="give up waiting after this long (the moves go on; run again to "
                          "resume); default 3600")
    dec.add_argument("--no-unregister", action="store_true",
                     help="drain only; keep the broker registered")
    add_connection_args(dec)
    u = cs.add_parser("unregister", help="UnregisterBroker: remove a broker's registration")
    u.add_argument("--broker", type=int, required=True)
    add_connection_args(u)
    cluster_balance.register(cs)
    p.set_defaults(func=main, _parser=p)


def main(args: argparse.Namespace) -> int:
    cmd = args.cluster_command
    if not cmd:
        args._parser.print_help()
        return EXIT_USAGE
    return run(f"{PROG} {cmd}", args, _run, args)


async def _run(args) -> int:
    async with AdminClient(config=client_config(args)) as admin:
        return await globals()[f"_{args.cluster_command}"](admin, args)


async def _balance(admin: AdminClient, args) -> int:
    return await cluster_balance.status(admin, args)


# -- what the cluster looks like ------------------------------------------------------------------

async def snapshot(admin: AdminClient):
    """(brokers {id: rack} from Metadata, {TopicPartition: replicas}, {TopicPartition: leader},
    {TopicPartition: target replicas of a move in progress})."""
    brokers, _ = await _brokers(admin)
    names = await admin.list_topics(include_internal=True)
    replicas, leaders = {}, {}
    for name, desc in (await admin.describe_topics(names)).items():
        if isinstance(desc, KafkaError):
            continue                    # deleted meanwhile
        for p in desc.partitions:
            tp = TopicPartition(name, p.partition)
            replicas[tp], leaders[tp] = tuple(p.replicas), p.leader
    moves = await admin.list_partition_reassignments()
    targets = {tp: tuple(x for x in m.replicas if x not in m.removing_replicas)
               for tp, m in moves.items()}
    return brokers, replicas, leaders, targets


async def _brokers(admin: AdminClient) -> tuple[dict, dict | None]:
    """({id: rack} of active brokers, {id: rack} of fenced ones or None if not told)."""
    cluster = await admin.describe_cluster(include_fenced=True)
    fenced = cluster.get("fenced_brokers")
    return ({b["id"]: b["rack"] for b in cluster["brokers"]},
            None if fenced is None else {b["id"]: b["rack"] for b in fenced})


def _state(b: int, brokers: dict, fenced: dict | None) -> str:
    if b in brokers:
        return "active"
    if fenced is None:
        return "offline"
    return "fenced" if b in fenced else "unregistered"


def broker_rows(brokers: dict, replicas: dict, leaders: dict, sizes: dict = None,
                fenced: dict | None = None) -> list[dict]:
    """One row per broker; `sizes` {broker: bytes of its logs} where known (else None);
    `fenced` {id: rack} of registered fenced brokers, None when not known."""
    ids = set(brokers) | set(fenced or ()) | {b for rs in replicas.values() for b in rs}
    rows = []
    for b in sorted(ids):
        rows.append({"id": b, "rack": brokers.get(b, (fenced or {}).get(b)),
                     "state": _state(b, brokers, fenced),
                     "replicas": sum(b in rs for rs in replicas.values()),
                     "leaders": sum(1 for x in leaders.values() if x == b),
                     "bytes": (sizes or {}).get(b)})
    return rows


async def log_sizes(admin: AdminClient, brokers) -> dict:
    """{broker: {TopicPartition: bytes}} from DescribeLogDirs, for the brokers that answer."""
    out = {}
    for b, replicas in (await admin.describe_replica_log_dirs(sorted(brokers))).items():
        if isinstance(replicas, dict):
            out[b] = {tp: size for tp, (size, _lag) in replicas.items()}
    return out


def _human(n: int | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


async def _describe(admin: AdminClient, args) -> int:
    brokers, replicas, leaders, targets = await snapshot(admin)
    _, fenced = await _brokers(admin)
    sizes = {b: sum(parts.values()) for b, parts in (await log_sizes(admin, brokers)).items()}
    rows = broker_rows(brokers, replicas, leaders, sizes, fenced)
    under = sum(1 for tp, rs in replicas.items()
                if any(b not in brokers for b in rs) and tp not in targets)
    if args.output == "json":
        print_json({"brokers": rows, "partitions": len(replicas),
                    "partitions_with_offline_replicas": under, "moves_in_progress": len(targets)})
        return EXIT_OK
    print_table(["BROKER", "RACK", "STATE", "REPLICAS", "LEADERS", "LOG SIZE"],
                [[r["id"], r["rack"] or "-", r["state"], r["replicas"], r["leaders"],
                  _human(r["bytes"])] for r in rows])
    print(f"{len(replicas)} partitions, {under} with offline replicas, "
          f"{len(targets)} moves in progress")
    return EXIT_OK


async def _unregister(admin: AdminClient, args) -> int:
    await admin.unregister_broker(args.broker)
    if args.output == "json":
        print_json({"broker": args.broker, "unregistered": True})
    else:
        print(f"Broker {args.broker} unregistered.")
    return EXIT_OK


# -- decommission ---------------------------------------------------------------------------------

def still_on(broker: int, replicas: dict, targets: dict) -> set:
    """Partitions that will keep a replica on `broker`: its current replica list, or the target
    of the move in progress, names it."""
    return {tp for tp, rs in replicas.items() if broker in targets.get(tp, rs)}


def next_moves(broker: int, brokers: dict, replicas: dict, targets: dict,
               submitted: set = frozenset()) -> dict:
    """Targets for the partitions still on `broker` that no move takes off it yet: planned from
    the replicas they will have (a move in progress: its target); every partition counts for
    the brokers' load. A partition in `submitted` (moved off by this run already) is planned
    again only if a move in progress puts it back on `broker` (someone replaced ours): the
    Metadata of the broker we ask may lag behind the controller's finished move, and planning
    from it would start a second, needless move."""
    plan = drain_plan(brokers, {tp: targets.get(tp, rs) for tp, rs in replicas.items()},
                      {broker})
    return {tp: t for tp, t in plan.items() if tp not in submitted or tp in targets}


async def planned(admin: AdminClient, n: int, submitted: set) -> tuple:
    """(brokers, replicas, targets, the next moves off broker `n`) from a fresh snapshot.

    A snapshot asks the topics (any broker's Metadata) and then the moves in progress (the
    controller's), one after the other: a move that ends in between (the balancer's, say)
    leaves its partition with the old and new replicas together and no target, one replica
    more than its replication factor, which looks like a partition that cannot leave `n`.
    So a shortfall only counts once STALE_SNAPSHOTS snapshots in a row show it."""
    for attempt in range(STALE_SNAPSHOTS):
        brokers, replicas, _, targets = await snapshot(admin)
        try:
            return brokers, replicas, targets, next_moves(n, brokers, replicas, targets,
                                                          submitted)
        except NotEnoughBrokers as exc:
            if attempt + 1 < STALE_SNAPSHOTS:
                await trio.sleep(POLL_S)
                continue
            tp = exc.key
            raise CommandError(f"cannot drain broker {n} without lowering a replication "
                               f"factor: {tp.topic}-{tp.partition} has {exc.replicas} replicas "
                               f"and only {exc.available} other brokers are available; "
                               "no move was started for it", EXIT_FAILED) from None


async def _decommission(admin: AdminClient, args) -> int:
    n = args.broker
    deadline = time.monotonic() + args.timeout_s
    total, last, submitted = None, None, set()
    while True:
        brokers, replicas, targets, plan = await planned(admin, n, submitted)
        if plan:
            await _submit(admin, plan)
            submitted |= set(plan)
        remaining = {tp for tp, rs in replicas.items() if n in rs}
        total = max(total or 0, len(remaining | set(plan)))
        if remaining != last and total:
            left = None
            if n in brokers:            # reachable: the bytes still to move off it
                on_n = (await log_sizes(admin, [n])).get(n)
                left = None if on_n is None else sum(on_n.get(tp, 0) for tp in remaining)
            _progress(args, n, total, remaining, left)
            last = remaining
        if not remaining and not plan:
            break
        if time.monotonic() > deadline:
            raise CommandError(f"timed out with {len(remaining)} partitions still on broker {n}"
                               " (their moves go on: run again to resume)", EXIT_FAILED)
        await trio.sleep(POLL_S)
    return await _finish(admin, args, total or 0)


async def _submit(admin: AdminClient, plan: dict) -> None:
    results = await admin.alter_partition_reassignments(
        {tp: list(target) for tp, target in plan.items()})
    failed = {tp: e for tp, e in results.items() if e is not None}
    if failed:
        tp, e = next(iter(sorted(failed.items(), key=lambda x: (x[0].topic, x[0].partition))))
        raise CommandError(f"{len(failed)} moves refused, first {tp.topic}-{tp.partition}: {e}",
                           EXIT_FAILED)


def _progress(args, broker: int, total: int, remaining: set, left: int | None) -> None:
    if args.output == "json":
        return
    moved = total - len(remaining)
    size = f" ({_human(left)} on it)" if left is not None else ""
    print(f"decommission broker {broker}: {moved}/{total} partitions moved, "
          f"{len(remaining)} remaining{size}", flush=True)


async def _finish(admin: AdminClient, args, moved: int) -> int:
    unregistered = False
    if not args.no_unregister:
        try:
            await admin.unregister_broker(args.broker)
            unregistered = True
        except BrokerIdNotRegisteredError:
            if not moved:
                raise CommandError(f"broker {args.broker} is not registered and hosts no "
                                   "replicas", EXIT_FAILED) from None
    if args.output == "json":
        print_json({"broker": args.broker, "partitions_moved": moved,
                    "unregistered": unregistered})
    else:
        what = "unregistered" if unregistered else "left registered" if args.no_unregister \
            else "it was not registered any more"
        print(f"Broker {args.broker} holds no replicas; {what}.")
    return EXIT_OK
