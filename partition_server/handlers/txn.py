"""Transaction APIs: FindCoordinator(key_type=1), InitProducerId (transactional),
AddPartitionsToTxn (v4+: batches and KIP-890 verify-only), AddOffsetsToTxn, TxnOffsetCommit,
EndTxn, WriteTxnMarkers, DescribeTransactions, ListTransactions.

Every coordinator API first checks ownership of the transactional id (NOT_COORDINATOR,
COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE); then `txn/state.py` decides
(INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED, CONCURRENT_TRANSACTIONS, INVALID_TXN_STATE,
INVALID_TRANSACTION_TIMEOUT — see its header). AddPartitionsToTxn also answers
UNKNOWN_TOPIC_OR_PARTITION for partitions not in the metadata (and OPERATION_NOT_ATTEMPTED for
the others of that request, as Kafka). TxnOffsetCommit answers UNKNOWN_TOPIC_OR_PARTITION for a
topic or partition number that does not exist (as OffsetCommit), then checks the *group* coordinator
(NOT_COORDINATOR...), when a generation is given the member (ILLEGAL_GENERATION,
UNKNOWN_MEMBER_ID), and with the transaction coordinator that the group's offsets partition is in
the producer's ongoing transaction under its current epoch (INVALID_PRODUCER_EPOCH for a fenced
producer, INVALID_TXN_STATE without AddOffsetsToTxn, COORDINATOR_LOAD_IN_PROGRESS while the
transaction coordinator can't be asked). WriteTxnMarkers: see `txn/markers.py`.
"""

from __future__ import annotations

import trio

from partition_server.handlers import group, producer_id
from partition_server.group.coordinator import OFFSETS_TOPIC
from partition_server.handlers.context import HandlerContext
from partition_server.txn.verify import RETRIABLE as VERIFY_RETRIABLE, verify
from partition_server.txn.state import TxnState
from wire.errors import ErrorCode
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import RESPONSES


async def handle_find_coordinator(hctx: HandlerContext, req):
    body = req.body
    if body.key_type == 0:
        return await group.handle_find_coordinator(hctx, req)
    cls = RESPONSES[ApiKey.FIND_COORDINATOR]
    if body.key_type != 1:
        err = ErrorCode.INVALID_REQUEST
        if req.api_version >= 4:
            return cls(coordinators=[cls.Coordinator(key=k, node_id=-1, host="", port=-1,
                                                     error_code=err)
                                     for k in body.coordinator_keys])
        return cls(error_code=err, node_id=-1, host="", port=-1)
    keys = list(body.coordinator_keys) if req.api_version >= 4 else [body.key]
    results = [(k, *(await hctx.txn.find(k))) for k in keys]
    if req.api_version >= 4:
        return cls(coordinators=[cls.Coordinator(key=k, node_id=n, host=h, port=p, error_code=e)
                                 for k, e, n, h, p in results])
    _, e, n, h, p = results[0]
    return cls(error_code=e, node_id=n, host=h, port=p)


async def handle_init_producer_id(hctx: HandlerContext, req):
    b = req.body
    if b.transactional_id is None:
        return await producer_id.handle_init_producer_id(hctx, req)
    cls = RESPONSES[ApiKey.INIT_PRODUCER_ID]
    expected_pid = b.producer_id if req.api_version >= 3 else -1
    expected_epoch = b.producer_epoch if req.api_version >= 3 else -1
    err, pid, epoch = await hctx.txn.init_producer_id(b.transactional_id, b.transaction_timeout_ms,
                                                        expected_pid, expected_epoch)
    if err == ErrorCode.PRODUCER_FENCED and req.api_version < 4:
        err = ErrorCode.INVALID_PRODUCER_EPOCH          # PRODUCER_FENCED is new in v4 (KIP-588)
    return cls(error_code=err, producer_id=pid, producer_epoch=epoch)


def _old_fenced(err, version: int, new_from: int):
    return ErrorCode.INVALID_PRODUCER_EPOCH if err == ErrorCode.PRODUCER_FENCED and \
        version < new_from else err


async def _add_one(hctx: HandlerContext, tid, pid, epoch, topics, verify_only: bool,
                   version: int) -> dict:
    """{(topic, partition): error} for one transaction of AddPartitionsToTxn."""
    wanted = [(t.name, p) for t in topics for p in t.partitions]
    unknown = {tp for tp in wanted if hctx.image.partition(*tp) is None}
    if unknown:
        return {tp: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown
                else ErrorCode.OPERATION_NOT_ATTEMPTED for tp in wanted}
    if verify_only:
        return hctx.txn.verify(tid, pid, epoch, wanted)
    err = await hctx.txn.add_partitions(tid, pid, epoch, wanted)
    err = _old_fenced(err, version, 4)
    return {tp: err for tp in wanted}


