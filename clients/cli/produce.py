"""`raftka produce`: one record per input line (like kafka-console-producer.sh).

Lines come from stdin or `--file`. With `--key-separator S` each line is `key S value` (split at
the first S; a line without S is an error). `--header K=V` adds headers to every record. Exit 0
when every record was acknowledged, 1 if any failed (the first reason on stderr).
"""

from __future__ import annotations

import argparse
import collections
import sys

import trio

from clients.cli.output import (EXIT_FAILED, EXIT_OK, EXIT_USAGE, CommandError,
                                add_connection_args, client_config, error_line, print_json, run)
from clients.producer import Producer

PROG = "raftka produce"


def register(sub) -> None:
    p = sub.add_parser("produce", help="write lines from stdin or a file as records",
                       description="Write one record per input line (like "
                       "kafka-console-producer.sh).")
    p.add_argument("--topic", required=True)
    p.add_argument("--file", help="read lines from this file instead of stdin")
    p.add_argument("--key-separator", metavar="SEP",
                   help="each line is KEY<SEP>VALUE (split at the first SEP)")
    p.add_argument("--header", action="append", default=[], metavar="KEY=VALUE",
                   help="header added to every record (repeatable)")
    p.add_argument("--partition", type=int, help="write every record to this partition")
    p.add_argument("--acks", default="all", choices=["0", "1", "all", "-1"])
    p.add_argument("--compression", default="none",
                   choices=["none", "gzip", "snappy", "lz4", "zstd"])
    p.add_argument("--linger-ms", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=16384)
    p.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                   help="any producer property (repeatable), e.g. enable.idempotence=false")
    add_connection_args(p)
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    return run(PROG, args, _run, args)


def _headers(items: list[str]) -> list[tuple[str, bytes]]:
    out = []
    for item in items:
        k, sep, v = item.partition("=")
        if not sep or not k:
            raise CommandError(f"--header expects KEY=VALUE, got {item!r}", EXIT_USAGE)
        out.append((k, v.encode()))
    return out


async def _lines(f):
    """Lines without their newline; interactive input line by line, files in big chunks."""
    interactive = f.isatty()
    while True:
        if interactive:
            chunk = [await trio.to_thread.run_sync(f.readline)]
            if chunk == [""]:
                return
        else:
            chunk = await trio.to_thread.run_sync(f.readlines, 1 << 20)
            if not chunk:
                return
        for line in chunk:
            yield line.rstrip("\r\n") if isinstance(line, str) else line.rstrip(b"\r\n")


async def _run(args) -> int:
    headers = _headers(args.header)
    # a console user should hear about an unwritable topic in seconds, not Kafka's 2 minutes
    extra = {"delivery.timeout.ms": "30000", "acks": args.acks, "compression.type": args.compression,
             "linger.ms": str(args.linger_ms), "batch.size": str(args.batch_size)}
    for item in args.property:
        k, sep, v = item.partition("=")
        if not sep:
            raise CommandError(f"--property expects KEY=VALUE, got {item!r}", EXIT_USAGE)
        extra[k.strip()] = v.strip()
    cfg = client_config(args, extra)
    try:
        f = open(args.file, "rb") if args.file else sys.stdin.buffer
    except OSError as exc:
        raise CommandError(f"cannot read {args.file}: {exc.strerror}", EXIT_USAGE) from None
    sep = args.key_separator.encode() if args.key_separator else None
    count = 0
    errors: list[BaseException] = []
    per_partition: collections.Counter = collections.Counter()

    def done(meta, exc):
        if exc is not None:
            errors.append(exc)
        else:
            per_partition[meta.partition] += 1

    try:
        async with Producer(config=cfg) as producer:
            await producer.cluster.wait_for_topic(args.topic, timeout_s=5, need_leaders=False)
            lineno = 0
            async for line in _lines(f):
                lineno += 1
                key = None
                if sep is not None:
                    key, found, value = line.partition(sep)
                    if not found:
                        raise CommandError(f"line {lineno}: no key separator "
                                           f"{args.key_separator!r}", EXIT_USAGE)
                else:
                    value = line
                await producer.send(args.topic, value, key, partition=args.partition,
                                    headers=headers, on_delivery=done)
                count += 1
            await producer.flush()
    finally:
        if args.file:
            f.close()
    if args.output == "json":
        print_json({"topic": args.topic, "records": count, "delivered": count - len(errors),
                    "errors": len(errors),
                    "partitions": {str(p): n for p, n in sorted(per_partition.items())}})
    else:
        parts = ", ".join(f"{p}: {n}" for p, n in sorted(per_partition.items()))
        print(f"Produced {count - len(errors)} of {count} record(s) to {args.topic}"
              + (f" (partition: records {parts})" if parts else "") + ".")
    if errors:
        error_line(PROG, f"{len(errors)} record(s) not delivered; first: {errors[0]}")
        return EXIT_FAILED
    return EXIT_OK
