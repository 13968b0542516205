"""`raftka reassign generate|execute|verify|cancel`: move partitions between brokers, like
kafka-reassign-partitions.sh and with its JSON files (formats in reassign_plan.py).

  raftka reassign generate --topics-to-move-json-file topics.json --broker-list 1,2,3
  raftka reassign execute --reassignment-json-file plan.json [--throttle 10000000] [--watch]
  raftka reassign verify --reassignment-json-file plan.json [--watch] [--preserve-throttles]
  raftka reassign cancel --reassignment-json-file plan.json [--preserve-throttles]

`execute --throttle B` does what Kafka's tool does: on every broker of the move (old and new
replicas) `leader.replication.throttled.rate` and `follower.replication.throttled.rate` = B
bytes/s, and on each topic `leader.replication.throttled.replicas` = the current replicas,
`follower.replication.throttled.replicas` = the replicas being added; then it submits the plan.
`verify` says per partition complete / in progress / mismatch and, once every partition is
complete, removes those throttles (from every broker and the plan's topics) unless
`--preserve-throttles`; `cancel` cancels the moves in progress and removes them too.

`--watch` (execute, verify) shows, until the moves end, per partition the bytes copied and left
(log sizes of the adding replicas against the leader's, from DescribeLogDirs), a progress bar and
an ETA at the rate of the last interval; with `--output json` one JSON object per sample.

Exit codes (clients/cli/output.py): 2 for a plan that cannot be used (unreadable, bad JSON,
duplicate replica, bad --broker-list); 1 when the cluster refuses it or it does not fit the
cluster (unknown broker, topic or partition, a move already running without --additional, a
partition whose verify finds another replica set); 3 when the cluster cannot be reached.
"""

from __future__ import annotations

import argparse
import collections
import sys
import time

import trio

from clients.admin import (AdminClient, AlterConfigOp, AlterConfigOpType, ConfigResource,
                           ConfigResourceType)
from clients.cli import reassign_plan as plan_mod
from clients.cli.output import (EXIT_FAILED, EXIT_OK, EXIT_USAGE, CommandError,
                                add_connection_args, client_config, print_json, run)
from clients.cluster import TopicPartition
from wire.errors import ErrorCode

PROG = "raftka reassign"
RATE_KEYS = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
REPLICA_KEYS = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")
EXISTING_MOVE = ("Cannot execute because there is an existing partition assignment. Use "
                 "--additional to override this and create a new partition assignment in "
                 "addition to the existing one.")


def register(sub) -> None:
    p = sub.add_parser("reassign", help="move partitions between brokers "
                       "(kafka-reassign-partitions)", description="Move partitions between brokers, "
                       "like kafka-reassign-partitions.sh, with its JSON files.")
    rs = p.add_subparsers(dest="reassign_command", metavar="generate|execute|verify|cancel")
    g = rs.add_parser("generate", help="propose a plan moving topics onto brokers")
    g.add_argument("--topics-to-move-json-file", required=True, metavar="FILE")
    g.add_argument("--broker-list", required=True, metavar="1,2,3")
    add_connection_args(g)
    for name, helptext in (("execute", "start the moves of a plan"),
                           ("verify", "report a plan's progress; remove throttles when done"),
                           ("cancel", "cancel a plan's moves in progress")):
        a = rs.add_parser(name, help=helptext)
        a.add_argument("--reassignment-json-file", required=True, metavar="FILE")
        if name == "execute":
            a.add_argument("--throttle", type=int, default=-1, metavar="BYTES_PER_S",
                           help="replication throttle for the moves (bytes/s per broker)")
            a.add_argument("--additional", action="store_true",
                           help="execute even though other moves are in progress")
        else:
            a.add_argument("--preserve-throttles", action="store_true",
                           help="leave the replication throttles in place")
        if name != "cancel":
            a.add_argument("--watch", action="store_true",
                           help="show copy progress until the moves end")
            a.add_argument("--interval", type=float, default=1.0, metavar="S",
                           help="seconds between --watch samples (default 1)")
        add_connection_args(a)
    p.set_defaults(func=main, _parser=p)


def main(args: argparse.Namespace) -> int:
    if not args.reassign_command:
        args._parser.print_help()
        return EXIT_USAGE
    commands = {"generate": _generate, "execute": _execute, "verify": _verify,
                "cancel": _cancel}
    return run(f"{PROG} {args.reassign_command}", args, commands[args.reassign_command], args)


# -- inputs ------------------------------------------------------------------------------------------

