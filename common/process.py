"""What the controller and broker entry points share: reading a config file with `--set`
overrides, logging set-up, and running the trio main so that a port already in use ends with one
clear line rather than a traceback."""

from __future__ import annotations

import argparse
import logging
import os
import resource
import signal
import sys

import trio

from common.properties import ConfigError, parse_properties


def parse_args(prog: str, argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("--config", required=True, help=".properties file (Kafka property names)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override one property (repeatable)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return args


def load_config_file(path: str, sets: list[str]) -> dict[str, str]:
    """Properties from `path`, then `key=value` overrides. Raises ConfigError or OSError."""
    with open(path) as f:
        props = parse_properties(f.read())
    for item in sets:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set expects key=value, got {item!r}")
        props[key.strip()] = value.strip()
    return props


def install_test_seams(props: dict[str, str], data_dir_key: str) -> None:
    """`raftka.clock.offset.file` (tests only; relative to the node's data directory,
    `data_dir_key`): this process's wall clock follows the offset written in that file, to
    simulate a clock jump on one node (common/clock.py)."""
    path = props.get("raftka.clock.offset.file")
    if path:
        from common.clock import install_offset_file
        base = (props.get(data_dir_key) or ".").split(",")[0].strip()
        install_offset_file(os.path.join(base, path))


SOURCE_ADDRESS_KEY = "raftka.network.source.address"


def install_source_address(props: dict[str, str]) -> None:
    """`raftka.network.source.address`: the local IP address every connection this node opens
    leaves from (common/connection.py says why); unset, the kernel chooses. Raises ConfigError
    for an address this machine does not have, so the node stops with one clear line instead of
    failing each connection later."""
    host = props.get(SOURCE_ADDRESS_KEY, "").strip()
    if not host:
        return
    import socket

    from common.connection import set_source_address
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family) as probe:
            probe.bind((host, 0))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{SOURCE_ADDRESS_KEY}={host!r}: not an address of this machine "
                          f"({exc})") from None
    set_source_address(host)


def run(prog: str, async_fn, *args) -> int:
    """trio.run, turning an OSError from binding a listener into one line and exit code 1."""
    from common.gc_policy import GcPolicy
    from common.stall_trace import instruments_from_env
    try:
        policy = GcPolicy()
        trio.run(policy.run_with_sweeps, async_fn, *args,
                 instruments=[policy, *instruments_from_env()])
    except BaseExceptionGroup as group:
        errors = group.subgroup(lambda e: isinstance(e, OSError))
        if errors is None:
            raise
        while isinstance(errors, BaseExceptionGroup):
            errors = errors.exceptions[0]
        print(f"{prog}: {errors}", file=sys.stderr)
        return 1
    return 0



def install_stop_signals() -> trio.Event:
    """An event set at the first SIGTERM or SIGINT (call it inside trio, first thing). Later
    ones change nothing, so they cannot cut the clean stop short: Ctrl-C reaches every process
    of the terminal's group and `raftka dev` sends its own SIGTERM too. (trio's
    open_signal_receiver re-delivers signals still pending when it closes, with their default
    action: a second SIGTERM killed brokers between their controlled shutdown and closing their
    logs, and they restarted as after a crash.) The stop is bounded; SIGKILL still ends a
    process at once."""
    stop = trio.Event()
    token = trio.lowlevel.current_trio_token()

    def handler(signum, frame):
        try:
            token.run_sync_soon(stop.set)   # safe from a signal handler (trio's docs)
        except trio.RunFinishedError:
            pass                            # trio is done: the process is exiting anyway

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    return stop


OPEN_FILES_WANTED = 1 << 20


def raise_open_file_limit() -> int:
    """Raise this process's open-file limit as far as it may go, and return it. A broker's
    open segment files are bounded (`raftka.log.max.open.files`, by default half this limit),
    so a higher limit means fewer segment files closed and reopened, and room for connections.
    A process may raise its soft limit to its hard limit, and a privileged one the hard limit
    too (up to the kernel's fs.nr_open)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    for target in (OPEN_FILES_WANTED, hard):
        if target == resource.RLIM_INFINITY or target <= soft:
            continue
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, max(target, hard)))
            return target
        except (ValueError, OSError):
            continue
    return soft
