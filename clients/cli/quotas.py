"""`raftka quotas set|list|remove`: client quotas (KIP-546), what Kafka does with
`kafka-configs.sh --entity-type users|clients --entity-name X --alter --add-config ...`.

Entities: `--user NAME` or `--user-default`, `--client-id NAME` or `--client-id-default`, alone
or together (user + client id). Keys: producer_byte_rate, consumer_byte_rate (bytes per second
per broker), request_percentage (percent of one request thread). The brokers validate; a refused
entity prints one line and exits 1.

  raftka quotas set --client-id app producer_byte_rate=1048576 consumer_byte_rate=2097152
  raftka quotas list [--user alice] [--strict] [--output json]
  raftka quotas remove --client-id app producer_byte_rate      (or --all)
"""

from __future__ import annotations

import argparse

from clients.admin import AdminClient
from clients.cli.output import (EXIT_FAILED, EXIT_OK, EXIT_USAGE, CommandError,
                                add_connection_args, client_config, error_line, parse_kv,
                                print_json, print_table, run)

PROG = "raftka quotas"
KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage")
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2


def register(sub) -> None:
    p = sub.add_parser("quotas", help="set, list and remove client quotas",
                       description="Client quotas per user and/or client id (Kafka's "
                       "kafka-configs --entity-type users|clients). Keys: " + ", ".join(KEYS))
    qs = p.add_subparsers(dest="quotas_command", metavar="set|list|remove")
    for name, helptext in (("set", "set quota values on an entity"),
                           ("list", "show configured quotas (filter by entity)"),
                           ("remove", "remove quota values from an entity")):
        a = qs.add_parser(name, help=helptext)
        user = a.add_mutually_exclusive_group()
        user.add_argument("--user", metavar="NAME", help="a user principal's name (User:NAME)")
        user.add_argument("--user-default", action="store_true",
                          help="the default for users without their own quota")
        client = a.add_mutually_exclusive_group()
        client.add_argument("--client-id", metavar="NAME", help="a client id")
        client.add_argument("--client-id-default", action="store_true",
                            help="the default for client ids without their own quota")
        if name == "set":
            a.add_argument("values", nargs="+", metavar="KEY=VALUE",
                           help="e.g. producer_byte_rate=1048576 (comma lists work too)")
        elif name == "remove":
            a.add_argument("keys", nargs="*", metavar="KEY", help="keys to remove")
            a.add_argument("--all", action="store_true", help="remove every key of the entity")
        else:
            a.add_argument("--any-user", action="store_true",
                           help="only entities naming some user (not the default)")
            a.add_argument("--any-client-id", action="store_true",
                           help="only entities naming some client id (not the default)")
            a.add_argument("--strict", action="store_true",
                           help="only entities with exactly the given entity types")
        if name != "list":
            a.add_argument("--validate-only", action="store_true",
                           help="let the cluster check the change without applying it")
        add_connection_args(a)
    p.set_defaults(func=main, _parser=p)


def main(args: argparse.Namespace) -> int:
    if not args.quotas_command:
        args._parser.print_help()
        return EXIT_USAGE
    return run(f"{PROG} {args.quotas_command}", args, _run, args)


def _entity(args) -> dict:
    ent = {}
    if args.user is not None or args.user_default:
        ent["user"] = None if args.user_default else args.user
    if args.client_id is not None or args.client_id_default:
        ent["client-id"] = None if args.client_id_default else args.client_id
    if not ent:
        raise CommandError("name an entity: --user NAME / --user-default and/or "
                           "--client-id NAME / --client-id-default", EXIT_USAGE)
    for etype, name in ent.items():
        if name == "":
            raise CommandError(f"empty {etype} name (use --{etype}-default "
                               "for the default)", EXIT_USAGE)
    return ent


def _number(key: str, text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise CommandError(f"{key}={text!r}: not a number", EXIT_USAGE) from None


def _components(args) -> list:
    out = []
    for etype, name, default, anyone in (
            ("user", args.user, args.user_default, args.any_user),
            ("client-id", args.client_id, args.client_id_default, args.any_client_id)):
        if name is not None:
            out.append((etype, MATCH_EXACT, name))
        elif default:
            out.append((etype, MATCH_DEFAULT, None))
        elif anyone:
            out.append((etype, MATCH_SPECIFIED, None))
    return out


def _show(name) -> str:
    return "<default>" if name is None else name


def _entity_text(ent: dict) -> str:
    users_first = sorted(ent.items(), key=lambda kv: kv[0] != "user")
    return ", ".join(f"{t}={_show(n)}" for t, n in users_first)


def _value_text(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else repr(v)


async def _run(args) -> int:
    cmd = args.quotas_command
    if cmd in ("set", "remove"):
        ent = _entity(args)
        if cmd == "set":
            raw = parse_kv(args.values, "set")
            ops = {k: _number(k, v) for k, v in raw.items()}
        else:
            if not args.keys and not args.all:
                raise CommandError("name the keys to remove, or --all", EXIT_USAGE)
            ops = {k: None for k in (KEYS if args.all else args.keys)}
    async with AdminClient(config=client_config(args)) as admin:
        if cmd == "list":
            found = await admin.describe_client_quotas(_components(args), strict=args.strict)
            if args.output == "json":
                print_json([{"entity": ent, "values": values} for ent, values in found])
            else:
                print_table(["Entity", "Quotas"], [
                    [_entity_text(ent), ", ".join(f"{k}={_value_text(v)}"
                                                   for k, v in sorted(values.items()))]
                    for ent, values in found])
            return EXIT_OK
        if cmd == "remove" and args.all:
            # only keys the entity has: removing an absent key is harmless but noisy
            current = await admin.describe_client_quotas(
                [(t, MATCH_DEFAULT if n is None else MATCH_EXACT, n) for t, n in ent.items()],
                strict=True)
            ops = {k: None for _, values in current for k in values}
            if not ops:
                if args.output == "json":
                    print_json({"entity": ent, "ok": True, "removed": []})
                else:
                    print(f"No quotas on {_entity_text(ent)}.")
                return EXIT_OK
        [err] = await admin.alter_client_quotas([(ent, ops)], validate_only=args.validate_only)
        if args.output == "json":
            print_json({"entity": ent, "ok": err is None,
                        "message": None if err is None else str(err),
                        "validate_only": args.validate_only,
                        ("values" if cmd == "set" else "removed"):
                            ops if cmd == "set" else sorted(ops)})
        elif err is None:
            verb = "Would set" if args.validate_only else "Set"
            if cmd == "remove":
                verb = "Would remove" if args.validate_only else "Removed"
                print(f"{verb} {', '.join(sorted(ops))} on {_entity_text(ent)}.")
            else:
                print(f"{verb} {', '.join(f'{k}={_value_text(v)}' for k, v in ops.items())} "
                      f"on {_entity_text(ent)}.")
        if err is not None:
            error_line(f"{PROG} {cmd}", f"{_entity_text(ent)}: {err}")
            return EXIT_FAILED
        return EXIT_OK
