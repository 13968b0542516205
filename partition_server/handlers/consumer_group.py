"""KIP-848 consumer-group APIs: ConsumerGroupHeartbeat and ConsumerGroupDescribe.

Ownership checks as for classic groups (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS); a group
id that has live classic members answers GROUP_ID_NOT_FOUND here (and a JoinGroup for a consumer
group answers INCONSISTENT_GROUP_PROTOCOL). The state machine is `group/consumer_group.py`.
"""

from __future__ import annotations

from common.clock import steady_ms
from partition_server.coordinator_append import store_error
from partition_server.handlers.context import HandlerContext
from wire.errors import ErrorCode
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import RESPONSES


def _now() -> int:
    # member sessions and rebalance deadlines: the steady clock (common/clock.py)
    return steady_ms()


def _topic_names(hctx: HandlerContext) -> dict:
    return {t.topic_id: name for name, t in hctx.image.topics.items()}


async def handle_consumer_group_heartbeat(hctx: HandlerContext, req):
    cls = RESPONSES[ApiKey.CONSUMER_GROUP_HEARTBEAT]
    b = req.body
    groups = hctx.groups
    err = groups.owns(b.group_id)
    if err != ErrorCode.NONE:
        return cls(error_code=err, member_epoch=-1)
    if groups.is_classic_group(b.group_id):
        return cls(error_code=ErrorCode.GROUP_ID_NOT_FOUND, member_epoch=-1,
                   error_message=f"group {b.group_id} is a classic group")
    owned = None if b.topic_partitions is None else \
        {tp.topic_id: list(tp.partitions) for tp in b.topic_partitions}
    regex = b.subscribed_topic_regex if req.api_version >= 1 else None
    r = groups.consumer.heartbeat(
        b.group_id, b.member_id, b.member_epoch, instance_id=b.instance_id,
        rebalance_timeout_ms=b.rebalance_timeout_ms, subscribed_names=b.subscribed_topic_names,
        subscribed_regex=regex, server_assignor=b.server_assignor, owned=owned,
        topics=groups.topics_snapshot(), client_id=req.client_id or "",
        client_host="/127.0.0.1", now_ms=_now())
    if r.error == ErrorCode.NONE:
        stored = await groups.persist_consumer_group(b.group_id)
        if stored != ErrorCode.NONE:
            # the member retries with the epoch it had (the coordinator takes that as a lost
            # answer) or rejoins; what it was about to be told is not durable yet
            return cls(error_code=store_error(stored), member_id=r.member_id, member_epoch=-1)
    assignment = None
    if r.assignment is not None:
        assignment = cls.Assignment(topic_partitions=[
            cls.TopicPartitions(topic_id=tid, partitions=sorted(ps))
            for tid, ps in sorted(r.assignment.items(), key=lambda kv: str(kv[0]))])
    return cls(error_code=r.error, error_message=r.message, member_id=r.member_id,
               member_epoch=r.member_epoch,
               heartbeat_interval_ms=groups.consumer.heartbeat_interval_ms,
               assignment=assignment)


async def handle_consumer_group_describe(hctx: HandlerContext, req):
    cls = RESPONSES[ApiKey.CONSUMER_GROUP_DESCRIBE]
    names = _topic_names(hctx)

    def assignment(a):
        return cls.Assignment(topic_partitions=[
            cls.TopicPartitions(topic_id=tid, topic_name=names.get(tid, ""), partitions=sorted(ps))
            for tid, ps in sorted(a.items(), key=lambda kv: str(kv[0]))])
    out = []
    for gid in req.body.group_ids:
        err = hctx.groups.owns(gid)
        g = hctx.groups.consumer.groups.get(gid)
        if err != ErrorCode.NONE:
            out.append(cls.DescribedGroup(group_id=gid, error_code=err))
            continue
        if g is None:
            out.append(cls.DescribedGroup(group_id=gid, error_code=ErrorCode.GROUP_ID_NOT_FOUND,
                                          error_message=f"consumer group {gid} not found"))
            continue
        out.append(cls.DescribedGroup(
            group_id=gid, group_state=g.state, group_epoch=g.group_epoch,
            assignment_epoch=g.assignment_epoch, assignor_name=g.assignor,
            members=[cls.Member(
                member_id=m.member_id, instance_id=m.instance_id, member_epoch=m.member_epoch,
                client_id=m.client_id, client_host=m.client_host,
                subscribed_topic_names=list(m.subscribed_names),
                subscribed_topic_regex=m.subscribed_regex,
                assignment=assignment(m.assigned),
                target_assignment=assignment(g.target.get(m.member_id, {})))
                for m in g.members.values()]))
    return cls(groups=out)
