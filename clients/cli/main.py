"""The `raftka` command: one entry point, one subcommand per job.

Errors a user can cause (bad flags, unreachable cluster, bad config) print one line on stderr
and exit non-zero; tracebacks are for bugs only. Client commands share their exit codes
(clients/cli/output.py): 0 ok, 1 the cluster refused or failed the operation, 2 usage or
configuration error, 3 cluster unreachable or not answering.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2


def cmd_controller(args: argparse.Namespace) -> int:
    from metadata_quorum.__main__ import main as controller_main
    return controller_main(["--config", args.config])


def cmd_broker(args: argparse.Namespace) -> int:
    from partition_server.__main__ import main as broker_main
    argv = ["--config", args.config]
    for item in args.set:
        argv += ["--set", item]
    return broker_main(argv)


def cmd_perf(args: argparse.Namespace) -> int:
    from clients.cli import perf
    if not args.perf_command:
        raise SystemExit("raftka perf: choose produce or consume (see --help)")
    return perf.main(args)


def _register(sub, *modules: str) -> None:
    """clients/cli/<module>.py adds its own subcommands (one line per module below)."""
    for module in modules:
        importlib.import_module(f"clients.cli.{module}").register(sub)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="raftka", description="Raftka: Kafka-compatible streaming "
                                     "with a Raft metadata quorum.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    _register(sub, "dev")

    ctl = sub.add_parser("controller", help="run one metadata-quorum controller")
    ctl.add_argument("--config", required=True, help="controller .properties file")
    ctl.set_defaults(func=cmd_controller)

    brk = sub.add_parser("broker", help="run one partition server")
    brk.add_argument("--config", required=True, help="broker .properties file")
    brk.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="override a property (repeatable)")
    brk.set_defaults(func=cmd_broker)

    perf = sub.add_parser("perf", help="load generators: perf produce | perf consume")
    perf_sub = perf.add_subparsers(dest="perf_command", metavar="produce|consume")
    for name in ("produce", "consume"):
        p = perf_sub.add_parser(name, help=f"measure {name} throughput")
        p.add_argument("--bootstrap-server", default=os.environ.get("RAFTKA_BOOTSTRAP",
                                                                    "127.0.0.1:9092"))
        p.add_argument("--command-config", metavar="FILE", help="client properties file")
        p.add_argument("--topic", default="perf")
        p.add_argument("--num-records", type=int, default=100_000)
        p.add_argument("--output", choices=["table", "json"], default="table")
        if name == "produce":
            p.add_argument("--record-size", type=int, default=100)
            p.add_argument("--acks", default="1", choices=["0", "1", "all", "-1"])
            p.add_argument("--compression", default="none",
                           choices=["none", "gzip", "snappy", "lz4", "zstd"])
            p.add_argument("--linger-ms", type=int, default=5)
            p.add_argument("--partitions", type=int, default=6)
            p.add_argument("--replication-factor", type=int, default=1)
            p.add_argument("--batch-size", type=int, default=1 << 18)
        p.add_argument("--client", choices=["raftka", "confluent"], default="raftka",
                       help=f"{name} with our client (default) or confluent-kafka")
    perf.set_defaults(func=cmd_perf)

    _register(sub, "quorum")
    from clients.cli import users  # noqa: E402 - `raftka users scram ...`
    users.register(sub)
    from clients.cli import consume, groups  # noqa: E402 - consumer CLI registers itself
    consume.register(sub)
    groups.register(sub)
    _register(sub, "topics")
    _register(sub, "configs")
    _register(sub, "acls")
    _register(sub, "produce")
    _register(sub, "transactions")
    _register(sub, "quotas", "reassign")
    _register(sub, "cluster", "log_dirs")
    _register(sub, "console")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return args.func(args)
    except KeyboardInterrupt:
        return EXIT_FAILURE


if __name__ == "__main__":
    sys.exit(main())
