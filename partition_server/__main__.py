"""`python3 -m partition_server --config FILE [--set key=value ...]`: run one broker."""

from __future__ import annotations

import logging
import sys

import trio

from common import dir_lock, process
from common.properties import ConfigError
from partition_server.config import BrokerConfig


async def _serve(config: BrokerConfig, controller_config=None) -> None:
    from partition_server.broker import Broker
    stop = process.install_stop_signals()
    from partition_server.log_dirs import LogDirError
    try:
        # the directories are ours until the process exits (the descriptors stay open)
        held = dir_lock.lock_dirs(config["log.dirs"], "broker")  # noqa: F841
        if controller_config is not None:
            held += dir_lock.lock_dirs([controller_config.metadata_dir], "controller")
        broker = Broker(config)
    except (LogDirError, dir_lock.DirectoryInUse) as exc:
        print(f"raftka broker: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(1) from None
    broker.log_dirs.on_all_failed = stop.set     # Kafka: no log directory left, shut down
    controller = None
    try:
        async with trio.open_nursery() as nursery:
            if controller_config is not None:
                # combined mode (process.roles=broker,controller): one process, both roles
                from metadata_quorum.service import ControllerService
                controller = ControllerService(controller_config)
                await nursery.start(controller.run)
            nursery.start_soon(broker.run)
            await stop.wait()
            # Controlled shutdown: hand leadership away before stopping (bounded).
            await broker.controlled_shutdown(timeout_s=5)
            nursery.cancel_scope.cancel()
    finally:
        broker.close()
        if controller is not None:
            controller.close()
    if broker.replicas.log_dir_failed:
        print("raftka broker: every log directory failed", file=sys.stderr, flush=True)
        raise SystemExit(1)


def main(argv: list[str] | None = None) -> int:
    args = process.parse_args("raftka broker", argv)
    try:
        props = process.load_config_file(args.config, args.set)
        config = BrokerConfig.from_properties(props)
        controller_config = None
        if "controller" in config["process.roles"]:
            from metadata_quorum.config import ControllerConfig
            controller_config = ControllerConfig.from_properties(props)
        process.install_source_address(props)
    except (OSError, ConfigError) as exc:
        print(f"raftka broker: {exc}", file=sys.stderr)
        return 2
    process.install_test_seams(props, "log.dirs")
    limit = process.raise_open_file_limit()
    logging.getLogger("partition_server").info("open-file limit %d", limit)
    code = process.run("raftka broker", _serve, config, controller_config)
    print(f"broker {config.node_id} stopped", file=sys.stderr, flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
