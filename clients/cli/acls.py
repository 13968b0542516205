"""`raftka acls add|list|remove` (like kafka-acls.sh)."""

from __future__ import annotations

import argparse

from clients.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType,
                           AdminClient, PatternType, ResourceType)
from clients.cli.output import (EXIT_FAILED, EXIT_OK, EXIT_USAGE, CommandError,
                                add_connection_args, client_config, error_line, print_json,
                                print_table, run)
from wire.errors import ErrorCode, KafkaError

PROG = "raftka acls"
OPERATIONS = [o.name.lower().replace("_", "-") for o in AclOperation
              if o not in (AclOperation.UNKNOWN, AclOperation.ANY)]


def register(sub) -> None:
    p = sub.add_parser("acls", help="add, list and remove ACLs",
                       description="Manage ACLs (like kafka-acls.sh). Principals are "
                       "'User:name'; hosts default to '*'.")
    acs = p.add_subparsers(dest="acls_command", metavar="add|list|remove")
    for name, helptext in (("add", "create ACLs"), ("list", "show ACLs matching the filter"),
                           ("remove", "delete ACLs matching the filter")):
        a = acs.add_parser(name, help=helptext)
        res = a.add_mutually_exclusive_group(required=(name == "add"))
        res.add_argument("--topic", help="a topic (or '*')")
        res.add_argument("--group", help="a consumer group (or '*')")
        res.add_argument("--cluster", action="store_true", help="the cluster resource")
        res.add_argument("--transactional-id", help="a transactional id (or '*')")
        a.add_argument("--resource-pattern-type", default="literal" if name == "add" else "any",
                       choices=["literal", "prefixed"] + ([] if name == "add"
                                                          else ["any", "match"]))
        a.add_argument("--allow-principal", action="append", default=[], metavar="User:NAME")
        a.add_argument("--deny-principal", action="append", default=[], metavar="User:NAME")
        if name == "list":
            a.add_argument("--principal", help="only ACLs of this principal")
        a.add_argument("--allow-host", action="append", default=[], metavar="HOST")
        a.add_argument("--deny-host", action="append", default=[], metavar="HOST")
        a.add_argument("--operation", action="append", default=[], choices=OPERATIONS,
                       help="repeatable; add defaults to all")
        add_connection_args(a)
    p.set_defaults(func=main, _parser=p)


def main(args: argparse.Namespace) -> int:
    if not args.acls_command:
        args._parser.print_help()
        return EXIT_USAGE
    return run(f"{PROG} {args.acls_command}", args, _run, args)


def _resource(args) -> tuple[ResourceType, str | None]:
    if args.topic is not None:
        return ResourceType.TOPIC, args.topic
    if args.group is not None:
        return ResourceType.GROUP, args.group
    if args.cluster:
        return ResourceType.CLUSTER, "kafka-cluster"
    if args.transactional_id is not None:
        return ResourceType.TRANSACTIONAL_ID, args.transactional_id
    return ResourceType.ANY, None


def _op(name: str) -> AclOperation:
    return AclOperation[name.upper().replace("-", "_")]


def _bindings_for_add(args) -> list[AclBinding]:
    rtype, rname = _resource(args)
    pattern = PatternType[args.resource_pattern_type.upper()]
    if not args.allow_principal and not args.deny_principal:
        raise CommandError("give --allow-principal and/or --deny-principal", EXIT_USAGE)
    for pr in args.allow_principal + args.deny_principal:
        if ":" not in pr:
            raise CommandError(f"principal must look like User:name, got {pr!r}", EXIT_USAGE)
    ops = [_op(o) for o in args.operation] or [AclOperation.ALL]
    out = []
    for perm, principals, hosts in ((AclPermissionType.ALLOW, args.allow_principal,
                                     args.allow_host), (AclPermissionType.DENY,
                                                        args.deny_principal, args.deny_host)):
        for pr in principals:
            for host in hosts or ["*"]:
                for op in ops:
                    out.append(AclBinding(rtype, rname, pattern, pr, host, op, perm))
    return out


def _filters(args) -> list[AclBindingFilter]:
    rtype, rname = _resource(args)
    pattern = PatternType[args.resource_pattern_type.upper()]
    ops = [_op(o) for o in args.operation] or [AclOperation.ANY]
    principals = [(AclPermissionType.ALLOW, p) for p in args.allow_principal] + \
        [(AclPermissionType.DENY, p) for p in args.deny_principal]
    if getattr(args, "principal", None):
        principals.append((AclPermissionType.ANY, args.principal))
    principals = principals or [(AclPermissionType.ANY, None)]
    hosts = args.allow_host + args.deny_host or [None]
    return [AclBindingFilter(rtype, rname, pattern, pr, host, op, perm)
            for perm, pr in principals for host in hosts for op in ops]


def _rows(bindings: list[AclBinding]) -> list[list]:
    return [[b.resource_type.name, b.resource_name, b.pattern_type.name, b.principal, b.host,
             b.operation.name, b.permission_type.name] for b in bindings]


HEADERS = ["ResourceType", "Resource", "Pattern", "Principal", "Host", "Operation", "Permission"]


async def _run(args) -> int:
    async with AdminClient(config=client_config(args)) as admin:
        cmd = args.acls_command
        if cmd == "add":
            bindings = _bindings_for_add(args)
            errors = await admin.create_acls(bindings)
            failed = [(b, e) for b, e in zip(bindings, errors) if e is not None]
            if args.output == "json":
                print_json([dict(b.as_dict(), ok=e is None, message=None if e is None else str(e))
                            for b, e in zip(bindings, errors)])
            else:
                ok = [b for b, e in zip(bindings, errors) if e is None]
                if ok:
                    print(f"Added {len(ok)} ACL(s):")
                    print_table(HEADERS, _rows(ok))
            for b, e in failed:
                error_line(f"{PROG} add", f"{b.principal} {b.operation.name} on "
                           f"{b.resource_type.name.lower()} {b.resource_name}: {e}")
            return EXIT_FAILED if failed else EXIT_OK
        if cmd == "list":
            if not admin.cluster.metadata.brokers:
                await admin.cluster.refresh_metadata(force=True)
            found: list[AclBinding] = []
            try:
                for f in _filters(args):
                    for b in await admin.describe_acls(f):
                        if b not in found:
                            found.append(b)
            except KafkaError as exc:
                if exc.code == ErrorCode.UNSUPPORTED_VERSION:
                    raise CommandError("the brokers do not serve DescribeAcls yet; cannot list "
                                       "ACLs", EXIT_FAILED) from None
                raise
            if args.output == "json":
                print_json([b.as_dict() for b in found])
            else:
                print_table(HEADERS, _rows(found))
            return EXIT_OK
        # remove
        if _resource(args)[0] == ResourceType.ANY and not (args.allow_principal or
                                                           args.deny_principal):
            raise CommandError("remove needs a resource (--topic/--group/--cluster/"
                               "--transactional-id) or a principal", EXIT_USAGE)
        results = await admin.delete_acls(_filters(args))
        removed = [b for r in results if isinstance(r, list) for b in r]
        errors = [r for r in results if isinstance(r, KafkaError)]
        if args.output == "json":
            print_json({"removed": [b.as_dict() for b in removed],
                        "errors": [str(e) for e in errors]})
        else:
            print(f"Removed {len(removed)} ACL(s)" + (":" if removed else "."))
            if removed:
                print_table(HEADERS, _rows(removed))
        for e in errors:
            error_line(f"{PROG} remove", str(e))
        return EXIT_FAILED if errors else EXIT_OK
