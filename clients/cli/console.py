"""`raftka console`: serve the read-only web console (clients/console) until Ctrl-C.

    raftka console --bootstrap-server 127.0.0.1:9092 [--command-config client.properties]
                   [--host 127.0.0.1] [--port 8080] [--interval 2]

It connects with the given client properties (TLS/SASL included), so the cluster's ACLs decide
what it shows. It listens on 127.0.0.1 unless told otherwise: the pages show record contents to
anyone who can reach the port, with the console's credentials. Exit codes as every client
command (clients/cli/output.py): 2 bad flags or properties, 3 cluster unreachable, 1 the port
cannot be bound.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from clients.cli.output import (EXIT_FAILED, EXIT_OK, EXIT_UNREACHABLE, CommandError,
                                add_connection_args, client_config, error_line)

PROG = "raftka console"


def register(sub) -> None:
    p = sub.add_parser("console", help="read-only web console (cluster, topics, groups, "
                       "throughput, messages, reassignments)",
                       description="Serve a read-only web console over the cluster.")
    add_connection_args(p, output=False)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default "
                   "127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8080, help="port to listen on (0: any free one)")
    p.add_argument("--interval", type=float, default=2.0, metavar="SECONDS",
                   help="how often the throughput charts sample log end offsets")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from clients.console.server import Console, serve
    from clients.errors import ClientError
    from wire.errors import KafkaError
    if not 0 <= args.port <= 65535 or args.interval <= 0:
        error_line(PROG, "--port must be 0..65535 and --interval positive")
        return 2
    try:
        props = client_config(args, {"client.id": "raftka-console"})
        console = Console(props, args.interval)
    except CommandError as exc:
        error_line(PROG, str(exc))
        return exc.code
    except (KafkaError, ClientError, OSError) as exc:
        error_line(PROG, f"cannot reach the cluster: {exc}")
        return EXIT_UNREACHABLE
    except ValueError as exc:             # ConfigError: a property with a bad value
        error_line(PROG, f"bad configuration: {exc}")
        return 2
    try:
        server = serve(console, args.host, args.port)
    except OSError as exc:
        console.close()
        error_line(PROG, f"cannot listen on {args.host}:{args.port}: {exc}")
        return EXIT_FAILED
    host, port = server.server_address[:2]
    print(f"Raftka console (read-only) at http://{host}:{port}/ — Ctrl-C to stop", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    server.shutdown()
    console.close()
    print("console stopped", file=sys.stderr)
    return EXIT_OK