def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as exc:
        raise CommandError(f"cannot read {path}: {exc.strerror or exc}", EXIT_USAGE) from None
    except UnicodeDecodeError:
        raise CommandError(f"{path} is not a UTF-8 text file", EXIT_USAGE) from None


def _parsed(parse, *args):
    try:
        return parse(*args)
    except plan_mod.PlanError as exc:
        raise CommandError(str(exc), EXIT_USAGE) from None


def _load_plan(args) -> dict:
    return _parsed(plan_mod.parse_reassignment, _read(args.reassignment_json_file))


def _admin(args) -> AdminClient:
    return AdminClient(config=client_config(args))


async def _brokers(admin: AdminClient) -> list[int]:
    return [b["id"] for b in (await admin.describe_cluster())["brokers"]]


async def _current(admin: AdminClient, topics, plan: dict | None = None):
    """({(topic, p): replicas} of `topics`, {(topic, p): leader}); unknown topics or
    partitions named in `plan` are refused."""
    described = await admin.describe_topics(sorted(set(topics)))
    current, leaders = {}, {}
    for name, d in described.items():
        if isinstance(d, Exception):
            raise CommandError(f"topic {name!r} does not exist", EXIT_FAILED)
        for p in d.partitions:
            current[(name, p.partition)] = list(p.replicas)
            leaders[(name, p.partition)] = p.leader
    for key in plan or ():
        if key not in current:
            raise CommandError(f"partition {key[0]}-{key[1]} does not exist", EXIT_FAILED)
    return current, leaders


def _tp_text(keys) -> str:
    return ",".join(f"{t}-{p}" for t, p in sorted(keys))


# -- generate ----------------------------------------------------------------------------------------

async def _generate(args) -> int:
    topics = _parsed(plan_mod.parse_topics_to_move, _read(args.topics_to_move_json_file))
    brokers = _parsed(plan_mod.parse_broker_list, args.broker_list)
    async with _admin(args) as admin:
        known = await _brokers(admin)
        unknown = sorted(set(brokers) - set(known))
        if unknown:
            raise CommandError(f"--broker-list names unknown broker(s) {unknown} "
                               f"(brokers: {sorted(known)})", EXIT_FAILED)
        current, _ = await _current(admin, topics)
    try:
        proposed = plan_mod.generate(current, topics, brokers)
    except plan_mod.PlanError as exc:
        raise CommandError(str(exc), EXIT_FAILED) from None
    if args.output == "json":
        print_json({"current": plan_mod.plan_json(current),
                    "proposed": plan_mod.plan_json(proposed)})
    else:
        print("Current partition replica assignment")
        print(plan_mod.dumps(current))
        print()
        print("Proposed partition reassignment configuration")
        print(plan_mod.dumps(proposed))
    return EXIT_OK


# -- execute -----------------------------------------------------------------------------------------

async def _execute(args) -> int:
    plan = _load_plan(args)
    async with _admin(args) as admin:
        _check_brokers(plan, await _brokers(admin))
        if not args.additional and await admin.list_partition_reassignments():
            raise CommandError(EXISTING_MOVE, EXIT_FAILED)
        current, _ = await _current(admin, {t for t, _ in plan}, plan)
        current = {k: v for k, v in current.items() if k in plan}
        table = args.output != "json"
        if table:
            print("Current partition replica assignment\n")
            print(plan_mod.dumps(current))
            print("\nSave this to use as the --reassignment-json-file option during rollback")
        if args.throttle >= 0:
            await _set_throttles(admin, current, plan, args.throttle)
            if table:
                print("Warning: You must run --verify periodically, until the reassignment "
                      "completes, to ensure the throttle is removed.")
                print(f"The inter-broker throttle limit was set to {args.throttle} B/s")
        # log_dirs first, as Kafka's tool: a replica to be added is placed there when created
        failed = await _alter_log_dirs(admin, args)
        results = await admin.alter_partition_reassignments(
            {TopicPartition(t, p): target for (t, p), target in plan.items()})
        failed.update({f"{tp.topic}-{tp.partition}": str(e) for tp, e in results.items() if e})
        started = [k for k in plan if not failed.get(f"{k[0]}-{k[1]}")]
        if table:
            if started:
                print(f"Successfully started partition reassignments for {_tp_text(started)}")
            for tp, msg in sorted(failed.items()):
                print(f"{PROG} execute: {tp}: {msg}", file=sys.stderr)
        else:
            print_json({"current": plan_mod.plan_json(current), "started": _tp_text(started),
                        "errors": failed, "throttle": args.throttle if args.throttle >= 0
                        else None})
        if started and args.watch:
            await _watch(admin, plan, args)
            if table:
                print("Moves finished: run verify to check them and remove the throttles.")
    return EXIT_FAILED if failed else EXIT_OK


