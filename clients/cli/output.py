"""What every client command shares: connection flags, output formats, errors -> exit codes.

Exit codes (all client commands):
  0  success
  1  the cluster refused or failed the operation (unknown topic, already exists, invalid
     config, a record not delivered...) — one line per failed item on stderr
  2  usage or configuration error (bad flags, unreadable --command-config)
  3  the cluster could not be reached, or did not answer in time

Errors a user can cause print one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Callable, Iterable

import trio

from clients.config import ConfigError, load_properties
from clients.errors import KafkaConnectionError, KafkaTimeoutError, NoBrokersAvailable
from wire.errors import KafkaError

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


class CommandError(Exception):
    """A user-facing failure: `message` goes to stderr as is; `code` is the exit code."""

    def __init__(self, message: str, code: int = EXIT_FAILED):
        super().__init__(message)
        self.code = code


def add_connection_args(p: argparse.ArgumentParser, output: bool = True) -> None:
    p.add_argument("--bootstrap-server", metavar="HOST:PORT[,...]",
                   default=None, help="brokers to bootstrap from (default: $RAFTKA_BOOTSTRAP "
                   f"or {DEFAULT_BOOTSTRAP})")
    p.add_argument("--command-config", metavar="FILE",
                   help="client properties file (Kafka's key=value format)")
    if output:
        p.add_argument("--output", choices=["table", "json"], default="table",
                       help="table for people (default), json for scripts")


def client_config(args: argparse.Namespace, extra: dict | None = None) -> dict:
    """Properties from --command-config, then the bootstrap (flag > env > file > default)."""
    props: dict[str, Any] = {}
    if getattr(args, "command_config", None):
        try:
            props.update(load_properties(args.command_config))
        except ConfigError as exc:
            raise CommandError(str(exc), EXIT_USAGE) from None
    bootstrap = (getattr(args, "bootstrap_server", None) or os.environ.get("RAFTKA_BOOTSTRAP")
                 or props.get("bootstrap.servers") or DEFAULT_BOOTSTRAP)
    props["bootstrap.servers"] = bootstrap
    props.setdefault("client.id", "raftka-cli")
    # a CLI should fail fast on a dead cluster rather than retry for a minute
    props.setdefault("socket.connection.setup.timeout.ms", "5000")
    props.setdefault("default.api.timeout.ms", "30000")
    props.setdefault("max.block.ms", "15000")
    props.update(extra or {})
    # TLS and SASL: the clients this command creates build their `ClientSecurity` from these
    # same properties; check them now so a bad value is a usage error, not a failed connect
    from clients.config import ConfigError as ClientConfigError, client_security
    try:
        client_security(props)
    except ClientConfigError as exc:
        raise CommandError(f"--command-config: {exc}", EXIT_USAGE) from None
    return props


def _leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def run(prog: str, args: argparse.Namespace, main: Callable, *main_args) -> int:
    """trio.run(main, *main_args) with every user-causable failure mapped to a line + code."""
    try:
        return trio.run(main, *main_args)
    except BaseException as raw:  # noqa: BLE001 - mapped below; unknown ones re-raised
        exc = _leaf(raw)
        if isinstance(exc, KeyboardInterrupt):
            return 130
        if isinstance(exc, CommandError):
            msg, code = str(exc), exc.code
        elif isinstance(exc, NoBrokersAvailable):
            msg, code = f"cannot reach the cluster: {exc}", EXIT_UNREACHABLE
        elif isinstance(exc, (KafkaConnectionError, KafkaTimeoutError, trio.TooSlowError)):
            msg, code = f"cluster did not answer: {exc or 'timed out'}", EXIT_UNREACHABLE
        elif isinstance(exc, ConfigError):
            msg, code = f"bad configuration: {exc}", EXIT_USAGE
        elif isinstance(exc, KafkaError):
            msg, code = str(exc), EXIT_FAILED
        elif isinstance(exc, (OSError, ValueError)):
            msg, code = str(exc), EXIT_USAGE if isinstance(exc, ValueError) else EXIT_FAILED
        else:
            raise
        print(f"{prog}: {msg}", file=sys.stderr)
        return code


def error_line(prog: str, message: str) -> None:
    print(f"{prog}: {message}", file=sys.stderr)


def print_json(obj: Any) -> None:
    print(json.dumps(obj, default=str))


def print_table(headers: list[str], rows: Iterable[Iterable[Any]]) -> None:
    rows = [["" if v is None else str(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in rows:
        for i, v in enumerate(row):
            widths[i] = max(widths[i], len(v))
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip())
    for row in rows:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip())


def parse_kv(items: Iterable[str], what: str = "--config") -> dict[str, str]:
    """key=value items; each item may itself be a comma list (Kafka's `a=1,b=2`), and a value
    in [brackets] may contain commas (`leader.replication.throttled.replicas=[0:1,1:2]`)."""
    out: dict[str, str] = {}
    for item in items:
        for part in _split_commas(item):
            key, sep, value = part.partition("=")
            if not sep or not key.strip():
                raise CommandError(f"{what} expects key=value, got {part!r}", EXIT_USAGE)
            value = value.strip()
            if value.startswith("[") and value.endswith("]"):
                value = value[1:-1]
            out[key.strip()] = value
    return out


def _split_commas(s: str) -> list[str]:
    parts, depth, cur = [], 0, []
    for ch in s:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth = max(0, depth - 1)
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p for p in (x.strip() for x in parts) if p]
