"""Regression test for a finding made while building the simulation (fixed in
`FetcherManager._process`): a fetch answer was applied to a partition even when the partition
changed leader (and leader epoch) while that fetch was in flight. The task fetching from the old
leader keeps running as long as this broker still follows some other partition there, so its
late answer — correct for the state we had when we asked — was applied to a partition that now
follows someone else. Sequence: we hold an uncommitted tail from an old epoch and ask the leader
A; before A answers, the partition moves to B; B's answer truncates the tail, we replicate from B
and those records commit; then A's late "you diverged at offset 5" arrives and truncated the
committed records again while we were in B's ISR. Now, as in Kafka, an answer is applied only if
the partition still follows the same leader in the same leader epoch at the same fetch offset.

Built with the real PartitionLog, ReplicaManager, PartitionState and FetcherManager halves.
"""

import types
import uuid


from partition_server.log.partition_log import PartitionLog
from partition_server.replica_manager import ReplicaManager
from partition_server.replication.fetcher import FetcherManager
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import RESPONSES
from wire.records.batch import build_batch

TOPIC_ID = uuid.uuid4()


def follower_batch(base_offset: int, epoch: int, n: int) -> bytes:
    return build_batch([(None, f"v{base_offset + i}".encode(), None, 0) for i in range(n)],
                       base_offset=base_offset, partition_leader_epoch=epoch)


def follow(replicas, leader: int, epoch: int) -> None:
    replicas.apply_partition("t", TOPIC_ID, 0, [0, 1, 2], [0, 1, 2], leader, epoch, epoch, {},
                             2, 0)


def diverged(at_epoch: int, end_offset: int):
    cls = RESPONSES[ApiKey.FETCH]
    return cls(error_code=0, session_id=0, responses=[cls.FetchableTopicResponse(
        topic="t", partitions=[cls.PartitionData(
            partition_index=0, error_code=0, high_watermark=5, log_start_offset=0,
            diverging_epoch=cls.EpochEndOffset(epoch=at_epoch, end_offset=end_offset),
            records=b"")])])


def test_late_answer_from_the_previous_leader_is_not_applied(tmp_path):
    plog = PartitionLog(str(tmp_path / "t-0"))
    replicas = ReplicaManager(0, lambda topic, partition, config: plog)
    fetcher = FetcherManager(0, {"replica.fetch.max.bytes": 1 << 20}, replicas,
                             types.SimpleNamespace(notify=lambda key: None),
                             image=lambda: None, security=None)

    # we hold 0..4 (committed) and 5..9 from epoch 0 that were never committed
    follow(replicas, leader=1, epoch=1)
    hosted = replicas.get("t", 0)
    plog.append_as_follower(follower_batch(0, 0, 5))
    plog.append_as_follower(follower_batch(5, 0, 5))
    hosted.state.update_follower_high_watermark(5)
    request = fetcher._build([("t", 0)])          # to broker 1 (epoch 1): offset 10, epoch 0
    assert request.topics[0].partitions[0].current_leader_epoch == 1

    # before broker 1 answers, the partition moves to broker 2 (epoch 2); its answer to the
    # same question truncates our uncommitted tail, then we replicate 5..14 and they commit
    follow(replicas, leader=2, epoch=2)
    to_b = fetcher._build([("t", 0)])
    fetcher._process(diverged(0, 5), to_b, 2)
    assert plog.log_end_offset == 5
    plog.append_as_follower(follower_batch(5, 2, 10))
    hosted.state.update_follower_high_watermark(15)
    assert (plog.log_end_offset, hosted.state.high_watermark) == (15, 15)

    # broker 1's answer (the same, correct when it was computed) arrives late: it must be
    # dropped — the partition is no longer fetched from broker 1 in epoch 1
    fetcher._process(diverged(0, 5), request, 1)
    assert plog.log_end_offset == 15, "committed records 5..14 were truncated by a late answer"
    assert hosted.state.high_watermark == 15
