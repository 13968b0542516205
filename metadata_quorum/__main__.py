"""`python3 -m metadata_quorum --config FILE`: run one controller until SIGTERM/SIGINT."""

from __future__ import annotations

import sys

import trio

from common import dir_lock, process
from metadata_quorum.config import ConfigError, ControllerConfig


async def _serve(config: ControllerConfig) -> None:
    from metadata_quorum.service import ControllerService
    stop = process.install_stop_signals()
    try:
        # the Raft journal's directory is ours until the process exits (the descriptor stays open)
        held = dir_lock.lock_dirs([config.metadata_dir], "controller")  # noqa: F841
    except dir_lock.DirectoryInUse as exc:
        print(f"raftka controller: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(1) from None
    svc = ControllerService(config)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(svc.run)
            await stop.wait()
            nursery.cancel_scope.cancel()
    finally:
        svc.close()


def main(argv: list[str] | None = None) -> int:
    args = process.parse_args("raftka controller", argv)
    try:
        props = process.load_config_file(args.config, args.set)
        config = ControllerConfig.from_properties(props)
        process.install_source_address(props)
    except (OSError, ConfigError) as exc:
        print(f"raftka controller: {exc}", file=sys.stderr)
        return 2
    process.install_test_seams(props, "metadata.log.dir")
    code = process.run("raftka controller", _serve, config)
    print(f"controller {config.node_id} stopped", file=sys.stderr, flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
