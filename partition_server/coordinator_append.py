"""Coordinator writes to their internal topics (`__consumer_offsets`, `__transaction_state`):
append locally as the partition leader, then wait — as an acks=all produce would — until the
high watermark passes the append. One mapping of partition errors to the codes coordinator
clients expect, shared by the group and transaction coordinators.

The waits take the two collaborators they use (the replica manager, which knows when an append
is committed, and the purgatory, which wakes the waiter), not the broker."""

from __future__ import annotations

from typing import TYPE_CHECKING

from wire.errors import ErrorCode

if TYPE_CHECKING:
    from partition_server.purgatory import Purgatory
    from partition_server.replica_manager import ReplicaManager


def coordinator_error(err: ErrorCode) -> ErrorCode:
    """An append refused because we no longer lead the partition (or its disk failed) means we
    are no longer the coordinator."""
    if err in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
        return ErrorCode.NOT_COORDINATOR
    return err


def store_error(err: ErrorCode) -> ErrorCode:
    """What a group member is answered when the coordinator could not store the group state
    its request changed (Kafka's mapping for SyncGroup / ConsumerGroupHeartbeat)."""
    if err in (ErrorCode.NONE, ErrorCode.NOT_COORDINATOR):
        return err
    if err in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS,
               ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.REQUEST_TIMED_OUT,
               ErrorCode.COORDINATOR_NOT_AVAILABLE):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    return ErrorCode.UNKNOWN_SERVER_ERROR


async def wait_completion(replicas: ReplicaManager, purgatory: Purgatory, topic: str,
                          partition: int, last_offset: int,
                          timeout_s: float) -> ErrorCode | None:
    """Wait, as an acks=all produce does, until `last_offset` is committed or can no longer be;
    the partition's verdict (None: still pending at the timeout)."""
    key = (topic, partition)
    purgatory.notify(key)

    def done():
        return replicas.produce_completion(topic, partition, last_offset) is not None
    await purgatory.wait_until([key], done, timeout_s)
    return replicas.produce_completion(topic, partition, last_offset)


async def wait_committed(replicas: ReplicaManager, purgatory: Purgatory, topic: str,
                         partition: int, last_offset: int, timeout_s: float) -> ErrorCode:
    """`wait_completion` in the codes a coordinator's clients expect."""
    outcome = await wait_completion(replicas, purgatory, topic, partition, last_offset,
                                    timeout_s)
    if outcome is None:
        return ErrorCode.REQUEST_TIMED_OUT
    if outcome == ErrorCode.NONE:
        return ErrorCode.NONE
    if outcome == ErrorCode.NOT_LEADER_OR_FOLLOWER:
        return ErrorCode.NOT_COORDINATOR
    return ErrorCode.COORDINATOR_NOT_AVAILABLE      # the ISR shrank below min.insync.replicas
