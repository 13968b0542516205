"""`raftka consume`: print records from a topic (like kafka-console-consumer).

    raftka consume --topic orders --from-beginning --max-messages 10
    raftka consume --topic orders --group billing --format json
    raftka consume --topic orders --partition 2 --offset 1500 --format key-value

Without --group the partitions are assigned directly (nothing is committed); with --group the
consumer joins the group and commits what it printed when it exits. It stops after
--max-messages records, or when no record arrived for --timeout-ms, or on Ctrl-C, and then
reports "Processed a total of N messages" on stderr. Exit codes: 0 done, 1 error (unreachable
cluster, unknown topic or partition, denied...), 2 usage.

This module also holds the small helpers the `groups` command shares (client properties from
--command-config/--property, one-line errors).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys

import trio

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """Flags that do not make sense together (exit 2)."""


def add_common(p: argparse.ArgumentParser, output: bool = True) -> None:
    p.add_argument("--bootstrap-server", default=os.environ.get("RAFTKA_BOOTSTRAP"),
                   help="host:port[,host:port...] (default: $RAFTKA_BOOTSTRAP)")
    p.add_argument("--command-config", metavar="FILE",
                   help="client properties file (Kafka's key=value format)")
    if output:
        p.add_argument("--output", choices=["table", "json"], default="table",
                       help="table for people, json for scripts")


def client_props(args: argparse.Namespace, extra: list[str] | None = None) -> dict[str, str]:
    from clients.config import load_properties
    props: dict[str, str] = {}
    if getattr(args, "command_config", None):
        props.update(load_properties(args.command_config))
    for item in extra or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--property expects key=value, got {item!r}")
        props[key.strip()] = value.strip()
    bootstrap = args.bootstrap_server or props.get("bootstrap.servers")
    if not bootstrap:
        raise UsageError("no cluster given: use --bootstrap-server or set RAFTKA_BOOTSTRAP")
    props["bootstrap.servers"] = bootstrap
    return props


def run_command(prog: str, fn, *args) -> int:
    """Run `fn(*args)` under trio; user-caused failures become one line on stderr."""
    from clients.config import ConfigError
    from wire.errors import KafkaError
    try:
        return trio.run(fn, *args)
    except UsageError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (KafkaError, ConfigError, ValueError, trio.TooSlowError) as exc:
        print(f"{prog}: error: {describe_error(exc)}", file=sys.stderr)
        return EXIT_FAILURE
    except BrokenPipeError:              # `| head`: the reader went away, which is fine
        sys.stderr.close()
        return EXIT_OK
    except KeyboardInterrupt:
        return EXIT_FAILURE


def describe_error(exc: Exception) -> str:
    text = str(exc) or type(exc).__name__
    if isinstance(exc, trio.TooSlowError):
        return "timed out"
    return text.splitlines()[0]


# -- consume ---------------------------------------------------------------------------------------

def register(sub) -> None:
    p = sub.add_parser("consume", help="print records from a topic",
                       description="Print records from a topic, like kafka-console-consumer.")
    add_common(p, output=False)
    p.add_argument("--topic", required=True)
    p.add_argument("--group", help="consume as a member of this group and commit what was "
                   "printed (default: no group, nothing committed)")
    p.add_argument("--from-beginning", action="store_true",
                   help="start at the earliest offset when there is no committed offset")
    p.add_argument("--partition", type=int, help="only this partition (not with --group)")
    p.add_argument("--offset", help="with --partition: earliest, latest or an offset")
    p.add_argument("--max-messages", type=int, help="exit after this many records")
    p.add_argument("--timeout-ms", type=int,
                   help="exit when no record arrived for this long (default: wait forever)")
    p.add_argument("--format", choices=["value", "key-value", "json"], default="value",
                   help="value (default), key-value (key<sep>value) or json (one object a line)")
    p.add_argument("--output", choices=["table", "json"],
                   help="json: the same as --format json (every raftka command takes --output)")
    p.add_argument("--key-separator", default="\t", help="for --format key-value (default tab)")
    p.add_argument("--isolation-level", choices=["read_uncommitted", "read_committed"],
                   default="read_uncommitted")
    p.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                   help="a consumer property (repeatable), e.g. partition.assignment.strategy=range")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    return run_command("raftka consume", _consume, args)


def _text(b: bytes | None) -> str | None:
    return None if b is None else b.decode("utf-8", errors="replace")


def format_record(r, fmt: str, sep: str) -> str:
    if fmt == "value":
        return _text(r.value) if r.value is not None else "null"
    if fmt == "key-value":
        key = _text(r.key) if r.key is not None else "null"
        value = _text(r.value) if r.value is not None else "null"
        return f"{key}{sep}{value}"

    def j(b):
        if b is None:
            return None
        try:
            return b.decode("utf-8")
        except UnicodeDecodeError:
            return {"base64": base64.b64encode(b).decode()}
    return json.dumps({"topic": r.topic, "partition": r.partition, "offset": r.offset,
                       "timestamp": r.timestamp, "key": j(r.key), "value": j(r.value),
                       "headers": [[k, j(v)] for k, v in r.headers]})


def _check_args(args) -> None:
    if args.group and args.partition is not None:
        raise UsageError("--partition cannot be used with --group (the group assigns partitions)")
    if args.offset is not None and args.partition is None:
        raise UsageError("--offset needs --partition")
    if args.offset is not None and args.offset not in ("earliest", "latest") and \
            not args.offset.isdigit():
        raise UsageError(f"--offset must be earliest, latest or a non-negative number, "
                         f"got {args.offset!r}")
    if args.max_messages is not None and args.max_messages <= 0:
        raise UsageError("--max-messages must be positive")
    if args.timeout_ms is not None and args.timeout_ms < 0:
        raise UsageError("--timeout-ms must not be negative")


async def _consume(args) -> int:
    from clients.consumer import Consumer
    from clients.errors import UnknownTopicError
    _check_args(args)
    if args.output == "json":
        args.format = "json"
    props = client_props(args, args.property)
    props.setdefault("client.id", "raftka-console-consumer")
    props["isolation.level"] = args.isolation_level
    props["auto.offset.reset"] = "earliest" if args.from_beginning else "latest"
    if args.group:
        props["group.id"] = args.group
    props.setdefault("enable.auto.commit", "false")   # we commit what we printed, at the end
    printed = 0
    async with Consumer(props["bootstrap.servers"], props) as consumer:
        info = await consumer.cluster.wait_for_topic(args.topic, timeout_s=3)
        if args.partition is not None:
            if args.partition not in info.partitions:
                raise UnknownTopicError(f"topic {args.topic!r} has no partition {args.partition} "
                                        f"(it has {len(info.partitions)})")
            consumer.assign([(args.topic, args.partition)])
            if args.offset == "earliest":
                consumer.seek_to_beginning()
            elif args.offset == "latest":
                consumer.seek_to_end()
            elif args.offset is not None:
                consumer.seek((args.topic, args.partition), int(args.offset))
        elif args.group:
            consumer.subscribe([args.topic])
        else:
            consumer.assign([(args.topic, p) for p in sorted(info.partitions)])
        idle_since = trio.current_time()
        out = sys.stdout
        try:
            while args.max_messages is None or printed < args.max_messages:
                records = await consumer.poll(200)
                if args.max_messages is not None and len(records) > args.max_messages - printed:
                    keep = args.max_messages - printed
                    _rewind(consumer, records[keep:])    # commit only what we printed
                    records = records[:keep]
                if records:
                    out.write("".join(format_record(r, args.format, args.key_separator) + "\n"
                                      for r in records))
                    out.flush()
                    printed += len(records)
                    idle_since = trio.current_time()
                elif args.timeout_ms is not None and \
                        trio.current_time() - idle_since >= args.timeout_ms / 1000:
                    break
        except KeyboardInterrupt:
            pass
        if args.group:
            await consumer.commit()
    print(f"Processed a total of {printed} messages", file=sys.stderr)
    return EXIT_OK


def _rewind(consumer, unprinted) -> None:
    """Records past --max-messages were fetched but not printed: move each partition back to
    its first unprinted record so the final commit covers only what was printed."""
    first: dict = {}
    for r in unprinted:
        first.setdefault((r.topic, r.partition), r.offset)
    for tp, offset in first.items():
        consumer.seek(tp, offset)
