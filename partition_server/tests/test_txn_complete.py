"""The coordinator logs CompleteCommit without waiting for it to replicate (issue #23: one
replication round less per transaction), and that is safe: the next change of the transactional
id waits for a record after it, and a coordinator that lost the Complete record (a failover
before it replicated) finds PrepareCommit and writes the markers again.

Built from the real parts (replica manager, partition logs, purgatory) on one broker (id 1):
`__transaction_state-0` has a follower, broker 2, played by this test (it fetches from the
leader up to a limit the test sets), so the test decides what is committed; the data partition
`t-0` is led here alone (RF 1), so its markers commit as they are appended."""

from __future__ import annotations

import math
import uuid

import trio

from metadata_quorum import records as r
from metadata_quorum.image import MetadataImage
from partition_server.config import BrokerConfig
from partition_server.group.coordinator import GroupCoordinator
from partition_server.log import LogConfig, PartitionLog
from partition_server.peers import PeerConnections
from partition_server.purgatory import Purgatory
from partition_server.replica_manager import ReplicaManager
from partition_server.txn import state as S
from partition_server.txn.coordinator import TXN_TOPIC, TransactionCoordinator
from wire.errors import ErrorCode
from wire.records.batch import decode_batch, iter_batches, parse_control_key

TXN_KEY = (TXN_TOPIC, 0)


class Cluster:
    def __init__(self, tmp_path):
        self.config = BrokerConfig.from_properties({
            "node.id": "1", "log.dirs": str(tmp_path),
            "controller.quorum.voters": "0@127.0.0.1:1"})
        self.replicas = ReplicaManager(1, lambda t, p, cfg: PartitionLog(
            str(tmp_path / f"{t}-{p}"), LogConfig()))
        self.purgatory = Purgatory()
        state_id, data_id = uuid.uuid4(), uuid.uuid4()
        self.image = MetadataImage().apply_all(0, [
            r.TopicRecord(TXN_TOPIC, state_id), r.PartitionRecord(state_id, 0, (1, 2), (1, 2), 1),
            r.TopicRecord("t", data_id), r.PartitionRecord(data_id, 0, (1,), (1,), 1)])
        self.ids = {TXN_TOPIC: state_id, "t": data_id}
        self.become_leader(0)
        self.replicas.apply_partition("t", data_id, 0, [1], [1], 1, 0, 0, {}, 1, 0)
        image = lambda: self.image                          # noqa: E731
        groups = GroupCoordinator(self.config, self.replicas, self.purgatory, image, None,
                                  PeerConnections(image, None, "lag"))

        async def allocate():
            return 1000
        self.txn = TransactionCoordinator(self.config, self.replicas, self.purgatory, image,
                                          None, allocate, groups,
                                          PeerConnections(image, None, "txn"))
        self.txn.on_image()
        self.follower_limit = math.inf         # the follower fetches up to here

    def become_leader(self, leader_epoch: int) -> None:
        self.replicas.apply_partition(TXN_TOPIC, self.ids[TXN_TOPIC], 0, [1, 2], [1, 2], 1,
                                      leader_epoch, leader_epoch, {}, 1, 0)

    def state_log(self):
        return self.replicas.get(*TXN_KEY)

    async def follow(self) -> None:
        """Broker 2's fetches of `__transaction_state-0`: each one tells the leader how far it
        has the log, which moves the high watermark (and wakes what waits for it)."""
        while True:
            hosted = self.state_log()
            offset = min(hosted.log.log_end_offset, self.follower_limit)
            hw = hosted.state.high_watermark
            self.replicas.read(TXN_TOPIC, 0, int(offset), 1 << 20, hosted.state.leader_epoch,
                               2, hosted.state.leader_epoch, 0, min_one=True)
            if hosted.state.high_watermark != hw:
                self.purgatory.notify(TXN_KEY)          # as the leader's fetch handler does
            await trio.sleep(0.001)


def markers(replicas, topic="t"):
    """(control type, producer id) of every control batch of `topic`-0 (1 = COMMIT)."""
    plog = replicas.get(topic, 0).log
    data = plog.read(0, 1 << 20).read_bytes()
    return [(parse_control_key(decode_batch(h.bytes()).records[0].key)[1], h.producer_id)
            for h in iter_batches(data) if h.is_control]


