"""A new coordinator replays its partition in slices, with the event loop running between them
(partition_server/coordinator_load.py).

Found at scale: 2,000,000 offset commits in one `__consumer_offsets` partition held the broker
that took it over for 2.6 s in one step of its event loop (no request answered, no heartbeat
sent); the load was one synchronous read of the whole log inside the metadata update. Built here
from the real parts (replica manager, partition logs) on broker 1, the log written directly."""

from __future__ import annotations

import uuid

import msgpack
import trio

from metadata_quorum import records as r
from metadata_quorum.image import MetadataImage
from partition_server.config import BrokerConfig
from partition_server.group.coordinator import OFFSET_KEY, OFFSETS_TOPIC, GroupCoordinator
from partition_server.log import LogConfig, PartitionLog
from partition_server.peers import PeerConnections
from partition_server.purgatory import Purgatory
from partition_server.replica_manager import ReplicaManager
from partition_server.txn import state as S
from partition_server.txn.coordinator import TXN_KEY, TXN_TOPIC, TransactionCoordinator
from wire.errors import ErrorCode
from wire.records.batch import build_batch

SLICE = 16 * 1024
GROUP = "g"
PARTS = 200          # partitions of the committed topic: each commit writes one record each


class Broker:
    """Broker 1 hosting partition 0 of `topic` (the only partition), as leader or follower."""

    def __init__(self, tmp_path, topic: str):
        self.topic = topic
        self.config = BrokerConfig.from_properties({
            "node.id": "1", "log.dirs": str(tmp_path),
            "controller.quorum.voters": "0@127.0.0.1:1",
            "offsets.topic.num.partitions": "1", "transaction.state.log.num.partitions": "1"})
        self.replicas = ReplicaManager(1, lambda t, p, cfg: PartitionLog(
            str(tmp_path / f"{t}-{p}"), LogConfig()))
        self.topic_id = uuid.uuid4()
        self.image = MetadataImage().apply_all(0, [
            r.TopicRecord(topic, self.topic_id),
            r.PartitionRecord(self.topic_id, 0, (1, 2), (1, 2), 1)])
        self.lead(0)
        image = lambda: self.image                          # noqa: E731
        self.groups = GroupCoordinator(self.config, self.replicas, Purgatory(), image, None,
                                       PeerConnections(image, None, "lag"))

        async def allocate():
            return 1000
        self.txn = TransactionCoordinator(self.config, self.replicas, Purgatory(), image, None,
                                          allocate, self.groups,
                                          PeerConnections(image, None, "txn"))
        for loads in (self.groups.loads, self.txn.loads):
            loads.slice_bytes = SLICE

    def lead(self, leader_epoch: int, leader: int = 1) -> None:
        self.replicas.apply_partition(self.topic, self.topic_id, 0, [1, 2], [1, 2], leader,
                                      leader_epoch, leader_epoch, {}, 1, 0)

    def append(self, records: list[tuple[bytes, bytes | None]]) -> None:
        hosted = self.replicas.get(self.topic, 0)
        hosted.log.append_as_leader(build_batch([(k, v, [], 0) for k, v in records]),
                                    hosted.state.leader_epoch, 0)

    def log_bytes(self) -> int:
        return self.replicas.get(self.topic, 0).log.size_in_bytes


def commit_records(offset: int) -> list:
    return [(msgpack.packb([OFFSET_KEY, GROUP, "t", p]), msgpack.packb([offset, 0, "", 0]))
            for p in range(PARTS)]


async def load_with_ticks(coordinator, done) -> int:
    """Run the coordinator's loads until `done()`; returns how many times another task (this
    one) ran meanwhile."""
    ticks = 0
    async with trio.open_nursery() as nursery:
        nursery.start_soon(coordinator.loads.run)
        with trio.fail_after(30):
            while not done():
                ticks += 1
                await trio.lowlevel.checkpoint()
        nursery.cancel_scope.cancel()
    return ticks


