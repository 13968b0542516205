"""KIP-890 (part 1) server-side transaction verification, on the partition leader.

A transactional batch from a producer with no open transaction on this partition is appended
only if the transaction coordinator confirms the partition is part of that producer's ongoing
transaction (AddPartitionsToTxn v4 with verify_only). Without it, a write delayed past its
transaction's abort would open a "hanging" transaction — or be read as committed later — which
is what Jepsen found in Kafka's protocol. Once a transaction is open here, later batches need
no check (the marker closes it).

The coordinator's answer can be out of date when it arrives: the transaction it confirmed may
have ended meanwhile, its marker appended here while the answer travelled. So the leader takes a
guard per producer before asking (Kafka's VerificationGuard, in the producer state); a marker
voids it, and the write is appended only while its guard holds — checked in the same step as the
append (handlers/produce.py) — else refused INVALID_TXN_STATE.

Answers per partition: NONE (append), INVALID_TXN_STATE (not in the transaction),
INVALID_PRODUCER_EPOCH (fenced producer), NOT_ENOUGH_REPLICAS (coordinator unreachable or
loading: retriable, as Kafka maps it for Produce).
"""

from __future__ import annotations

import logging

from partition_server.handlers.context import HandlerContext
from partition_server.replication.partition import Role
from wire.errors import DecodeError, ErrorCode
from wire.records.batch import CRC_START, TRANSACTIONAL_MASK, RecordBatchHeader

log = logging.getLogger(__name__)

RETRIABLE = (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
             ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.CONCURRENT_TRANSACTIONS,
             ErrorCode.REQUEST_TIMED_OUT)


def _first_transactional(records):
    """(producer id, epoch) if the partition's records are a transactional data batch, else None.
    Only the first batch is looked at: a producer sends one partition's batches under one
    producer id and transactional flag (a mixed request still goes through the log's
    validation and the sequence checks), and this runs on every Produce."""
    if len(records) > CRC_START + 1 and not records[CRC_START + 1] & TRANSACTIONAL_MASK:
        return None                 # the attributes' low byte, read in place: the usual case
    try:
        h = RecordBatchHeader(memoryview(records), 0)
    except DecodeError:
        return None                 # the log's validation reports it
    if h.is_transactional and not h.is_control and h.producer_id >= 0:
        return h.producer_id, h.producer_epoch
    return None


def _map(err: ErrorCode) -> ErrorCode:
    if err == ErrorCode.NONE:
        return err
    if err in RETRIABLE:
        return ErrorCode.NOT_ENOUGH_REPLICAS
    if err in (ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH):
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return ErrorCode.INVALID_TXN_STATE


async def verify_produce(hctx: HandlerContext, body) -> tuple[dict, dict]:
    """({(topic, partition): error} for the partitions of a Produce request that fail
    verification, {(topic, partition): (producer id, guard)} for those verified): partitions
    in neither go ahead. A verified one is appended only if its guard still holds then
    (`guard_holds`): the coordinator answered about a transaction that may have ended while
    the answer travelled."""
    tid = getattr(body, "transactional_id", None)
    needed: dict[tuple, list] = {}          # (pid, epoch) → partitions to verify
    for t in body.topic_data:
        for p in t.partition_data:
            hosted = hctx.replicas.get(t.name, p.index)
            if hosted is None or hosted.state.role is not Role.LEADER or p.records is None \
                    or not len(p.records):
                continue
            found = _first_transactional(p.records)
            if found is None or hosted.producers.in_transaction(found[0]):
                continue
            needed.setdefault(found, []).append((t.name, p.index))
    if not needed:
        return {}, {}
    if tid is None:
        return {tp: ErrorCode.INVALID_TXN_STATE for tps in needed.values() for tp in tps}, {}
    # Kafka's VerificationGuard: taken before asking (all of them: the partitions are hosted
    # now, not necessarily after an await), void once a marker lands
    guards = {tp: (pid, hctx.replicas.get(*tp).producers.start_verification(pid))
              for (pid, _), tps in needed.items() for tp in tps}
    refused = {}
    for (pid, epoch), tps in needed.items():
        for tp, err in (await verify(hctx, tid, pid, epoch, tps)).items():
            if err != ErrorCode.NONE:
                log.info("refusing a transactional write of %s (producer %d epoch %d) to %s-%d: %s",
                         tid, pid, epoch, tp[0], tp[1], err.name)
                refused[tp] = _map(err)
                # its guard stays: another verification of the producer may share it (a
                # fenced instance's late write refused while the new instance's is verified)
                del guards[tp]
    return refused, guards


def guard_holds(hctx: HandlerContext, key, verified: tuple) -> bool:
    """Whether a partition verified with `verified` (producer id, guard) may take the write now
    (no await between this and the append)."""
    hosted = hctx.replicas.get(*key)
    return hosted is not None and hosted.producers.verification_holds(*verified)


async def verify(hctx: HandlerContext, tid: str, pid: int, epoch: int, tps: list) -> dict:
    """Ask the coordinator of `tid` (ourselves or over the wire)."""
    txn = hctx.txn
    if txn.owns(tid) == ErrorCode.NONE:
        return txn.verify(tid, pid, epoch, tps)
    p = hctx.image.partition("__transaction_state", txn.partition_of(tid)) \
        if "__transaction_state" in hctx.image.topics else None
    if p is None or p.leader < 0 or p.leader == hctx.broker_id:
        return {tp: ErrorCode.COORDINATOR_NOT_AVAILABLE for tp in tps}
    return await txn.verifications.verify(p.leader, tid, pid, epoch, tps)
