"""Consumer-group APIs: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
OffsetCommit, OffsetFetch, ListGroups, DescribeGroups, DeleteGroups, OffsetDelete.

Every group API first checks that this broker coordinates the group (NOT_COORDINATOR,
COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE); then the pure state machine in
`group/state.py` decides (see its header for the codes). JoinGroup and SyncGroup may wait for the
rest of the group, bounded by the rebalance timeout.
"""

from __future__ import annotations

import time

from common.clock import steady_ms
from common.request_metrics import add_remote_time
from partition_server.group.state import GroupState
from partition_server.handlers.context import HandlerContext
from wire.errors import ErrorCode
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import RESPONSES


def _now() -> int:
    # member sessions and rebalance deadlines: the steady clock (common/clock.py)
    return steady_ms()


async def _parked(waiting):
    """A JoinGroup/SyncGroup parked until the rebalance completes: Kafka's DelayedJoin and
    DelayedSync purgatories, so RemoteTimeMs (request_metrics.py)."""
    started = time.perf_counter()
    try:
        return await waiting
    finally:
        add_remote_time(time.perf_counter() - started)


async def handle_find_coordinator(hctx: HandlerContext, req):
    cls = RESPONSES[ApiKey.FIND_COORDINATOR]
    body = req.body
    keys = list(body.coordinator_keys) if req.api_version >= 4 else [body.key]
    results = []
    for key in keys:
        if body.key_type != 0:
            results.append((key, ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1,
                            "transaction coordinators are not implemented yet"))
            continue
        err, node, host, port = await hctx.groups.find(key)
        results.append((key, err, node, host, port, None))
    if req.api_version >= 4:
        return cls(coordinators=[cls.Coordinator(key=k, node_id=n, host=h, port=p, error_code=e,
                                                 error_message=m) for k, e, n, h, p, m in results])
    _, e, n, h, p, m = results[0]
    return cls(error_code=e, error_message=m, node_id=n, host=h, port=p)


async def handle_join_group(hctx: HandlerContext, req):
    cls = RESPONSES[ApiKey.JOIN_GROUP]
    b = req.body
    err = hctx.groups.owns(b.group_id)
    if err == ErrorCode.NONE and hctx.groups.is_consumer_group(b.group_id):
        err = ErrorCode.INCONSISTENT_GROUP_PROTOCOL      # a KIP-848 group with live members
    if err != ErrorCode.NONE:
        return cls(error_code=err, member_id=b.member_id)
    result, effects, member_id = hctx.groups.state.join(
        b.group_id, b.member_id, b.group_instance_id, req.client_id or "", "/127.0.0.1",
        b.session_timeout_ms, b.rebalance_timeout_ms if req.api_version >= 1 else b.session_timeout_ms,
        b.protocol_type, [(p.name, p.metadata) for p in b.protocols], req.api_version >= 4, _now())
    hctx.groups.deliver(effects)
    if result is None:
        timeout = (b.rebalance_timeout_ms if req.api_version >= 1 else b.session_timeout_ms) / 1000
        result = await _parked(hctx.groups.wait_for("join", b.group_id, member_id, timeout + 5))
        if result is None:
            return cls(error_code=ErrorCode.REBALANCE_IN_PROGRESS, member_id=member_id)
        if isinstance(result, ErrorCode):
            return cls(error_code=result, member_id=member_id)
    return cls(error_code=result.error, generation_id=result.generation_id,
               protocol_type=result.protocol_type, protocol_name=result.protocol_name,
               leader=result.leader, member_id=result.member_id,
               members=[cls.JoinGroupResponseMember(member_id=m, group_instance_id=i, metadata=md)
                        for m, i, md in result.members])


async def handle_sync_group(hctx: HandlerContext, req):
    cls = RESPONSES[ApiKey.SYNC_GROUP]
    b = req.body
    err = hctx.groups.owns(b.group_id)
    if err != ErrorCode.NONE:
        return cls(error_code=err)
    assignments = {a.member_id: a.assignment for a in b.assignments}
    result, effects = hctx.groups.state.sync(b.group_id, b.generation_id, b.member_id, assignments,
                                               _now())
    hctx.groups.deliver(effects)
    if result is None:
        g = hctx.groups.state.groups.get(b.group_id)
        timeout = max((m.rebalance_timeout_ms for m in g.members.values()), default=30000) / 1000 if g else 30
        result = await _parked(hctx.groups.wait_for("sync", b.group_id, b.member_id, timeout + 5))
        if result is None:
            return cls(error_code=ErrorCode.REBALANCE_IN_PROGRESS)
        if isinstance(result, ErrorCode):
            return cls(error_code=result)
    return cls(error_code=result.error, protocol_type=result.protocol_type,
               protocol_name=result.protocol_name, assignment=result.assignment)


