"""Coordinator writes to their internal topics (`__consumer_offsets`, `__transaction_state`):
append locally as the partition leader, then wait — as an acks=all produce would — until the
high watermark passes the append. One mapping of partition errors to the codes coordinator
clients expect, shared by the group and transaction coordinators."""

from __future__ import annotations

from wire.errors import ErrorCode


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


async def wait_completion(broker, topic: str, partition: int, last_offset: int,
                          timeout_s: float) -> ErrorCode | None:
    """Wait, as an acks=all produce does, until `last_offset` is committed or can no longer be;
    the partition's verdict (None: still pending at the timeout)."""
    key = (topic, partition)
    broker.purgatory.notify(key)

    def done():
        return broker.replicas.produce_completion(topic, partition, last_offset) is not None
    await broker.purgatory.wait_until([key], done, timeout_s)
    return broker.replicas.produce_completion(topic, partition, last_offset)


async def wait_committed(broker, topic: str, partition: int, last_offset: int,
                         timeout_s: float) -> ErrorCode:
    """`wait_completion` in the codes a coordinator's clients expect."""
    outcome = await wait_completion(broker, topic, partition, last_offset, timeout_s)
    if outcome is None:
        return ErrorCode.REQUEST_TIMED_OUT
    if outcome == ErrorCode.NONE:
        return ErrorCode.NONE
    if outcome == ErrorCode.NOT_LEADER_OR_FOLLOWER:
        return ErrorCode.NOT_COORDINATOR
    return ErrorCode.COORDINATOR_NOT_AVAILABLE      # the ISR shrank below min.insync.replicas