async def _alter_log_dirs(admin: AdminClient, args) -> dict:
    """The plan's `log_dirs` paths (AlterReplicaLogDirs); {"topic-p": error} of refusals.
    REPLICA_NOT_AVAILABLE is no refusal here: the replica is new and goes there when made."""
    dirs = plan_mod.parse_log_dirs(_read(args.reassignment_json_file))
    if not dirs:
        return {}
    results = await admin.alter_replica_log_dirs(
        {(TopicPartition(t, p), b): d for (t, p, b), d in dirs.items()})
    return {f"{tp.topic}-{tp.partition}": f"log dir on broker {b}: {e}"
            for (tp, b), e in results.items()
            if e is not None and getattr(e, "code", None) != ErrorCode.REPLICA_NOT_AVAILABLE}


def _check_brokers(plan: dict, brokers) -> None:
    try:
        plan_mod.check_brokers(plan, brokers)
    except plan_mod.PlanError as exc:
        raise CommandError(str(exc), EXIT_FAILED) from None


async def _alter(admin: AdminClient, changes: dict) -> None:
    results = await admin.incremental_alter_configs(changes)
    errors = [f"{r.type.name.lower()} {r.name}: {e}" for r, e in results.items() if e]
    if errors:
        raise CommandError("; ".join(errors), EXIT_FAILED)


async def _set_throttles(admin: AdminClient, current: dict, plan: dict, rate: int) -> None:
    changes = {}
    for topic, (leader, follower) in plan_mod.throttle_configs(current, plan).items():
        ops = [AlterConfigOp(REPLICA_KEYS[0], leader)] if leader else []
        if follower:
            ops.append(AlterConfigOp(REPLICA_KEYS[1], follower))
        if ops:
            changes[ConfigResource(ConfigResourceType.TOPIC, topic)] = ops
    for broker in plan_mod.throttled_brokers(current, plan):
        changes[ConfigResource(ConfigResourceType.BROKER, str(broker))] = [
            AlterConfigOp(key, str(rate)) for key in RATE_KEYS]
    await _alter(admin, changes)


async def _clear_throttles(admin: AdminClient, topics, table: bool) -> None:
    """Kafka's clearAllThrottles: the rates on every broker, the replica lists on the topics."""
    brokers = await _brokers(admin)
    changes = {ConfigResource(ConfigResourceType.BROKER, str(b)): [
        AlterConfigOp(k, None, AlterConfigOpType.DELETE) for k in RATE_KEYS] for b in brokers}
    for topic in sorted(topics):
        changes[ConfigResource(ConfigResourceType.TOPIC, topic)] = [
            AlterConfigOp(k, None, AlterConfigOpType.DELETE) for k in REPLICA_KEYS]
    await _alter(admin, changes)
    if table:
        print(f"Clearing broker-level throttles on brokers {','.join(map(str, brokers))}")
        for topic in sorted(topics):
            print(f"Clearing topic-level throttles on topic {topic}")


# -- verify and cancel ------------------------------------------------------------------------------

async def _moving(admin: AdminClient, plan: dict) -> dict:
    """{(topic, p): PartitionReassignment} for the plan's partitions with a move in progress."""
    listed = await admin.list_partition_reassignments(
        [TopicPartition(t, p) for t, p in plan])
    return {(tp.topic, tp.partition): r for tp, r in listed.items()}


async def _verify(args) -> int:
    plan = _load_plan(args)
    table = args.output != "json"
    async with _admin(args) as admin:
        if args.watch:
            await _watch(admin, plan, args)
        moving = await _moving(admin, plan)
        current, _ = await _current(admin, {t for t, _ in plan}, plan)
        states = plan_mod.verdicts(plan, current, set(moving))
        done = all(s == plan_mod.COMPLETE for s, _ in states.values())
        cleared = done and not args.preserve_throttles
        if table:
            print("Status of partition reassignment:")
            for (t, p), (state, now) in sorted(states.items()):
                print(_verdict_line(t, p, state, now, plan[(t, p)]))
        if cleared:
            await _clear_throttles(admin, {t for t, _ in plan}, table)
        if not table:
            print_json({"complete": done, "throttles_removed": cleared, "partitions": [
                {"topic": t, "partition": p, "state": state, "replicas": now,
                 "target": plan[(t, p)]} for (t, p), (state, now) in sorted(states.items())]})
    mismatch = any(s == plan_mod.MISMATCH for s, _ in states.values())
    return EXIT_FAILED if mismatch else EXIT_OK