async def handle_add_partitions_to_txn(hctx: HandlerContext, req):
    cls = RESPONSES[ApiKey.ADD_PARTITIONS_TO_TXN]
    b = req.body

    def topic_results(errors: dict):
        by_topic: dict = {}
        for (t, p), e in errors.items():
            by_topic.setdefault(t, []).append(cls.AddPartitionsToTxnPartitionResult(
                partition_index=p, partition_error_code=e))
        return [cls.AddPartitionsToTxnTopicResult(name=t, results_by_partition=ps)
                for t, ps in by_topic.items()]

    if req.api_version < 4:
        errors = await _add_one(hctx, b.v3_and_below_transactional_id, b.v3_and_below_producer_id,
                                b.v3_and_below_producer_epoch, b.v3_and_below_topics, False,
                                req.api_version)
        return cls(results_by_topic_v3_and_below=topic_results(errors))
    out = []
    for txn in b.transactions:
        errors = await _add_one(hctx, txn.transactional_id, txn.producer_id, txn.producer_epoch,
                                txn.topics, txn.verify_only, req.api_version)
        out.append(cls.AddPartitionsToTxnResult(transactional_id=txn.transactional_id,
                                                topic_results=topic_results(errors)))
    return cls(error_code=0, results_by_transaction=out)


async def handle_add_offsets_to_txn(hctx: HandlerContext, req):
    cls = RESPONSES[ApiKey.ADD_OFFSETS_TO_TXN]
    b = req.body
    if OFFSETS_TOPIC not in hctx.image.topics:
        await hctx.groups.find(b.group_id)            # creates it
        return cls(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE)
    tp = (OFFSETS_TOPIC, hctx.groups.partition_of(b.group_id))
    err = await hctx.txn.add_partitions(b.transactional_id, b.producer_id, b.producer_epoch, [tp])
    return cls(error_code=_old_fenced(err, req.api_version, 2))


async def handle_txn_offset_commit(hctx: HandlerContext, req):
    cls = RESPONSES[ApiKey.TXN_OFFSET_COMMIT]
    b = req.body
    pairs, unknown = group.split_by_metadata(hctx, b.topics)
    entries = [(t.name, p.partition_index, p.committed_offset,
                p.committed_leader_epoch if req.api_version >= 2 else -1, p.committed_metadata)
               for t, p in pairs if (t.name, p.partition_index) not in unknown]
    err = hctx.groups.owns(b.group_id) if entries else ErrorCode.NONE
    if err == ErrorCode.NONE and entries and req.api_version >= 3 and b.generation_id >= 0:
        if b.group_id in hctx.groups.consumer.groups:
            err = hctx.groups.consumer.can_commit(b.group_id, b.member_id, b.generation_id)
        else:
            err = hctx.groups.state.can_commit(b.group_id, b.generation_id, b.member_id)
    if err == ErrorCode.NONE and entries:
        # KIP-890 for offsets too: only a producer whose ongoing transaction holds the group's
        # offsets partition (AddOffsetsToTxn) with its current epoch may commit — a zombie can't
        tp = (OFFSETS_TOPIC, hctx.groups.partition_of(b.group_id))
        verdict = (await verify(hctx, b.transactional_id, b.producer_id, b.producer_epoch,
                                [tp]))[tp]
        err = ErrorCode.INVALID_PRODUCER_EPOCH if verdict in (
            ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH) else \
            ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if verdict in VERIFY_RETRIABLE else verdict
    if err == ErrorCode.NONE and entries:
        err = await hctx.txn.offsets.commit(b.group_id, b.producer_id, b.producer_epoch, entries)
    by_topic: dict = {}
    for t, p in pairs:
        code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if (t.name, p.partition_index) in unknown \
            else err
        by_topic.setdefault(t.name, []).append(cls.TxnOffsetCommitResponsePartition(
            partition_index=p.partition_index, error_code=code))
    return cls(topics=[cls.TxnOffsetCommitResponseTopic(name=t, partitions=ps)
                       for t, ps in by_topic.items()])


async def handle_end_txn(hctx: HandlerContext, req):
    cls = RESPONSES[ApiKey.END_TXN]
    b = req.body
    # v5 (KIP-890 part 2): the coordinator bumps the epoch and answers with the one to use next
    err, pid, epoch = await hctx.txn.end_txn(b.transactional_id, b.producer_id,
                                               b.producer_epoch, b.committed,
                                               bump=req.api_version >= 5)
    return cls(error_code=_old_fenced(err, req.api_version, 2), producer_id=pid,
               producer_epoch=epoch)


