"""`raftka log-dirs describe`: each broker's log directories and the replicas in them, like
Kafka's `kafka-log-dirs.sh --describe` (DescribeLogDirs).

    --broker-list 0,1   brokers to ask (default: every registered broker, fenced ones too,
                        so a stopped broker shows up as not answering instead of vanishing)
    --topic-list a,b    only these topics' replicas (default: all)
    --output json       Kafka's JSON, the same shape kafka-log-dirs.sh prints:
                        {"version":1,"brokers":[{"broker":0,"logDirs":[{"logDir":..,"error":null,
                        "partitions":[{"partition":"t-0","size":..,"offsetLag":..,
                        "isFuture":false}]}]}]}; a broker that did not answer carries an extra
                        "error" next to an empty "logDirs" (kafka-log-dirs.sh fails outright).
                        Unlike kafka-log-dirs.sh, no progress lines precede it: stdout is the
                        JSON alone.

A broker id that is not registered is refused before anything is asked (Kafka's message); a
broker that does not answer is reported and the others are still shown, with exit code 1.

`raftka log-dirs move TOPIC-PARTITION --broker B --to PATH [--wait S]`: move broker B's replica
into another of its log directories while it serves (AlterReplicaLogDirs, what
kafka-reassign-partitions.sh does for a `log_dirs` entry): a future log is copied, then swapped
in. `--wait S` waits up to S seconds until the replica is in PATH with no future left. Refusals
are the broker's: LOG_DIR_NOT_FOUND (PATH is not one of its log.dirs), KAFKA_STORAGE_ERROR,
REPLICA_NOT_AVAILABLE (exit 1).
"""

from __future__ import annotations

import argparse
import time

import trio

from clients.admin import AdminClient
from clients.admin.types import LogDirDescription
from clients.cluster import TopicPartition
from clients.cli.output import (EXIT_FAILED, EXIT_OK, EXIT_USAGE, CommandError,
                                add_connection_args, client_config, error_line, print_json,
                                print_table, run)
from common.topic_configs import validate_topic_name
from wire.errors import ErrorCode, KafkaError

PROG = "raftka log-dirs"

# what kafka-log-dirs.sh prints as a directory's "error": the Java exception's class name
_JAVA_ERRORS = {ErrorCode.KAFKA_STORAGE_ERROR: "org.apache.kafka.common.errors.KafkaStorageException",
                ErrorCode.LOG_DIR_NOT_FOUND: "org.apache.kafka.common.errors.LogDirNotFoundException"}


def register(sub) -> None:
    p = sub.add_parser("log-dirs", help="brokers' log directories: describe, move",
                       description="Log directories of the brokers and the replicas in them "
                       "(like kafka-log-dirs.sh).")
    ls = p.add_subparsers(dest="log_dirs_command", metavar="describe|move")
    d = ls.add_parser("describe", help="log directories, their replicas, sizes and offset lag")
    d.add_argument("--broker-list", metavar="0,1,2", default="",
                   help="brokers to ask (default: every registered broker)")
    d.add_argument("--topic-list", metavar="a,b", default="",
                   help="only these topics (default: all)")
    add_connection_args(d)
    m = ls.add_parser("move", help="move a replica to another log directory of its broker")
    m.add_argument("partition", metavar="TOPIC-PARTITION")
    m.add_argument("--broker", type=int, required=True, help="the broker holding the replica")
    m.add_argument("--to", required=True, metavar="PATH", help="one of that broker's log.dirs")
    m.add_argument("--wait", type=float, default=0, metavar="S",
                   help="wait up to S seconds for the move to finish")
    add_connection_args(m)
    p.set_defaults(func=main, _parser=p)


def main(args: argparse.Namespace) -> int:
    if not args.log_dirs_command:
        args._parser.print_help()
        return EXIT_USAGE
    prog = f"{PROG} {args.log_dirs_command}"
    if args.log_dirs_command == "move":
        topic, sep, number = args.partition.rpartition("-")
        if not sep or not number.isdigit() or validate_topic_name(topic):
            error_line(prog, f"{args.partition!r} is not TOPIC-PARTITION (e.g. orders-0)")
            return EXIT_USAGE
        return run(prog, args, _move, args, TopicPartition(topic, int(number)))
    try:
        brokers, topics = parse_broker_list(args.broker_list), parse_topic_list(args.topic_list)
    except CommandError as exc:
        error_line(prog, str(exc))
        return exc.code
    return run(prog, args, _describe, args, brokers, topics)


async def _move(args, tp: TopicPartition) -> int:
    async with AdminClient(config=client_config(args)) as admin:
        key = (tp, args.broker)
        err = (await admin.alter_replica_log_dirs({key: args.to}))[key]
        if err is not None:
            raise CommandError(f"{tp.topic}-{tp.partition} on broker {args.broker}: {err}")
        deadline = time.monotonic() + args.wait
        while True:
            dirs = (await admin.describe_log_dirs([args.broker], [tp]))[args.broker]
            where = [] if isinstance(dirs, KafkaError) else [
                (d.path, info.is_future) for d in dirs for t, info in d.replicas.items() if t == tp]
            done = where == [(_norm(args.to), False)]
            if done or time.monotonic() >= deadline:
                break
            await trio.sleep(0.2)
    if args.output == "json":
        print_json({"partition": f"{tp.topic}-{tp.partition}", "broker": args.broker,
                    "logDir": args.to, "done": done})
    elif done:
        print(f"{tp.topic}-{tp.partition} on broker {args.broker} is in {args.to}")
    else:
        print(f"{tp.topic}-{tp.partition} on broker {args.broker} is moving to {args.to}")
    return EXIT_OK if done or not args.wait else EXIT_FAILED