async def handle_heartbeat(hctx: HandlerContext, req):
    cls = RESPONSES[ApiKey.HEARTBEAT]
    b = req.body
    err = hctx.groups.owns(b.group_id)
    if err != ErrorCode.NONE:
        return cls(error_code=err)
    return cls(error_code=hctx.groups.state.heartbeat(b.group_id, b.generation_id, b.member_id, _now()))


async def handle_leave_group(hctx: HandlerContext, req):
    cls = RESPONSES[ApiKey.LEAVE_GROUP]
    b = req.body
    err = hctx.groups.owns(b.group_id)
    if err != ErrorCode.NONE:
        return cls(error_code=err)
    members = [(b.member_id, None)] if req.api_version < 3 else \
        [(m.member_id, m.group_instance_id) for m in b.members]
    codes, effects = hctx.groups.state.leave(b.group_id, members, _now())
    hctx.groups.deliver(effects)
    if req.api_version < 3:
        return cls(error_code=codes[0])
    return cls(error_code=0, members=[cls.MemberResponse(member_id=m, group_instance_id=i, error_code=c)
                                      for (m, i), c in zip(members, codes)])


def split_by_metadata(hctx: HandlerContext, topics) -> tuple[list, set]:
    """(topic, partition) pairs of an offset commit, in request order, and those of them the
    metadata does not have. As Kafka's KafkaApis (handleOffsetCommitRequest and
    handleTxnOffsetCommitRequest): a topic or partition number that does not exist is answered
    UNKNOWN_TOPIC_OR_PARTITION and never stored, before the group is even looked at; the rest are
    committed as usual."""
    pairs = [(t, p) for t in topics for p in t.partitions]
    unknown = {(t.name, p.partition_index) for t, p in pairs
               if hctx.image.partition(t.name, p.partition_index) is None}
    return pairs, unknown


async def handle_offset_commit(hctx: HandlerContext, req):
    """Codes per partition: UNKNOWN_TOPIC_OR_PARTITION (no such topic or partition number), else
    the group's: NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, ILLEGAL_GENERATION,
    UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS, STALE_MEMBER_EPOCH, ..."""
    cls = RESPONSES[ApiKey.OFFSET_COMMIT]
    b = req.body
    pairs, unknown = split_by_metadata(hctx, b.topics)
    entries = [(t.name, p.partition_index, p.committed_offset, p.committed_leader_epoch,
                p.committed_metadata) for t, p in pairs if (t.name, p.partition_index) not in unknown]
    err = hctx.groups.owns(b.group_id) if entries else ErrorCode.NONE
    if entries and err == ErrorCode.NONE:
        generation = b.generation_id_or_member_epoch if req.api_version >= 1 else -1
        if b.group_id in hctx.groups.consumer.groups:
            err = hctx.groups.consumer.can_commit(b.group_id, b.member_id, generation)
        else:
            err = hctx.groups.state.can_commit(b.group_id, generation, b.member_id)
    if entries and err == ErrorCode.NONE:
        err = await hctx.groups.store_offsets(b.group_id, entries)
    by_topic: dict = {}
    for t, p in pairs:
        code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if (t.name, p.partition_index) in unknown \
            else err
        by_topic.setdefault(t.name, []).append(cls.OffsetCommitResponsePartition(
            partition_index=p.partition_index, error_code=code))
    return cls(topics=[cls.OffsetCommitResponseTopic(name=t, partitions=ps)
                       for t, ps in by_topic.items()])


def _fetch_group(hctx: HandlerContext, group_id, topics, require_stable=False):
    """[(topic, [(partition, offset, epoch, metadata, error)])], group error. `require_stable`
    (v7+, KIP-447): a partition with a pending transactional commit answers
    UNSTABLE_OFFSET_COMMIT (retriable) instead of an offset that is about to change."""
    err = hctx.groups.owns(group_id)
    if err != ErrorCode.NONE:
        return [], err
    if topics is None:
        wanted: dict = {}
        for (t, p) in hctx.groups.offsets.get(group_id, {}):
            wanted.setdefault(t, []).append(p)
        topics = sorted(wanted.items())
    out = []
    for name, partitions in topics:
        parts = []
        for p in partitions:
            c = hctx.groups.committed(group_id, name, p)
            if require_stable and hctx.txn.offsets.has_pending(group_id, name, p):
                parts.append((p, -1, -1, "", ErrorCode.UNSTABLE_OFFSET_COMMIT))
                continue
            parts.append((p, c[0], c[1], c[2], 0) if c else (p, -1, -1, "", 0))
        out.append((name, parts))
    return out, ErrorCode.NONE