async def handle_write_txn_markers(hctx: HandlerContext, req):
    cls = RESPONSES[ApiKey.WRITE_TXN_MARKERS]
    results: dict = {}

    async def one(i, m, topic, p):
        if hctx.image.partition(topic, p) is None:
            results[(i, topic, p)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            return
        results[(i, topic, p)] = await hctx.txn.markers.append_locally(
            topic, p, m.producer_id, m.producer_epoch, m.transaction_result,
            m.coordinator_epoch)

    todo = [(i, m, t.name, p) for i, m in enumerate(req.body.markers) for t in m.topics
            for p in t.partition_indexes]
    if len(todo) == 1:
        await one(*todo[0])         # the usual one marker: no task, no nursery, no extra pass
    else:
        # every marker is appended at once and they replicate together (acks=all each)
        async with trio.open_nursery() as nursery:
            for args in todo:
                nursery.start_soon(one, *args)
    return cls(markers=[cls.WritableTxnMarkerResult(producer_id=m.producer_id, topics=[
        cls.WritableTxnMarkerTopicResult(name=t.name, partitions=[
            cls.WritableTxnMarkerPartitionResult(partition_index=p, error_code=results[(i, t.name, p)])
            for p in t.partition_indexes]) for t in m.topics])
        for i, m in enumerate(req.body.markers)])


async def handle_describe_transactions(hctx: HandlerContext, req):
    cls = RESPONSES[ApiKey.DESCRIBE_TRANSACTIONS]
    out = []
    for tid in req.body.transactional_ids:
        err = hctx.txn.owns(tid)
        meta = hctx.txn.txns.get(tid) if err == ErrorCode.NONE else None
        if err == ErrorCode.NONE and meta is None:
            err = ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
        if err != ErrorCode.NONE:
            out.append(cls.TransactionState(error_code=err, transactional_id=tid,
                                            transaction_state="", transaction_timeout_ms=0,
                                            transaction_start_time_ms=-1, producer_id=-1,
                                            producer_epoch=-1, topics=[]))
            continue
        by_topic: dict = {}
        for t, p in sorted(meta.partitions):
            by_topic.setdefault(t, []).append(p)
        out.append(cls.TransactionState(
            error_code=0, transactional_id=tid, transaction_state=meta.state.value,
            transaction_timeout_ms=meta.timeout_ms, transaction_start_time_ms=meta.txn_start_ms,
            producer_id=meta.producer_id, producer_epoch=meta.producer_epoch,
            topics=[cls.TopicData(topic=t, partitions=ps) for t, ps in by_topic.items()]))
    return cls(transaction_states=out)


async def handle_list_transactions(hctx: HandlerContext, req):
    cls = RESPONSES[ApiKey.LIST_TRANSACTIONS]
    b = req.body
    known = {s.value for s in TxnState}
    states = set(b.state_filters or ())
    pids = set(b.producer_id_filters or ())
    duration = b.duration_filter if req.api_version >= 1 else -1
    import time
    now = int(time.time() * 1000)
    out = []
    for meta in hctx.txn.owned_transactions():
        if states and meta.state.value not in states:
            continue
        if pids and meta.producer_id not in pids:
            continue
        if duration >= 0 and (meta.txn_start_ms < 0 or now - meta.txn_start_ms < duration):
            continue
        out.append(cls.TransactionState(transactional_id=meta.transactional_id,
                                        producer_id=meta.producer_id,
                                        transaction_state=meta.state.value))
    return cls(error_code=0, unknown_state_filters=sorted(states - known), transaction_states=out)


async def handle_describe_producers(hctx: HandlerContext, req):
    """DescribeProducers (KIP-664): the producers of each partition led here, with the start
    offset of their open transaction — what `raftka transactions` needs to find and abort a
    hanging transaction (then WriteTxnMarkers(abort) to the leader).
    Codes per partition: UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER."""
    from partition_server.replication.partition import Role
    cls = RESPONSES[ApiKey.DESCRIBE_PRODUCERS]
    topics = []
    for t in req.body.topics:
        parts = []
        for p in t.partition_indexes:
            out = cls.PartitionResponse(partition_index=p, error_code=0, active_producers=[])
            hosted = hctx.replicas.get(t.name, p)
            if hctx.image.partition(t.name, p) is None:
                out.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif hosted is None or hosted.state.role is not Role.LEADER:
                out.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
            else:
                ps = hosted.producers
                for pid in sorted(set(ps.producers) | set(ps.ongoing)):
                    entry = ps.producers.get(pid)
                    out.active_producers.append(cls.ProducerState(
                        producer_id=pid, producer_epoch=entry.epoch if entry else -1,
                        last_sequence=entry.last_seq if entry else -1, last_timestamp=-1,
                        coordinator_epoch=ps.coordinator_epochs.get(pid, -1),
                        current_txn_start_offset=ps.ongoing.get(pid, -1)))
            parts.append(out)
        topics.append(cls.TopicResponse(name=t.name, partitions=parts))
    return cls(topics=topics)
