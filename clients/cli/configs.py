"""`raftka configs describe|alter` (like kafka-configs.sh) for topics and brokers."""

from __future__ import annotations

import argparse

from clients.admin import (AdminClient, AlterConfigOp, AlterConfigOpType, ConfigResource,
                           ConfigResourceType)
from clients.cli.output import (EXIT_FAILED, EXIT_OK, EXIT_USAGE, CommandError,
                                add_connection_args, client_config, error_line, parse_kv,
                                print_json, print_table, run, _split_commas)
from wire.errors import KafkaError

PROG = "raftka configs"
ENTITY_TYPES = {"topics": ConfigResourceType.TOPIC, "brokers": ConfigResourceType.BROKER,
                "topic": ConfigResourceType.TOPIC, "broker": ConfigResourceType.BROKER}


def register(sub) -> None:
    p = sub.add_parser("configs", help="describe and alter topic and broker configs",
                       description="Show or change configs (like kafka-configs.sh). alter is "
                       "incremental: only the keys named change.")
    cs = p.add_subparsers(dest="configs_command", metavar="describe|alter")
    d = cs.add_parser("describe", help="show a topic's or broker's configs")
    d.add_argument("--entity-type", choices=["topics", "brokers"], required=True)
    _entity_args(d)
    d.add_argument("--all", action="store_true",
                   help="every config with its source (default: only overrides)")
    add_connection_args(d)
    a = cs.add_parser("alter", help="set or delete configs of a topic or broker")
    a.add_argument("--entity-type", choices=["topics", "brokers"], required=True)
    _entity_args(a)
    a.add_argument("--add-config", action="append", default=[], metavar="K=V[,K=V]",
                   help="set configs (repeatable; [a,b] for list values)")
    a.add_argument("--delete-config", action="append", default=[], metavar="K[,K]",
                   help="remove overrides, back to the default (repeatable)")
    a.add_argument("--validate-only", action="store_true")
    add_connection_args(a)
    p.set_defaults(func=main, _parser=p)


def _entity_args(p) -> None:
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--entity-name", help="topic name or broker id")
    who.add_argument("--entity-default", action="store_true",
                     help="brokers: the cluster-wide default (as kafka-configs.sh)")


def main(args: argparse.Namespace) -> int:
    if not args.configs_command:
        args._parser.print_help()
        return EXIT_USAGE
    return run(f"{PROG} {args.configs_command}", args, _run, args)


def _resource(args) -> ConfigResource:
    rtype = ENTITY_TYPES[args.entity_type]
    if args.entity_default:
        if rtype != ConfigResourceType.BROKER:
            raise CommandError("--entity-default is for --entity-type brokers", EXIT_USAGE)
        return ConfigResource(rtype, "")
    if rtype == ConfigResourceType.BROKER and not args.entity_name.isdigit():
        raise CommandError(f"--entity-name for brokers is a broker id, got {args.entity_name!r}",
                           EXIT_USAGE)
    return ConfigResource(rtype, args.entity_name)


async def _run(args) -> int:
    async with AdminClient(config=client_config(args)) as admin:
        res = _resource(args)
        if args.configs_command == "describe":
            return await _describe(admin, res, args)
        return await _alter(admin, res, args)


def _entity_words(res: ConfigResource) -> str:
    """How kafka-configs.sh names the entity: `topic t`, `broker 1`, or the brokers' default
    (resource name "") as `brokers in the cluster (default)`."""
    if res.type == ConfigResourceType.TOPIC:
        return f"topic {res.name}"
    return f"broker {res.name}" if res.name else "brokers in the cluster (default)"


# like kafka-configs.sh: without --all, only what was set dynamically for this entity
OVERRIDE_SOURCES = {ConfigResourceType.TOPIC: {"DYNAMIC_TOPIC_CONFIG"},
                    ConfigResourceType.BROKER: {"DYNAMIC_BROKER_CONFIG",
                                                "DYNAMIC_DEFAULT_BROKER_CONFIG"}}


async def _describe(admin: AdminClient, res: ConfigResource, args) -> int:
    if res.type == ConfigResourceType.TOPIC:
        exists = (await admin.describe_topics([res.name]))[res.name]
        if isinstance(exists, KafkaError):
            error_line(f"{PROG} describe", str(exists))
            return EXIT_FAILED
    got = (await admin.describe_configs([res]))[res]
    if isinstance(got, KafkaError):
        error_line(f"{PROG} describe", str(got))
        return EXIT_FAILED
    entries = got if args.all else [e for e in got if e.source in OVERRIDE_SOURCES[res.type]]
    entries = sorted(entries, key=lambda e: e.name)
    if args.output == "json":
        print_json({"entity_type": args.entity_type, "entity_name": res.name, "configs": [
            {"name": e.name, "value": None if e.sensitive else e.value, "source": e.source,
             "read_only": e.read_only, "sensitive": e.sensitive} for e in entries]})
        return EXIT_OK
    print(f"Configs for {_entity_words(res)}" + ("" if args.all else " (overrides only; --all "
                                                                    "for every config)") + ":")
    print_table(["Name", "Value", "Source"],
                [[e.name, "<sensitive>" if e.sensitive else e.value, e.source] for e in entries])
    return EXIT_OK


async def _alter(admin: AdminClient, res: ConfigResource, args) -> int:
    ops = [AlterConfigOp(k, v, AlterConfigOpType.SET)
           for k, v in parse_kv(args.add_config, "--add-config").items()]
    ops += [AlterConfigOp(k, None, AlterConfigOpType.DELETE)
            for item in args.delete_config for k in _split_commas(item)]
    if not ops:
        raise CommandError("nothing to change: give --add-config and/or --delete-config",
                           EXIT_USAGE)
    if res.type == ConfigResourceType.TOPIC:
        exists = (await admin.describe_topics([res.name]))[res.name]
        if isinstance(exists, KafkaError):
            error_line(f"{PROG} alter", str(exists))
            return EXIT_FAILED
    err = (await admin.incremental_alter_configs({res: ops},
                                                  validate_only=args.validate_only))[res]
    if args.output == "json":
        print_json({"entity_type": args.entity_type, "entity_name": res.name,
                    "ok": err is None, "message": None if err is None else str(err),
                    "set": {o.name: o.value for o in ops if o.op == AlterConfigOpType.SET},
                    "deleted": [o.name for o in ops if o.op == AlterConfigOpType.DELETE]})
    if err is not None:
        error_line(f"{PROG} alter", str(err))
        return EXIT_FAILED
    if args.output != "json":
        verb = "Validated" if args.validate_only else "Completed"
        print(f"{verb} updating config for {_entity_words(res)}.")
    return EXIT_OK
