"""`raftka groups list|describe|reset-offsets|delete` (like kafka-consumer-groups).

    raftka groups list
    raftka groups describe --group billing            # offsets, log end offsets, lag, owners
    raftka groups reset-offsets --group billing --topic orders --to-earliest --execute
    raftka groups delete --group billing

reset-offsets prints the plan and changes nothing unless --execute (--dry-run is the default,
as in Kafka); like Kafka it refuses while the group has active members. Exit codes: 0 done,
1 error (unreachable cluster, unknown group or topic, group not empty...), 2 usage.
"""

from __future__ import annotations

import argparse
import json

from clients.cli.consume import (EXIT_FAILURE, EXIT_OK, UsageError, add_common, client_props,
                                 run_command)


def register(sub) -> None:
    g = sub.add_parser("groups", help="consumer groups: list | describe | reset-offsets | delete",
                       description="Inspect and manage consumer groups.")
    gs = g.add_subparsers(dest="groups_command", metavar="list|describe|reset-offsets|delete")
    lst = gs.add_parser("list", help="every group with its state and type")
    add_common(lst)
    d = gs.add_parser("describe", help="committed offset, log end offset and lag per partition")
    add_common(d)
    d.add_argument("--group", action="append", required=True, help="group id (repeatable)")
    r = gs.add_parser("reset-offsets", help="move a group's committed offsets (group inactive)")
    add_common(r)
    r.add_argument("--group", required=True)
    scope = r.add_mutually_exclusive_group(required=True)
    scope.add_argument("--topic", action="append", help="topic to reset (repeatable)")
    scope.add_argument("--all-topics", action="store_true",
                       help="every topic the group has committed offsets for")
    to = r.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument("--to-offset", type=int, metavar="N")
    to.add_argument("--shift-by", type=int, metavar="N", help="from the committed offset (+/-)")
    to.add_argument("--to-timestamp", type=int, metavar="MS",
                    help="first offset at or after this time (ms since the epoch)")
    mode = r.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="show the plan only (default)")
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    dl = gs.add_parser("delete", help="delete groups (offsets included); they must be empty")
    add_common(dl)
    dl.add_argument("--group", action="append", required=True, help="group id (repeatable)")
    g.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    if not getattr(args, "groups_command", None):
        raise SystemExit("raftka groups: choose list, describe, reset-offsets or delete "
                         "(see --help)")
    fn = {"list": _list, "describe": _describe, "reset-offsets": _reset,
          "delete": _delete}[args.groups_command]
    return run_command(f"raftka groups {args.groups_command}", _with_admin, fn, args)


async def _with_admin(fn, args) -> int:
    from clients.admin import AdminClient
    props = client_props(args)
    props.setdefault("default.api.timeout.ms", "15000")
    async with AdminClient(props["bootstrap.servers"], props) as admin:
        return await fn(admin, args)


def print_table(headers: list[str], rows: list[list]) -> None:
    cells = [[("-" if v is None else str(v)) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    for row in [headers] + cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip())


# -- list ------------------------------------------------------------------------------------------

async def _list(admin, args) -> int:
    groups = await admin.list_groups()
    if args.output == "json":
        print(json.dumps([{"group": g.group_id, "state": g.state, "type": g.type,
                           "protocol_type": g.protocol_type} for g in groups]))
    else:
        print_table(["GROUP", "STATE", "TYPE", "PROTOCOL-TYPE"],
                    [[g.group_id, g.state, g.type, g.protocol_type] for g in groups])
    return EXIT_OK


# -- describe --------------------------------------------------------------------------------------

async def describe_group(admin, group: str) -> dict:
    """State, members and per-partition committed offset / log end offset / lag / owner."""
    from clients.admin import LATEST
    from clients.cluster import TopicPartition
    from wire.errors import ErrorCode, KafkaError
    desc = (await admin.describe_groups([group]))[group]
    if isinstance(desc, KafkaError):
        raise desc
    committed = await admin.list_group_offsets(group)
    if desc.state == "Dead" or (desc.state == "Empty" and not desc.members and not committed):
        # Kafka's tool says the same for a group the coordinator has never heard of
        raise KafkaError(f"consumer group {group!r} does not exist", ErrorCode.GROUP_ID_NOT_FOUND)
    owner: dict = {}
    for m in desc.members:
        for tp in m.assignment:
            owner[TopicPartition(*tp)] = m
    tps = sorted(set(committed) | set(owner))
    ends = await admin.list_offsets({tp: LATEST for tp in tps}) if tps else {}
    rows = []
    for tp in tps:
        c = committed.get(tp)
        end = ends.get(tp, (None,))[0]
        m = owner.get(tp)
        rows.append({"topic": tp.topic, "partition": tp.partition,
                     "current_offset": c.offset if c else None, "log_end_offset": end,
                     "lag": (end - c.offset) if c is not None and end is not None else None,
                     "consumer_id": m.member_id if m else None, "host": m.host if m else None,
                     "client_id": m.client_id if m else None})
    return {"group": group, "state": desc.state, "protocol": desc.protocol,
            "coordinator": desc.coordinator, "members": len(desc.members), "partitions": rows}


async def _describe(admin, args) -> int:
    results = [await describe_group(admin, g) for g in args.group]
    if args.output == "json":
        print(json.dumps(results if len(results) > 1 else results[0]))
        return EXIT_OK
    for i, r in enumerate(results):
        if i:
            print()
        print(f"Consumer group '{r['group']}': state {r['state']}, {r['members']} member(s), "
              f"assignor {r['protocol'] or '-'}, coordinator {r['coordinator']}")
        print_table(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                     "CONSUMER-ID", "HOST", "CLIENT-ID"],
                    [[r["group"], p["topic"], p["partition"], p["current_offset"],
                      p["log_end_offset"], p["lag"], p["consumer_id"], p["host"], p["client_id"]]
                     for p in r["partitions"]])
    return EXIT_OK


