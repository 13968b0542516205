"""The group coordinator's tick loop when the broker coordinates no group (issue #23: ten
wake-ups a second of every idle broker were a visible share of an idle cluster's CPU): it ticks
once a second, and a group appearing (a JoinGroup, as the handler delivers it) brings the 100 ms
tick back at once. Real coordinator and replica manager, trio's virtual clock."""

from __future__ import annotations

import trio
import trio.testing

from metadata_quorum.image import MetadataImage
from partition_server.config import BrokerConfig
from partition_server.group.coordinator import IDLE_TICK_S, GroupCoordinator
from partition_server.log import LogConfig, PartitionLog
from partition_server.peers import PeerConnections
from partition_server.purgatory import Purgatory
from partition_server.replica_manager import ReplicaManager


def _coordinator(tmp_path) -> GroupCoordinator:
    config = BrokerConfig.from_properties({
        "node.id": "1", "log.dirs": str(tmp_path), "controller.quorum.voters": "0@127.0.0.1:1"})
    replicas = ReplicaManager(1, lambda t, p, cfg: PartitionLog(str(tmp_path / f"{t}-{p}"),
                                                                LogConfig()))
    image = MetadataImage()
    return GroupCoordinator(config, replicas, Purgatory(), lambda: image, None,
                            PeerConnections(lambda: image, None, "lag"))


def test_an_idle_coordinator_ticks_once_a_second_and_at_once_when_a_group_appears(tmp_path):
    groups = _coordinator(tmp_path)
    ticks: list[float] = []
    real_tick = groups.state.tick

    def tick(now_ms):
        ticks.append(trio.current_time())
        return real_tick(now_ms)

    groups.state.tick = tick
    seen: dict = {}

    async def main():
        async with trio.open_nursery() as nursery:
            nursery.start_soon(groups.tick_loop)
            await trio.sleep(10)
            seen["idle"] = len(ticks)
            joined_at = trio.current_time()
            # what handle_join_group does: the state machine, then deliver its effects
            _, effects, _ = groups.state.join("g", "", None, "c", "/127.0.0.1", 30_000, 30_000,
                                              "consumer", [("range", b"")], False, 0)
            groups.deliver(effects)
            await trio.sleep(1)
            seen["after_join"] = [t - joined_at for t in ticks if t > joined_at]
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    # ~10 s / (IDLE_TICK_S + 0.1 s) ticks while idle, where the loop used to tick 100 times
    assert 10 / (IDLE_TICK_S + 0.1) - 1 <= seen["idle"] <= 10 / IDLE_TICK_S + 1
    after = seen["after_join"]
    assert after and after[0] <= 0.1 + 1e-6       # the join woke it: no idle second to wait out
    assert len(after) >= 9                        # and with a group it ticks every 100 ms again
