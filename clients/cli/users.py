"""`raftka users scram add|list|remove`: SCRAM credentials through AlterUserScramCredentials /
DescribeUserScramCredentials (KIP-554), like `kafka-configs --alter --add-config SCRAM-SHA-512=`.

The password never leaves this process: it is salted and hashed here (PBKDF2 with a random salt)
and only the salted password travels, over the connection `--command-config` describes (a Kafka
client properties file: security.protocol, sasl.mechanism, sasl.username, sasl.password,
ssl.ca.location). The controller turns it into StoredKey/ServerKey; only those are logged.

Exit codes: 0 ok, 1 the cluster refused (error printed per user), 2 usage or connection problem.
"""

from __future__ import annotations

import argparse
import getpass
import os
import sys

import trio

from wire.errors import ErrorCode
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS

MECHANISMS = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
MECHANISM_NAMES = {v: k for k, v in MECHANISMS.items()}


class CliError(Exception):
    pass


def load_client_properties(path: str | None) -> dict[str, str]:
    if not path:
        return {}
    from common.properties import ConfigError, parse_properties
    try:
        with open(path) as f:
            return parse_properties(f.read())
    except (OSError, ConfigError) as exc:
        raise CliError(f"--command-config {path}: {exc}") from None


def client_security(props: dict[str, str]):
    """The connection security `props` describe (Kafka client keys); CliError if unusable."""
    from common.security import ClientSecurity, SecurityConfigError
    try:
        return ClientSecurity.from_properties(props)
    except SecurityConfigError as exc:
        raise CliError(str(exc)) from None


async def open_connection(bootstrap: str, props: dict[str, str], timeout_s: float = 10.0):
    """A BrokerConnection to the first reachable bootstrap server, secured as `props` says."""
    from clients.connection import BrokerConnection, ConnectionClosed
    security = client_security(props)
    problems = []
    for server in [s.strip() for s in bootstrap.split(",") if s.strip()]:
        host, _, port = server.rpartition(":")
        if not port.isdigit():
            raise CliError(f"--bootstrap-server {server}: expected host:port")
        conn = BrokerConnection(host, int(port), client_id="raftka-users", security=security)
        try:
            await conn.connect(timeout_s=timeout_s)
            return conn
        except (ConnectionClosed, OSError, trio.TooSlowError, trio.BrokenResourceError) as exc:
            problems.append(f"{server}: {exc or type(exc).__name__}")
    raise CliError("cannot connect: " + "; ".join(problems))


def salted(mechanism: int, password: str, iterations: int) -> tuple[bytes, bytes]:
    from common.sasl import salted_password
    salt = os.urandom(32)
    return salt, salted_password(mechanism, password, salt, iterations)


async def alter(bootstrap: str, props: dict, upserts=(), deletes=()) -> dict[str, tuple[int, str]]:
    """upserts: (user, mechanism code, password, iterations); deletes: (user, mechanism code)."""
    cls = REQUESTS[ApiKey.ALTER_USER_SCRAM_CREDENTIALS]
    ups = []
    for user, mech, password, iterations in upserts:
        salt, salted_pw = salted(mech, password, iterations)
        ups.append(cls.ScramCredentialUpsertion(name=user, mechanism=mech, iterations=iterations,
                                                salt=salt, salted_password=salted_pw))
    req = cls(deletions=[cls.ScramCredentialDeletion(name=u, mechanism=m) for u, m in deletes],
              upsertions=ups)
    conn = await open_connection(bootstrap, props)
    try:
        resp = await conn.request(req, 0, timeout_s=20)
    finally:
        await conn.aclose()
    return {r.user: (r.error_code, r.error_message) for r in resp.results}


async def describe(bootstrap: str, props: dict, users=None):
    cls = REQUESTS[ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS]
    req = cls(users=[cls.UserName(name=u) for u in users] if users else None)
    conn = await open_connection(bootstrap, props)
    try:
        resp = await conn.request(req, 0, timeout_s=20)
    finally:
        await conn.aclose()
    return resp