async def handle_offset_fetch(hctx: HandlerContext, req):
    cls = RESPONSES[ApiKey.OFFSET_FETCH]
    b = req.body
    if req.api_version < 8:
        topics = None if b.topics is None else [(t.name, list(t.partition_indexes)) for t in b.topics]
        out, err = _fetch_group(hctx, b.group_id, topics, req.api_version >= 7 and b.require_stable)
        return cls(error_code=err, topics=[cls.OffsetFetchResponseTopic(name=n, partitions=[
            cls.OffsetFetchResponsePartition(partition_index=p, committed_offset=o,
                                             committed_leader_epoch=e, metadata=m, error_code=x)
            for p, o, e, m, x in parts]) for n, parts in out])
    groups = []
    for g in b.groups:
        topics = None if g.topics is None else [(t.name, list(t.partition_indexes)) for t in g.topics]
        out, err = _fetch_group(hctx, g.group_id, topics, b.require_stable)
        groups.append(cls.OffsetFetchResponseGroup(group_id=g.group_id, error_code=err, topics=[
            cls.OffsetFetchResponseTopics(name=n, partitions=[cls.OffsetFetchResponsePartitions(
                partition_index=p, committed_offset=o, committed_leader_epoch=e, metadata=m,
                error_code=x) for p, o, e, m, x in parts]) for n, parts in out]))
    return cls(groups=groups)


async def handle_list_groups(hctx: HandlerContext, req):
    cls = RESPONSES[ApiKey.LIST_GROUPS]
    states = set(req.body.states_filter) if req.api_version >= 4 else set()
    out = []
    for gid, g in sorted(hctx.groups.state.groups.items()):
        if hctx.groups.owns(gid) != ErrorCode.NONE:
            continue
        if states and g.state.value not in states:
            continue
        out.append(cls.ListedGroup(group_id=gid, protocol_type=g.protocol_type or "",
                                   group_state=g.state.value, group_type="classic"))
    # A group with committed offsets but no group state (a consumer that only assigns and
    # commits, or one whose state expired) is Empty, as in Kafka.
    empty = GroupState.EMPTY.value
    for gid in sorted(hctx.groups.offsets):
        if gid in hctx.groups.state.groups or hctx.groups.is_consumer_group(gid) or \
                hctx.groups.owns(gid) != ErrorCode.NONE or (states and empty not in states):
            continue
        out.append(cls.ListedGroup(group_id=gid, protocol_type="", group_state=empty,
                                   group_type="classic"))
    types = set(req.body.types_filter) if req.api_version >= 5 else set()
    for gid, g in sorted(hctx.groups.consumer.groups.items()):
        if hctx.groups.owns(gid) != ErrorCode.NONE or (states and g.state not in states):
            continue
        out.append(cls.ListedGroup(group_id=gid, protocol_type="consumer", group_state=g.state,
                                   group_type="consumer"))
    if types:
        out = [g for g in out if g.group_type in types]
    return cls(error_code=0, groups=out)


async def handle_describe_groups(hctx: HandlerContext, req):
    cls = RESPONSES[ApiKey.DESCRIBE_GROUPS]
    out = []
    for gid in req.body.groups:
        err = hctx.groups.owns(gid)
        g = hctx.groups.state.groups.get(gid)
        if err != ErrorCode.NONE:
            out.append(cls.DescribedGroup(group_id=gid, error_code=err))
            continue
        if g is None and hctx.groups.is_consumer_group(gid):
            out.append(cls.DescribedGroup(group_id=gid, error_code=ErrorCode.GROUP_ID_NOT_FOUND))
            continue
        if g is None:
            state = GroupState.EMPTY if hctx.groups.offsets.get(gid) else GroupState.DEAD
            out.append(cls.DescribedGroup(group_id=gid, group_state=state.value))
            continue
        out.append(cls.DescribedGroup(
            group_id=gid, group_state=g.state.value, protocol_type=g.protocol_type or "",
            protocol_data=g.protocol_name or "",
            members=[cls.DescribedGroupMember(
                member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
                client_host=m.client_host,
                member_metadata=dict(m.protocols).get(g.protocol_name, b""),
                member_assignment=m.assignment) for m in g.members.values()]))
    return cls(groups=out)


async def handle_delete_groups(hctx: HandlerContext, req):
    cls = RESPONSES[ApiKey.DELETE_GROUPS]
    results = []
    for gid in req.body.groups_names:
        err = hctx.groups.owns(gid)
        if err == ErrorCode.NONE:
            err = await hctx.groups.delete_group(gid)
        results.append(cls.DeletableGroupResult(group_id=gid, error_code=err))
    return cls(results=results)


async def handle_offset_delete(hctx: HandlerContext, req):
    cls = RESPONSES[ApiKey.OFFSET_DELETE]
    b = req.body
    parts = [(t.name, p.partition_index) for t in b.topics for p in t.partitions]
    err = hctx.groups.owns(b.group_id)
    per_partition: dict = {}
    if err == ErrorCode.NONE:
        err, per_partition = await hctx.groups.delete_offsets(b.group_id, parts)
    if err != ErrorCode.NONE:
        return cls(error_code=err)
    by_topic: dict = {}
    for (t, p), e in per_partition.items():
        by_topic.setdefault(t, []).append(cls.OffsetDeleteResponsePartition(partition_index=p,
                                                                           error_code=e))
    return cls(error_code=0, topics=[cls.OffsetDeleteResponseTopic(name=t, partitions=ps)
                                     for t, ps in by_topic.items()])
