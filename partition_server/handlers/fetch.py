"""Fetch, ListOffsets, OffsetForLeaderEpoch, DeleteRecords.

Fetch (consumers and followers): whole batches only, at least one batch in the response even if
larger than the limits (KIP-74), at most the broker's `fetch.max.bytes` whatever a request asks
(`fetch_limits`), consumers never see beyond the high watermark; long-polls until
`min_bytes` are available or `max_wait_ms` passes, woken by appends and high-watermark moves.
Incremental fetch sessions (KIP-227, v7+) are kept in `hctx.fetch_sessions`
(partition_server/fetch_session.py); a follower's session fetch reads only the partitions that
changed (handlers/fetch_follower.py); session errors are top-level FETCH_SESSION_ID_NOT_FOUND /
INVALID_FETCH_SESSION_EPOCH. Codes per partition: NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH,
UNKNOWN_LEADER_EPOCH, OFFSET_OUT_OF_RANGE, UNKNOWN_TOPIC_OR_PARTITION (UNKNOWN_TOPIC_ID from v13,
where topics are named by id), KAFKA_STORAGE_ERROR.
"""

from __future__ import annotations

import time

from common.clock import steady_ms
from partition_server.config import config_value
from partition_server.fetch_session import FetchContext
from partition_server.handlers.context import HandlerContext
from partition_server.handlers.fetch_follower import (fetch_in_session, leader_holds,
                                                      leader_throttle)
from partition_server.replica_manager import FetchResult, check_leader_epoch
from partition_server.replication.partition import Role
from wire.errors import ErrorCode, KafkaError
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import RESPONSES


def _requested(req):
    """[((topic key, partition), partition request)]; the key is the name before v13, the id
    from v13."""
    out = []
    for t in req.body.topics:
        key = t.topic if req.api_version < 13 else t.topic_id
        for p in t.partitions:
            out.append(((key, p.partition), p))
    return out


def _forgotten(req):
    if req.api_version < 7:
        return []
    return [(t.topic if req.api_version < 13 else t.topic_id, p)
            for t in req.body.forgotten_topics_data or [] for p in t.partitions]


def _name(hctx: HandlerContext, req, key):
    return key[0] if req.api_version < 13 else hctx.image.topic_names.get(key[0])


def _available(hctx: HandlerContext, topic, p, replica_id, isolation_level=0) -> bool:
    hosted = hctx.replicas.get(topic, p.partition)
    if hosted is None or hosted.state.role is not Role.LEADER:
        return True                         # an error answer is ready now
    limit = hosted.log.log_end_offset if replica_id >= 0 else hosted.last_stable_offset() \
        if isolation_level == 1 else hosted.state.high_watermark
    if replica_id >= 0 and limit != p.fetch_offset and \
            leader_holds(hctx, (topic, p.partition), replica_id, steady_ms()):
        return False                        # throttled: wait out max_wait, do not spin
    return limit != p.fetch_offset


def fetch_limits(hctx: HandlerContext, body) -> tuple[int, int]:
    """(max_bytes, min_bytes) of a Fetch: the broker's `fetch.max.bytes` caps what any fetch
    asks for (Kafka's KafkaApis; a follower's too), and min_bytes never exceeds that cap, or a
    fetch asking more than it may hold could never be satisfied before max_wait_ms."""
    max_bytes = min(body.max_bytes, config_value(hctx.config, "fetch.max.bytes"))
    return max_bytes, min(body.min_bytes, max_bytes)