# -- reset-offsets ---------------------------------------------------------------------------------

async def _reset(admin, args) -> int:
    from wire.errors import ErrorCode, KafkaError
    desc = (await admin.describe_groups([args.group]))[args.group]
    if isinstance(desc, KafkaError):
        raise desc
    if desc.state not in ("Empty", "Dead") or desc.members:
        raise KafkaError(f"offsets can only be reset while group {args.group!r} is inactive, "
                         f"but it is {desc.state} with {len(desc.members)} member(s)",
                         ErrorCode.NON_EMPTY_GROUP)
    if args.all_topics:
        topics = sorted({tp.topic for tp in await admin.list_group_offsets(args.group)})
        if not topics:
            raise UsageError(f"group {args.group!r} has no committed offsets; name --topic")
    else:
        topics = sorted(set(args.topic))
        existing = set(await admin.list_topics(include_internal=True))
        missing = [t for t in topics if t not in existing]
        if missing:
            raise KafkaError(f"unknown topic {missing[0]!r}", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    if args.to_earliest:
        to, value = "earliest", None
    elif args.to_latest:
        to, value = "latest", None
    elif args.to_offset is not None:
        if args.to_offset < 0:
            raise UsageError("--to-offset must not be negative")
        to, value = "offset", args.to_offset
    elif args.shift_by is not None:
        to, value = "shift-by", args.shift_by
    else:
        to, value = "timestamp", args.to_timestamp
    plan = await admin.reset_group_offsets(args.group, topics, to, value,
                                           dry_run=not args.execute)
    rows = sorted(plan.items())
    if args.output == "json":
        print(json.dumps({"group": args.group, "executed": bool(args.execute),
                          "offsets": [{"topic": tp.topic, "partition": tp.partition,
                                       "new_offset": off} for tp, off in rows]}))
    else:
        print_table(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
                    [[args.group, tp.topic, tp.partition, off] for tp, off in rows])
        if not args.execute:
            print("(dry run: nothing changed; add --execute to commit these offsets)")
    return EXIT_OK


# -- delete ----------------------------------------------------------------------------------------

async def _delete(admin, args) -> int:
    results = await admin.delete_groups(list(dict.fromkeys(args.group)))
    failed = {g: e for g, e in results.items() if e is not None}
    if args.output == "json":
        print(json.dumps({g: (None if e is None else str(e)) for g, e in results.items()}))
    else:
        ok = [g for g, e in results.items() if e is None]
        if ok:
            print("Deletion of requested consumer groups (" + ", ".join(f"'{g}'" for g in ok)
                  + ") was successful.")
    for g, e in failed.items():
        import sys
        print(f"raftka groups delete: error: group {g!r}: {_short(e)}", file=sys.stderr)
    return EXIT_FAILURE if failed else EXIT_OK


def _short(exc) -> str:
    text = str(exc)
    prefix = "group "
    if text.startswith(prefix) and ": " in text:
        text = text.split(": ", 1)[1]
    return text