def _password(args) -> str:
    if args.password is not None:
        return args.password
    env = os.environ.get("RAFTKA_SCRAM_PASSWORD")
    if env:
        return env
    if not sys.stdin.isatty():
        raise CliError("give --password, RAFTKA_SCRAM_PASSWORD, or run on a terminal")
    return getpass.getpass(f"password for {args.user}: ")


def cmd_users(args: argparse.Namespace) -> int:
    try:
        props = load_client_properties(args.command_config)
        mechs = [MECHANISMS[m] for m in args.mechanism] if getattr(args, "mechanism", None) else None
        if args.action == "add":
            password = _password(args)
            if not password:
                raise CliError("empty password")
            # one request per mechanism: Kafka refuses a user named twice in one request
            return max(_report(trio.run(alter, args.bootstrap_server, props,
                                        [(args.user, m, password, args.iterations)], ()))
                       for m in mechs or [2])
        if args.action == "remove":
            existing = mechs or _existing(args, props)
            if not existing:
                raise CliError(f"{args.user}: no SCRAM credentials")
            return max(_report(trio.run(alter, args.bootstrap_server, props, (), [(args.user, m)]))
                       for m in existing)
        resp = trio.run(describe, args.bootstrap_server, props, [args.user] if args.user else None)
        if resp.error_code:
            print(f"error: {ErrorCode(resp.error_code).name} {resp.error_message or ''}", file=sys.stderr)
            return 1
        status = 0
        for r in resp.results:
            if r.error_code:
                print(f"{r.user}: {ErrorCode(r.error_code).name}", file=sys.stderr)
                status = 1
                continue
            infos = ", ".join(f"{MECHANISM_NAMES.get(c.mechanism, c.mechanism)} "
                              f"(iterations={c.iterations})" for c in r.credential_infos)
            print(f"{r.user}\t{infos}")
        return status
    except CliError as exc:
        print(f"raftka users: {exc}", file=sys.stderr)
        return 2


def _existing(args, props) -> list[int]:
    resp = trio.run(describe, args.bootstrap_server, props, [args.user])
    for r in resp.results:
        if r.error_code:
            raise CliError(f"{args.user}: {ErrorCode(r.error_code).name}")
        return [c.mechanism for c in r.credential_infos]
    return []


def _report(results: dict) -> int:
    status = 0
    for user, (code, message) in results.items():
        if code:
            print(f"{user}: {ErrorCode(code).name} {message or ''}".rstrip(), file=sys.stderr)
            status = 1
        else:
            print(f"{user}: ok")
    return status


def register(sub) -> None:
    users = sub.add_parser("users", help="SASL/SCRAM users: users scram add|list|remove")
    users_sub = users.add_subparsers(dest="kind", required=True)
    scram = users_sub.add_parser("scram", help="SCRAM-SHA-256/512 credentials")
    actions = scram.add_subparsers(dest="action", required=True)
    for name, help_text in (("add", "create or replace a credential"),
                            ("list", "users and their mechanisms (never secrets)"),
                            ("remove", "delete a user's credentials")):
        a = actions.add_parser(name, help=help_text)
        a.add_argument("--bootstrap-server", required=True, help="host:port[,host:port]")
        a.add_argument("--command-config", help="client properties (security.protocol, sasl.*, ssl.ca.location)")
        a.add_argument("--user", required=name != "list")
        if name != "list":
            a.add_argument("--mechanism", action="append", choices=sorted(MECHANISMS),
                           help="default: SCRAM-SHA-512 for add, every mechanism for remove")
        if name == "add":
            a.add_argument("--password", help="else $RAFTKA_SCRAM_PASSWORD or a prompt")
            a.add_argument("--iterations", type=int, default=8192, help="4096..16384")
        a.set_defaults(func=cmd_users)
