"""`python3 -m partition_server --config FILE [--set key=value ...]`: run one broker."""

from __future__ import annotations

import argparse
import logging
import signal
import sys

import trio

from metadata_quorum.config import ConfigError, load_properties
from partition_server.config import BrokerConfig


async def _serve(config: BrokerConfig, controller_config=None) -> None:
    from partition_server.broker import Broker
    broker = Broker(config)
    controller = None
    try:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with trio.open_nursery() as nursery:
                if controller_config is not None:
                    # combined mode (process.roles=broker,controller): one process, both roles
                    from metadata_quorum.service import ControllerService
                    controller = ControllerService(controller_config)
                    await nursery.start(controller.run)
                nursery.start_soon(broker.run)
                async for _ in signals:
                    break
                # Controlled shutdown: hand leadership away before stopping (bounded).
                await broker.controlled_shutdown(timeout_s=5)
                nursery.cancel_scope.cancel()
    finally:
        broker.close()
        if controller is not None:
            controller.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="raftka broker")
    parser.add_argument("--config", required=True, help="broker .properties file")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        with open(args.config) as f:
            props = load_properties(f.read())
        for item in args.set:
            k, sep, v = item.partition("=")
            if not sep:
                raise ConfigError(f"--set expects key=value, got {item!r}")
            props[k.strip()] = v.strip()
        config = BrokerConfig.from_properties(props)
        controller_config = None
        if "controller" in config["process.roles"]:
            from metadata_quorum.config import ControllerConfig
            controller_config = ControllerConfig.from_properties(props)
    except (OSError, ConfigError) as exc:
        print(f"raftka broker: {exc}", file=sys.stderr)
        return 2
    try:
        trio.run(_serve, config, controller_config)
    except BaseExceptionGroup as group:
        bind = group.subgroup(lambda e: isinstance(e, OSError))
        if bind is None:
            raise
        print(f"raftka broker: {_first(bind)}", file=sys.stderr)
        return 1
    print(f"broker {config.node_id} stopped", file=sys.stderr, flush=True)
    return 0


def _first(group):
    while isinstance(group, BaseExceptionGroup):
        group = group.exceptions[0]
    return group


if __name__ == "__main__":
    sys.exit(main())