async def test_a_big_offsets_partition_loads_in_slices_and_answers_load_in_progress(tmp_path):
    b = Broker(tmp_path, OFFSETS_TOPIC)
    for i in range(1, 101):                       # 100 commits of 200 partitions
        b.append(commit_records(i))
    b.append([(msgpack.packb([OFFSET_KEY, GROUP, "t", 7]), None)])     # one deleted
    slices = b.log_bytes() // SLICE
    assert slices >= 20
    groups = b.groups
    groups.on_image()                 # the first slice at once; the rest waits for the loop
    assert groups.owns(GROUP) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert GROUP not in groups.offsets          # nothing half-loaded is visible
    ticks = await load_with_ticks(groups, lambda: 0 in groups.loaded)
    # the event loop ran between every two slices (the old load ran in one step: 0)
    assert ticks >= slices - 1
    assert groups.owns(GROUP) == ErrorCode.NONE
    table = groups.offsets[GROUP]
    assert len(table) == PARTS - 1 and ("t", 7) not in table
    assert all(v[0] == 100 for v in table.values())
    assert not groups.loads.running


async def test_a_small_partition_is_loaded_before_the_update_returns(tmp_path):
    b = Broker(tmp_path, OFFSETS_TOPIC)
    b.append(commit_records(5)[:10])
    b.groups.on_image()
    assert b.groups.owns(GROUP) == ErrorCode.NONE
    assert b.groups.offsets[GROUP][("t", 3)][0] == 5


async def test_leadership_lost_during_the_load_installs_nothing_and_a_new_one_starts(tmp_path):
    b = Broker(tmp_path, OFFSETS_TOPIC)
    for i in range(1, 51):
        b.append(commit_records(i))
    groups = b.groups
    groups.on_image()
    replay = groups.loads.running[0]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(groups.loads.run)
        with trio.fail_after(10):
            while replay.offset < 10 * PARTS:         # a few slices in
                await trio.lowlevel.checkpoint()
        b.lead(1, leader=2)                           # broker 2 leads now
        groups.on_image()
        assert replay.cancelled and not groups.loads.running
        assert groups.owns(GROUP) == ErrorCode.NOT_COORDINATOR
        for _ in range(5):
            await trio.lowlevel.checkpoint()
        assert 0 not in groups.loaded and GROUP not in groups.offsets
        b.lead(2)                                     # and back to broker 1
        groups.on_image()
        assert groups.loads.running[0] is not replay
        with trio.fail_after(10):
            while 0 not in groups.loaded:
                await trio.lowlevel.checkpoint()
        nursery.cancel_scope.cancel()
    assert all(v[0] == 50 for v in groups.offsets[GROUP].values())


async def test_a_replay_whose_replica_stopped_leading_unseen_stops_by_itself(tmp_path):
    """Between two images the loader checks the replica itself: no longer the leader, it ends
    without installing (the next image starts what is needed)."""
    b = Broker(tmp_path, OFFSETS_TOPIC)
    for i in range(1, 31):
        b.append(commit_records(i))
    groups = b.groups
    groups.on_image()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(groups.loads.run)
        await trio.lowlevel.checkpoint()
        b.lead(1, leader=2)                            # no on_image
        with trio.fail_after(10):
            while groups.loads.running:
                await trio.lowlevel.checkpoint()
        nursery.cancel_scope.cancel()
    assert 0 not in groups.loaded and GROUP not in groups.offsets


def txn_record(tid: str, producer_id: int, state: S.TxnState) -> tuple:
    meta = S.TransactionMetadata(tid, producer_id, 0, 60000, state=state)
    return msgpack.packb([TXN_KEY, tid]), msgpack.packb(meta.to_record())


async def test_transactions_load_in_slices_and_a_new_epoch_loads_again(tmp_path):
    b = Broker(tmp_path, TXN_TOPIC)
    for round_ in range(20):
        b.append([txn_record(f"tx-{i}", 1000 + i, S.TxnState.COMPLETE_COMMIT)
                  for i in range(100)])
    txn = b.txn
    txn.on_image()
    assert txn.owns("tx-1") == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    first = txn.loads.running[0]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(txn.loads.run)
        await trio.lowlevel.checkpoint()
        b.lead(3)                                      # same leader, a new leader epoch
        txn.on_image()
        assert first.cancelled and txn.loads.running[0].epoch == 3
        with trio.fail_after(10):
            while txn.loaded.get(0) != 3:
                await trio.lowlevel.checkpoint()
        nursery.cancel_scope.cancel()
    assert txn.owns("tx-1") == ErrorCode.NONE
    assert len(txn.txns) == 100 and txn.txns["tx-7"].producer_id == 1007