def _verdict_line(topic: str, p: int, state: str, now, target) -> str:
    if state == plan_mod.COMPLETE:
        return f"Reassignment of partition {topic}-{p} is completed."
    if state == plan_mod.IN_PROGRESS:
        return f"Reassignment of partition {topic}-{p} is still in progress."
    return (f"There is no active reassignment of partition {topic}-{p}, but replica set is "
            f"{','.join(map(str, now or []))} rather than {','.join(map(str, target))}.")


async def _cancel(args) -> int:
    plan = _load_plan(args)
    table = args.output != "json"
    async with _admin(args) as admin:
        moving = await _moving(admin, plan)
        results = await admin.alter_partition_reassignments(
            {TopicPartition(t, p): None for t, p in moving}) if moving else {}
        failed = {f"{tp.topic}-{tp.partition}": str(e) for tp, e in results.items() if e}
        cancelled = [(tp.topic, tp.partition) for tp, e in results.items() if not e]
        if table:
            if cancelled:
                print(f"Successfully cancelled partition reassignments for: "
                      f"{_tp_text(cancelled)}")
            elif not failed:
                print("None of the specified partition reassignments are active.")
            for tp, msg in sorted(failed.items()):
                print(f"{PROG} cancel: {tp}: {msg}", file=sys.stderr)
        if not args.preserve_throttles:
            await _clear_throttles(admin, {t for t, _ in plan}, table)
        if not table:
            print_json({"cancelled": _tp_text(cancelled), "errors": failed,
                        "throttles_removed": not args.preserve_throttles})
    return EXIT_FAILED if failed else EXIT_OK


# -- the progress view ------------------------------------------------------------------------------

async def _sample(admin: AdminClient, plan: dict):
    """(rows of plan_mod.Progress, whether any move of the plan is still in progress)."""
    moving = await _moving(admin, plan)
    if not moving:
        return [], False
    _, leaders = await _current(admin, {t for t, _ in moving})
    moves = {k: list(r.adding_replicas) for k, r in moving.items()}
    brokers = {leaders.get(k, -1) for k in moves} | {b for a in moves.values() for b in a}
    dirs = await admin.describe_replica_log_dirs(
        sorted(b for b in brokers if b >= 0), [TopicPartition(t, p) for t, p in moves])
    sizes = {b: {(tp.topic, tp.partition): size for tp, (size, _) in found.items()}
             for b, found in dirs.items() if not isinstance(found, Exception)}
    return plan_mod.progress(moves, leaders, sizes), True


async def _watch(admin: AdminClient, plan: dict, args) -> None:
    table = args.output != "json"
    recent: collections.deque = collections.deque(maxlen=5)   # (time, bytes copied) samples
    drawn = 0
    while True:
        rows, running = await _sample(admin, plan)
        now = time.monotonic()
        copied = sum(r.copied for r in rows)
        remaining = sum(r.remaining for r in rows)
        # the rate over the last few samples (a move finishing drops its bytes from the sum:
        # that interval gives no rate, so no ETA, rather than a negative one)
        eta = plan_mod.eta_s(remaining, copied - recent[0][1], now - recent[0][0]) \
            if recent else None
        recent.append((now, copied))
        if table:
            drawn = _draw(rows, copied, remaining, eta, running, drawn)
        else:
            print_json({"in_progress": running, "copied_bytes": copied,
                        "remaining_bytes": remaining, "eta_s": eta, "partitions": [
                            {"topic": r.topic, "partition": r.partition, "adding": r.adding,
                             "copied_bytes": r.copied, "total_bytes": r.total,
                             "remaining_bytes": r.remaining} for r in rows]})
            sys.stdout.flush()
        if not running:
            return
        await trio.sleep(args.interval)


def _draw(rows, copied: int, remaining: int, eta, running: bool, drawn: int) -> int:
    """Print one sample; on a terminal, over the previous one. Returns the lines printed."""
    hb = plan_mod.human_bytes
    lines = [f"{r.topic}-{r.partition}  -> {r.adding}  {plan_mod.bar(r.fraction)}  "
             f"{hb(r.copied)} copied, {hb(r.remaining)} left" for r in rows]
    total = copied + remaining
    eta_text = "--" if eta is None else f"{eta:.0f} s"
    lines.append(f"total  {plan_mod.bar(1.0 if not total else copied / total)}  "
                 f"{hb(copied)} copied, {hb(remaining)} left, ETA {eta_text}"
                 if running else "no move of this plan is in progress")
    if drawn and sys.stdout.isatty():
        sys.stdout.write(f"\x1b[{drawn}F\x1b[J")
    print("\n".join(lines), flush=True)
    return len(lines)
