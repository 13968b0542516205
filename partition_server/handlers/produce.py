"""Produce.

Codes per partition: UNKNOWN_TOPIC_OR_PARTITION (not in metadata), NOT_LEADER_OR_FOLLOWER (not the
leader here), INVALID_REQUIRED_ACKS (acks not in 0/1/-1), UNSUPPORTED_FOR_MESSAGE_FORMAT (v0-2:
only magic v2 is stored), NOT_ENOUGH_REPLICAS (acks=all with ISR < min.insync.replicas, checked
before append), NOT_ENOUGH_REPLICAS_AFTER_APPEND (ISR shrank below it while waiting),
REQUEST_TIMED_OUT (acks=all not replicated within timeout_ms), CORRUPT_MESSAGE / INVALID_RECORD /
INVALID_TIMESTAMP (a record the topic refuses: the batch is not appended and v8+ names each such
record in record_errors, log/record_validation.py) /
MESSAGE_TOO_LARGE / RECORD_LIST_TOO_LARGE (the log's validation), KAFKA_STORAGE_ERROR;
transactional writes the coordinator does not confirm (KIP-890, txn/verify.py): INVALID_TXN_STATE,
INVALID_PRODUCER_EPOCH, or NOT_ENOUGH_REPLICAS while it cannot be asked.
acks=0 gets no response at all.

Two stages (common/pipeline.py): verification and appends happen in request order; the acks=all
wait of one request overlaps the next requests on the same connection.
"""

from __future__ import annotations

import time

from common.pipeline import first_stage_done
from partition_server.handlers.context import HandlerContext
from partition_server.replica_manager import ProduceResult
from partition_server.txn.verify import guard_holds, verify_produce
from wire.errors import ErrorCode
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import RESPONSES


async def handle_produce(hctx: HandlerContext, req):
    body = req.body
    acks = body.acks
    results: dict[tuple[str, int], ProduceResult] = {}
    now = int(time.time() * 1000)
    # KIP-890: transactional writes need the coordinator's word first (txn/verify.py)
    refused, verified = await verify_produce(hctx, body) if req.api_version >= 3 else ({}, {})
    for t in body.topic_data:
        topic_known = t.name in hctx.image.topics
        for p in t.partition_data:
            key = (t.name, p.index)
            if acks not in (0, 1, -1):
                results[key] = ProduceResult(ErrorCode.INVALID_REQUIRED_ACKS)
            elif req.api_version < 3:
                results[key] = ProduceResult(ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT)
            elif not topic_known or hctx.image.partition(t.name, p.index) is None:
                results[key] = ProduceResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            elif key in refused:
                results[key] = ProduceResult(refused[key])
            elif key in verified and not guard_holds(hctx, key, verified[key]):
                # a marker closed the producer's transaction here while the coordinator
                # was asked: the write belongs to a transaction that is over (KIP-890)
                results[key] = ProduceResult(ErrorCode.INVALID_TXN_STATE)
            else:
                # a successful append wakes long-polling fetchers itself (on_change)
                results[key] = hctx.replicas.append_records(t.name, p.index, p.records, acks,
                                                            now)
    # appended in request order: the connection may read its next Produce while this one
    # waits for replication (two-stage produce, common/pipeline.py)
    first_stage_done()
    if acks == -1:
        await _replicated(hctx, [(k[0], k[1], r) for k, r in results.items()
                                 if r.error == ErrorCode.NONE], body.timeout_ms / 1000)
    if acks == 0:
        return None
    cls = RESPONSES[ApiKey.PRODUCE]
    topics: dict[str, list] = {}
    for (topic, partition), r in results.items():
        ok = r.error == ErrorCode.NONE
        topics.setdefault(topic, []).append(cls.PartitionProduceResponse(
            index=partition, error_code=r.error, base_offset=r.base_offset if ok else -1,
            log_append_time_ms=r.log_append_time_ms if ok else -1,
            log_start_offset=r.log_start_offset, error_message=r.message,
            record_errors=[cls.BatchIndexAndErrorMessage(batch_index=i,
                                                         batch_index_error_message=m)
                           for i, m in r.record_errors]))
    return cls(responses=[cls.TopicProduceResponse(name=t, partition_responses=ps)
                          for t, ps in topics.items()])


async def _replicated(hctx: HandlerContext, waiting: list, timeout_s: float) -> None:
    """The acks=all wait: until the high watermark passes each append's last offset, or the
    timeout (REQUEST_TIMED_OUT). `waiting`: (topic, partition, result) of the appends. The
    check runs on every wake of the request's partitions, so it stops at the first partition
    still short (librdkafka's requests name one partition: usually a single lookup)."""
    completion = hctx.replicas.produce_completion

    def replicated() -> bool:
        for topic, partition, r in waiting:
            if completion(topic, partition, r.last_offset) is None:
                return False
        return True

    keys = [(t, p) for t, p, _ in waiting]
    counts = hctx.replicas.produce_waiting      # the ISR loop's first concern (housekeeping)
    for key in keys:
        counts[key] = counts.get(key, 0) + 1
    try:
        await hctx.purgatory.wait_until(keys, replicated, timeout_s)
    finally:
        for key in keys:
            left = counts[key] - 1
            if left:
                counts[key] = left
            else:
                del counts[key]
    for topic, partition, r in waiting:
        outcome = completion(topic, partition, r.last_offset)
        if outcome is None:
            r.error = ErrorCode.REQUEST_TIMED_OUT
        elif outcome != ErrorCode.NONE:
            r.error = outcome