async def wait_for(condition, timeout_s: float = 10) -> None:
    with trio.fail_after(timeout_s):
        while not condition():
            await trio.sleep(0.001)


async def start_transaction(c: Cluster, nursery) -> tuple[int, int]:
    """Run the coordinator and the follower in `nursery`; "tx" gets a producer id and an
    Ongoing transaction on t-0. Returns (producer id, epoch)."""
    nursery.start_soon(c.txn.run)
    nursery.start_soon(c.follow)
    await wait_for(lambda: c.txn._nursery is not None)
    err, pid, epoch = await c.txn.init_producer_id("tx", 60000, -1, -1)
    assert err == ErrorCode.NONE
    assert await c.txn.add_partitions("tx", pid, epoch, [("t", 0)]) == ErrorCode.NONE
    return pid, epoch


async def test_complete_is_not_awaited_and_a_lost_one_is_redone(tmp_path):
    c = Cluster(tmp_path)
    txn = c.txn
    woken_at = []          # the state log's end at each wake-up of its followers' long polls
    c.purgatory.watch([TXN_KEY], lambda key: woken_at.append(c.state_log().log.log_end_offset))
    async with trio.open_nursery() as nursery:
        pid, epoch = await start_transaction(c, nursery)
        # records so far: 0 Empty, 1 Ongoing; PrepareCommit will be 2, CompleteCommit 3.
        # The follower stops short of CompleteCommit: it can never be committed here.
        c.follower_limit = 3
        err, _, _ = await txn.end_txn("tx", pid, epoch, True)
        assert err == ErrorCode.NONE
        await wait_for(lambda: txn.txns["tx"].state is S.TxnState.COMPLETE_COMMIT)
        hosted = c.state_log()
        # installed and done (the id is free for its next transaction) while not replicated
        assert hosted.log.log_end_offset == 4 and hosted.state.high_watermark == 3
        assert "tx" not in txn.completing
        assert markers(c.replicas) == [(1, pid)]
        # nothing follows it: the followers are still woken for it (shortly after)
        await wait_for(lambda: 4 in woken_at)

        # a failover before it replicated: the new leader's log ends with PrepareCommit (as a
        # replica that never got the record), in a new leader epoch; the coordinator reloads
        hosted.log.truncate_to(3)
        hosted.state.truncated_to(3)
        c.become_leader(1)
        c.follower_limit = math.inf
        txn.on_image()
        assert txn.loaded[0] == 1
        # PrepareCommit found: the markers go out again, then CompleteCommit is logged
        await wait_for(lambda: txn.txns.get("tx") is not None and
                       txn.txns["tx"].state is S.TxnState.COMPLETE_COMMIT)
        assert markers(c.replicas) == [(1, pid), (1, pid)]

        # the next transaction: its Ongoing record is awaited, which commits CompleteCommit
        assert await txn.add_partitions("tx", pid, epoch, [("t", 0)]) == ErrorCode.NONE
        assert txn.txns["tx"].state is S.TxnState.ONGOING
        assert hosted.state.high_watermark == hosted.log.log_end_offset == 5
        nursery.cancel_scope.cancel()


async def test_no_lock_is_kept_for_an_id_between_its_requests(tmp_path):
    """The coordinator's per-id locks live only while a request holds or awaits one: it kept
    one for every transactional id it ever saw, growing with uptime."""
    c = Cluster(tmp_path)
    txn = c.txn
    async with trio.open_nursery() as nursery:
        pid, epoch = await start_transaction(c, nursery)
        err, _, _ = await txn.end_txn("tx", pid, epoch, True)
        assert err == ErrorCode.NONE
        await wait_for(lambda: txn.txns["tx"].state is S.TxnState.COMPLETE_COMMIT
                       and "tx" not in txn.completing)
        for i in range(20):                  # ids used once, as some stream processors do
            assert (await txn.init_producer_id(f"once-{i}", 60000, -1, -1))[0] == ErrorCode.NONE
        assert len(txn.locks) == 0
        nursery.cancel_scope.cancel()