async def handle_fetch(hctx: HandlerContext, req):
    body = req.body
    replica_id = body.replica_id if req.api_version < 15 else body.replica_state.replica_id
    max_bytes, min_bytes = fetch_limits(hctx, body)
    now = steady_ms()   # fetch sessions and followers' caught-up times: durations
    if req.api_version >= 7:
        ctx = hctx.fetch_sessions.new_context(body.session_id, body.session_epoch,
                                                _requested(req), _forgotten(req), now)
    else:
        ctx = FetchContext(partitions=_requested(req))
    if ctx.error != ErrorCode.NONE:
        return RESPONSES[ApiKey.FETCH](error_code=ctx.error, session_id=0, responses=[])
    if replica_id >= 0 and ctx.session is not None and req.api_version < 13:
        # a follower's session: read only what changed (handlers/fetch_follower.py)
        return await fetch_in_session(hctx, req, ctx, replica_id, now, (max_bytes, min_bytes),
                                      lambda results, sid: _response(req, results, sid))
    parts = [(_name(hctx, req, key), key, p) for key, p in ctx.partitions]
    unknown = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if req.api_version < 13 else \
        ErrorCode.UNKNOWN_TOPIC_ID

    # read_committed (1): bounded by the last stable offset, with the aborted transactions
    isolation = body.isolation_level if req.api_version >= 4 else 0

    def gather():
        remaining = max_bytes
        results = []
        for topic, key, p in parts:
            if topic is None or topic not in hctx.image.topics:
                results.append((key, FetchResult(unknown)))
                continue
            if hctx.image.partition(topic, p.partition) is None:   # a known topic, no such number
                results.append((key, FetchResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)))
                continue
            limit = max(0, min(p.partition_max_bytes, remaining))
            try:
                res = hctx.replicas.read(topic, p.partition, p.fetch_offset, limit,
                                           p.current_leader_epoch, replica_id,
                                           p.last_fetched_epoch, now,
                                           min_one=remaining == max_bytes,
                                           isolation_level=isolation)
            except KafkaError as exc:
                res = FetchResult(exc.error_code)
            if replica_id >= 0:
                key = (topic, p.partition)
                res = leader_throttle(hctx, key, hctx.replicas.get(*key), replica_id, res, now)
            remaining -= res.size
            results.append((key, res))
        return results

    results = gather()
    if replica_id >= 0:
        _notify_all_parts(hctx, parts)
    total = sum(r.size for _, r in results)
    errors = any(r.error != ErrorCode.NONE for _, r in results)
    if total < min_bytes and not errors and body.max_wait_ms > 0:
        keys = [(t, p.partition) for t, _, p in parts]
        await hctx.purgatory.wait_until(
            keys, lambda: any(_available(hctx, t, p, replica_id, isolation) for t, _, p in parts),
            body.max_wait_ms / 1000)
        now = steady_ms()
        results = gather()
        if replica_id >= 0:
            _notify_all_parts(hctx, parts)
    return _response(req, ctx.select(results), ctx.session_id, hctx.image)


def _notify_all_parts(hctx: HandlerContext, parts) -> None:
    """A sessionless follower fetch: the high watermarks may have moved (acks=all produces
    wait on them)."""
    for topic, _, p in parts:
        hctx.purgatory.notify_high_watermark((topic, p.partition))


def _response(req, results, session_id: int, image=None):
    cls = RESPONSES[ApiKey.FETCH]
    read_committed = req.body.isolation_level == 1
    topics: dict = {}
    for (topic_key, partition), r in results:
        pd = cls.PartitionData(partition_index=partition, error_code=r.error,
                               high_watermark=r.high_watermark,
                               last_stable_offset=r.last_stable_offset,
                               log_start_offset=r.log_start_offset,
                               aborted_transactions=[
                                   cls.AbortedTransaction(producer_id=pid, first_offset=first)
                                   for pid, first in r.aborted_transactions or ()]
                               if read_committed else None,
                               preferred_read_replica=-1,
                               records=(r.records[0] if len(r.records) == 1 else
                                        b"".join(x.read() for x in r.records)) if r.records else b"")
        if r.diverging_epoch is not None:
            pd.diverging_epoch = cls.EpochEndOffset(epoch=r.diverging_epoch[0],
                                                    end_offset=r.diverging_epoch[1])
        if r.error in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH) and \
                req.api_version >= 12:
            pd.current_leader = cls.LeaderIdAndEpoch(leader_id=r.leader[0], leader_epoch=r.leader[1])
        topics.setdefault(topic_key, []).append(pd)
    out = []
    for key, ps in topics.items():
        if req.api_version < 13:
            out.append(cls.FetchableTopicResponse(topic=key or "", partitions=ps))
        else:
            out.append(cls.FetchableTopicResponse(topic_id=key, partitions=ps))
    resp = cls(error_code=0, session_id=session_id, responses=out)
    if req.api_version >= 16 and image is not None:
        resp.node_endpoints = _leader_endpoints(cls, results, image)
    return resp


def _leader_endpoints(cls, results, image) -> list:
    """KIP-951 (v16+): where the new leaders named in current_leader listen, so a client can
    move there without a Metadata round trip."""
    leaders = {r.leader[0] for _, r in results if r.leader is not None and r.error in (
        ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH)}
    return [cls.NodeEndpoint(node_id=b.broker_id, host=b.host, port=b.port, rack=b.rack)
            for b in (image.brokers.get(n) for n in sorted(leaders) if n >= 0) if b is not None]


def _not_led_here(hctx: HandlerContext, topic: str, partition: int, hosted) -> ErrorCode:
    """Kafka's ReplicaManager.getPartitionOrException: a partition the metadata does not have (an
    unknown topic, or a partition number past the topic's count) is UNKNOWN_TOPIC_OR_PARTITION,
    which clients do not retry; one that exists but is not led here is NOT_LEADER_OR_FOLLOWER,
    which sends them to refresh their metadata and try again."""
    if hctx.image.partition(topic, partition) is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if hosted is None or hosted.state.role is not Role.LEADER:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    return ErrorCode.NONE


