"""`raftka topics create|list|describe|alter|delete` (like kafka-topics.sh)."""

from __future__ import annotations

import argparse

from clients.admin import AdminClient, ConfigResource, ConfigResourceType, NewTopic
from clients.cli.output import (EXIT_FAILED, EXIT_OK, CommandError, add_connection_args,
                                client_config, error_line, parse_kv, print_json, print_table, run)
from wire.errors import (KafkaError, TopicAlreadyExistsError, UnknownTopicOrPartitionError)

PROG = "raftka topics"


def register(sub) -> None:
    p = sub.add_parser("topics", help="create, list, describe, alter and delete topics",
                       description="Manage topics (like kafka-topics.sh).")
    ts = p.add_subparsers(dest="topics_command", metavar="create|list|describe|alter|delete")

    c = ts.add_parser("create", help="create a topic")
    c.add_argument("--topic", required=True)
    c.add_argument("--partitions", type=int, default=-1,
                   help="number of partitions (default: the broker's num.partitions)")
    c.add_argument("--replication-factor", type=int, default=-1,
                   help="replicas per partition (default: default.replication.factor)")
    c.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                   help="topic config override (repeatable, or comma-separated)")
    c.add_argument("--if-not-exists", action="store_true",
                   help="succeed if the topic already exists")
    c.add_argument("--validate-only", action="store_true",
                   help="check that the topic could be created, create nothing")
    add_connection_args(c)

    ls = ts.add_parser("list", help="list topic names")
    ls.add_argument("--include-internal", action="store_true",
                    help="also list internal topics such as __consumer_offsets")
    add_connection_args(ls)

    d = ts.add_parser("describe", help="partitions, leaders, replicas, ISR and config overrides")
    d.add_argument("--topic", action="append", default=[],
                   help="topic to describe (repeatable; default: all)")
    d.add_argument("--include-internal", action="store_true")
    add_connection_args(d)

    a = ts.add_parser("alter", help="add partitions to a topic")
    a.add_argument("--topic", required=True)
    a.add_argument("--partitions", type=int, required=True,
                   help="the new total number of partitions (can only grow)")
    add_connection_args(a)

    rm = ts.add_parser("delete", help="delete topics")
    rm.add_argument("--topic", action="append", required=True, help="topic (repeatable)")
    rm.add_argument("--if-exists", action="store_true", help="succeed if a topic is missing")
    add_connection_args(rm)
    p.set_defaults(func=main, _parser=p)


def main(args: argparse.Namespace) -> int:
    cmd = args.topics_command
    if not cmd:
        args._parser.print_help()
        return 2
    return run(f"{PROG} {cmd}", args, _run, args)


async def _run(args) -> int:
    cfg = client_config(args)
    async with AdminClient(config=cfg) as admin:
        return await globals()[f"_{args.topics_command}"](admin, args)


def _report(cmd: str, results: dict, ok_message: str, args, ignore=()) -> int:
    failed = {n: e for n, e in results.items() if e is not None and not isinstance(e, ignore)}
    if args.output == "json":
        print_json({n: {"ok": e is None or isinstance(e, ignore),
                        "error": None if e is None else type(e).__name__,
                        "message": None if e is None else str(e)} for n, e in results.items()})
    else:
        for n, e in results.items():
            if e is None:
                print(ok_message.format(n))
            elif isinstance(e, ignore):
                print(f"{n}: {e} (ignored)")
    for n, e in failed.items():
        error_line(f"{PROG} {cmd}", str(e))
    return EXIT_FAILED if failed else EXIT_OK


async def _create(admin: AdminClient, args) -> int:
    if args.partitions == 0 or args.partitions < -1:
        raise CommandError("--partitions must be at least 1", 2)
    if args.replication_factor == 0 or args.replication_factor < -1:
        raise CommandError("--replication-factor must be at least 1", 2)
    configs = parse_kv(args.config)
    res = await admin.create_topics([NewTopic(args.topic, args.partitions,
                                              args.replication_factor, configs)],
                                    validate_only=args.validate_only)
    verb = "would be created" if args.validate_only else "created"
    ignore = (TopicAlreadyExistsError,) if args.if_not_exists else ()
    return _report("create", res, f"Topic {{}} {verb}.", args, ignore)


async def _list(admin: AdminClient, args) -> int:
    names = await admin.list_topics(include_internal=args.include_internal)
    if args.output == "json":
        print_json(names)
    else:
        for n in names:
            print(n)
    return EXIT_OK


async def _describe(admin: AdminClient, args) -> int:
    desc = await admin.describe_topics(args.topic or None)
    if args.include_internal and not args.topic:
        internal = [n for n in await admin.list_topics(include_internal=True)
                    if n not in desc]
        desc.update(await admin.describe_topics(internal))
    found = {n: d for n, d in desc.items() if not isinstance(d, KafkaError)}
    overrides: dict[str, dict[str, str]] = {}
    if found:
        cfgs = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, n)
                                             for n in found])
        for res, entries in cfgs.items():
            if isinstance(entries, list):
                overrides[res.name] = {e.name: e.value for e in entries
                                       if e.source == "DYNAMIC_TOPIC_CONFIG"}
    if args.output == "json":
        print_json({n: {"topic_id": d.topic_id, "internal": d.is_internal,
                        "partition_count": len(d.partitions),
                        "replication_factor": len(d.partitions[0].replicas) if d.partitions else 0,
                        "configs": overrides.get(n, {}),
                        "partitions": [{"partition": p.partition, "leader": p.leader,
                                        "leader_epoch": p.leader_epoch,
                                        "replicas": list(p.replicas), "isr": list(p.isr),
                                        "offline": list(p.offline)} for p in d.partitions]}
                    for n, d in found.items()})
    else:
        for n, d in found.items():
            rf = len(d.partitions[0].replicas) if d.partitions else 0
            conf = ",".join(f"{k}={v}" for k, v in sorted(overrides.get(n, {}).items()))
            print(f"Topic: {n}\tTopicId: {d.topic_id}\tPartitionCount: {len(d.partitions)}\t"
                  f"ReplicationFactor: {rf}\tConfigs: {conf}")
            print_table(["", "Partition", "Leader", "LeaderEpoch", "Replicas", "Isr", "Offline"],
                        [["", p.partition, p.leader if p.leader >= 0 else "none", p.leader_epoch,
                          ",".join(map(str, p.replicas)), ",".join(map(str, p.isr)),
                          ",".join(map(str, p.offline))] for p in d.partitions])
    missing = {n: d for n, d in desc.items() if isinstance(d, KafkaError)}
    for n, e in missing.items():
        error_line(f"{PROG} describe", str(e))
    return EXIT_FAILED if missing else EXIT_OK


async def _alter(admin: AdminClient, args) -> int:
    if args.partitions < 1:
        raise CommandError("--partitions must be at least 1", 2)
    res = await admin.create_partitions({args.topic: args.partitions})
    return _report("alter", res, f"Topic {{}} now has {args.partitions} partitions.", args)


async def _delete(admin: AdminClient, args) -> int:
    res = await admin.delete_topics(list(dict.fromkeys(args.topic)))
    ignore = (UnknownTopicOrPartitionError,) if args.if_exists else ()
    return _report("delete", res, "Topic {} deleted.", args, ignore)
