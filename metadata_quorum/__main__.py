"""`python3 -m metadata_quorum --config FILE`: run one controller until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import logging
import signal
import sys

import trio

from metadata_quorum.config import ConfigError, ControllerConfig, load_properties


async def _serve(config: ControllerConfig) -> None:
    from metadata_quorum.service import ControllerService
    svc = ControllerService(config)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(svc.run)
            with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for _ in signals:
                    break
            nursery.cancel_scope.cancel()
    finally:
        svc.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="raftka controller")
    parser.add_argument("--config", required=True, help="controller .properties file")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        with open(args.config) as f:
            props = load_properties(f.read())
        for item in args.set:
            k, _, v = item.partition("=")
            props[k.strip()] = v.strip()
        config = ControllerConfig.from_properties(props)
    except (OSError, ConfigError) as exc:
        print(f"raftka controller: {exc}", file=sys.stderr)
        return 2
    try:
        trio.run(_serve, config)
    except BaseExceptionGroup as group:
        bind = group.subgroup(lambda e: isinstance(e, OSError))
        if bind is None:
            raise
        print(f"raftka controller: {_first(bind)}", file=sys.stderr)
        return 1
    print(f"controller {config.node_id} stopped", file=sys.stderr, flush=True)
    return 0


def _first(group):
    while isinstance(group, BaseExceptionGroup):
        group = group.exceptions[0]
    return group


if __name__ == "__main__":
    sys.exit(main())