async def handle_list_offsets(hctx: HandlerContext, req):
    """Earliest (-2), latest (-1), max timestamp (-3), or the first offset at/after a timestamp.
    Codes: NOT_LEADER_OR_FOLLOWER, FENCED/UNKNOWN_LEADER_EPOCH, UNKNOWN_TOPIC_OR_PARTITION,
    OFFSET_NOT_AVAILABLE (a new leader whose high watermark has not reached its epoch start).
    """
    cls = RESPONSES[ApiKey.LIST_OFFSETS]
    topics = []
    for t in req.body.topics:
        parts = []
        for p in t.partitions:
            out = cls.ListOffsetsPartitionResponse(partition_index=p.partition_index)
            hosted = hctx.replicas.get(t.name, p.partition_index)
            if (code := _not_led_here(hctx, t.name, p.partition_index, hosted)) != ErrorCode.NONE:
                out.error_code = code
            elif (code := check_leader_epoch(hosted.state, p.current_leader_epoch)) != ErrorCode.NONE:
                out.error_code = code
            elif req.body.replica_id < 0 and not hosted.state.offsets_available():
                out.error_code = ErrorCode.OFFSET_NOT_AVAILABLE     # retriable: a new leader
            else:
                # read_committed (v2+): "latest" is the last stable offset, as in Kafka
                committed = req.api_version >= 2 and req.body.isolation_level == 1
                _lookup(hosted, p.timestamp, out, req.api_version,
                        hosted.last_stable_offset() if committed else None)
            parts.append(out)
        topics.append(cls.ListOffsetsTopicResponse(name=t.name, partitions=parts))
    return cls(topics=topics)


def _lookup(hosted, timestamp, out, version, bound=None) -> None:
    plog, hw = hosted.log, hosted.state.high_watermark if bound is None else bound
    out.leader_epoch = hosted.state.leader_epoch
    if timestamp == -1:
        found = (hw, -1)
    else:
        found = plog.offset_for_timestamp(timestamp)
        if found is not None and found[0] >= hw and timestamp != -2:
            found = None                      # not yet committed: invisible to clients
    if version == 0:
        out.old_style_offsets = [found[0]] if found else []
        return
    out.offset, out.timestamp = found if found else (-1, -1)
    if found and timestamp >= 0:
        out.leader_epoch = plog.epoch_cache.epoch_for_offset(found[0])


async def handle_offset_for_leader_epoch(hctx: HandlerContext, req):
    cls = RESPONSES[ApiKey.OFFSET_FOR_LEADER_EPOCH]
    topics = []
    for t in req.body.topics:
        parts = []
        for p in t.partitions:
            out = cls.EpochEndOffset(partition=p.partition)
            hosted = hctx.replicas.get(t.topic, p.partition)
            if (code := _not_led_here(hctx, t.topic, p.partition, hosted)) != ErrorCode.NONE:
                out.error_code = code
            elif (code := check_leader_epoch(hosted.state, p.current_leader_epoch)) != ErrorCode.NONE:
                out.error_code = code
            else:
                out.leader_epoch, out.end_offset = hosted.log.end_offset_for(p.leader_epoch)
            parts.append(out)
        topics.append(cls.OffsetForLeaderTopicResult(topic=t.topic, partitions=parts))
    return cls(topics=topics)


async def handle_delete_records(hctx: HandlerContext, req):
    """Raise the log start offset (offset -1 = the high watermark). Codes: OFFSET_OUT_OF_RANGE
    above the high watermark, NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION (no such topic
    or partition number)."""
    cls = RESPONSES[ApiKey.DELETE_RECORDS]
    topics = []
    for t in req.body.topics:
        parts = []
        for p in t.partitions:
            out = cls.DeleteRecordsPartitionResult(partition_index=p.partition_index, low_watermark=-1)
            hosted = hctx.replicas.get(t.name, p.partition_index)
            if (code := _not_led_here(hctx, t.name, p.partition_index, hosted)) != ErrorCode.NONE:
                out.error_code = code
            else:
                hw = hosted.state.high_watermark
                offset = hw if p.offset == -1 else p.offset
                if offset > hw or offset < 0:
                    out.error_code = ErrorCode.OFFSET_OUT_OF_RANGE
                else:
                    out.low_watermark = hosted.log.delete_records_before(offset, int(time.time() * 1000))
                    hctx.purgatory.notify((t.name, p.partition_index))     # the log start moved
            parts.append(out)
        topics.append(cls.DeleteRecordsTopicResult(name=t.name, partitions=parts))
    return cls(topics=topics)