def _norm(path: str) -> str:
    import os
    return os.path.abspath(path)


def parse_broker_list(text: str) -> list[int]:
    """"0,1,2" → [0, 1, 2]; empty items are skipped (as Kafka's tool does)."""
    out = []
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        try:
            broker = int(item)
        except ValueError:
            broker = -1
        if broker < 0:
            raise CommandError(f"--broker-list expects broker ids like 0,1,2; {item!r} is not "
                               "one", EXIT_USAGE)
        if broker not in out:
            out.append(broker)
    return out


def parse_topic_list(text: str) -> set[str]:
    topics = {x.strip() for x in text.split(",") if x.strip()}
    for t in sorted(topics):
        why = validate_topic_name(t)
        if why:
            raise CommandError(f"--topic-list: {t!r} cannot be a topic: {why}", EXIT_USAGE)
    return topics


async def _describe(args, wanted: list[int], topics: set[str]) -> int:
    async with AdminClient(config=client_config(args)) as admin:
        cluster = await admin.describe_cluster(include_fenced=True)
        active = {b["id"] for b in cluster["brokers"]}
        fenced = {b["id"] for b in cluster.get("fenced_brokers") or ()}
        registered = active | fenced
        unknown = [b for b in wanted if b not in registered]
        if unknown:
            raise CommandError(
                "The given brokers do not exist from --broker-list: "
                f"{','.join(map(str, unknown))}. Current existent brokers: "
                f"{','.join(map(str, sorted(registered)))}")
        answers = await admin.describe_log_dirs(wanted or sorted(registered))
    doc = to_kafka_json(answers, topics, fenced - active)
    if args.output == "json":
        print_json(doc)
    else:
        _print_tables(answers, topics)
    failed = [b for b in doc["brokers"] if b.get("error")]
    for b in failed:
        error_line(f"{PROG} describe", b["error"])
    return EXIT_FAILED if failed else EXIT_OK


def _error_name(err: KafkaError | None) -> str | None:
    if err is None:
        return None
    return _JAVA_ERRORS.get(err.code) or ErrorCode(err.code).name


def _replicas(d: LogDirDescription, topics: set[str]) -> list:
    return sorted(((tp, info) for tp, info in d.replicas.items()
                   if not topics or tp.topic in topics),
                  key=lambda x: (x[0].topic, x[0].partition))


def to_kafka_json(answers: dict, topics: set[str], fenced: set[int] = frozenset()) -> dict:
    """DescribeLogDirs answers {broker: [LogDirDescription] | KafkaError} in kafka-log-dirs.sh's
    JSON; a broker that did not answer gets an "error" string and no log dirs."""
    brokers = []
    for broker, dirs in sorted(answers.items()):
        if isinstance(dirs, KafkaError):
            state = " (fenced: stopped or not caught up)" if broker in fenced else ""
            brokers.append({"broker": broker, "error": f"broker {broker}{state} did not "
                            f"answer: {dirs}", "logDirs": []})
            continue
        brokers.append({"broker": broker, "logDirs": [{
            "logDir": d.path, "error": _error_name(d.error),
            "partitions": [{"partition": f"{tp.topic}-{tp.partition}", "size": info.size,
                            "offsetLag": info.offset_lag, "isFuture": info.is_future}
                           for tp, info in _replicas(d, topics)]} for d in dirs]})
    return {"version": 1, "brokers": brokers}


def _human(n: int) -> str:
    if n < 0:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _print_tables(answers: dict, topics: set[str]) -> None:
    dirs_rows, replica_rows = [], []
    for broker, dirs in sorted(answers.items()):
        if isinstance(dirs, KafkaError):
            dirs_rows.append([broker, "-", "no answer", "-", "-", "-", "-"])
            continue
        for d in dirs:
            reps = _replicas(d, topics)
            dirs_rows.append([broker, d.path, _error_name(d.error) and "failed" or "ok",
                              len(reps), _human(sum(i.size for _, i in reps)),
                              _human(d.usable_bytes), _human(d.total_bytes)])
            replica_rows += [[broker, d.path, f"{tp.topic}-{tp.partition}", _human(i.size),
                              i.offset_lag, "yes" if i.is_future else "no"] for tp, i in reps]
    print_table(["BROKER", "LOG DIR", "STATE", "REPLICAS", "SIZE", "USABLE", "TOTAL"], dirs_rows)
    print()
    print_table(["BROKER", "LOG DIR", "PARTITION", "SIZE", "OFFSET LAG", "FUTURE"], replica_rows)
