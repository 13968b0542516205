"""GroupMember against a scripted fake cluster: the join/sync/heartbeat/commit error paths
(MEMBER_ID_REQUIRED retry, leader assignment, rebalance and fencing codes, coordinator moves,
typed fatal errors)."""

from __future__ import annotations

import types

import pytest

from clients.consumer.assignors import (Subscription, decode_assignment, encode_assignment,
                                        encode_subscription, get_assignor)
from clients.consumer.assignors.protocol import Assignment
from clients.consumer.group.classic_member import GroupMember
from clients.consumer.group.coordinator import CommitFailedError
from wire.errors import ErrorCode, KafkaError
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import RESPONSES


class FakeCluster:
    def __init__(self, responses: dict[int, list]):
        self.responses = responses
        self.sent: list = []
        self.forgotten = 0
        self.metadata = types.SimpleNamespace(
            brokers={1: object()},
            topics={"t": types.SimpleNamespace(partitions={0: 0, 1: 0, 2: 0})})

    async def find_coordinator(self, group):
        return 1

    def forget_coordinator(self, group):
        self.forgotten += 1

    async def refresh_metadata(self, topics=None, force=False, all_topics=False):
        return self.metadata

    async def drop_connection(self, node, channel="default"):
        pass

    async def call(self, node, message, **kw):
        self.sent.append(message)
        answer = self.responses[message.API_KEY].pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def call_versioned(self, node, build, api_key, **kw):
        return await self.call(node, build(3), **kw)


def join_resp(code=0, member_id="m1", generation=1, leader="m1", members=(), protocol="range"):
    cls = RESPONSES[ApiKey.JOIN_GROUP]
    return cls(error_code=code, member_id=member_id, generation_id=generation, leader=leader,
               protocol_type="consumer", protocol_name=protocol,
               members=[cls.JoinGroupResponseMember(member_id=m, group_instance_id=None,
                                                    metadata=md) for m, md in members])


def sync_resp(code=0, partitions=()):
    return RESPONSES[ApiKey.SYNC_GROUP](error_code=code, protocol_type="consumer", protocol_name="range",
                         assignment=encode_assignment(Assignment(list(partitions))))


def member(cluster) -> GroupMember:
    return GroupMember(cluster, "g", [get_assignor("range"), get_assignor("cooperative-sticky")],
                       retry_backoff_ms=1)


def sub(topics):
    return encode_subscription(Subscription(topics))


async def test_member_id_required_then_leader_assigns():
    fc = FakeCluster({ApiKey.JOIN_GROUP: [join_resp(ErrorCode.MEMBER_ID_REQUIRED, member_id="m1"),
                           join_resp(members=[("m1", sub(["t"])), ("m2", sub(["t"]))])],
                      ApiKey.SYNC_GROUP: [sync_resp(partitions=[("t", 0), ("t", 1)])]})
    m = member(fc)
    got = await m.join(["t"], [], deadline=1e9)
    assert got == [("t", 0), ("t", 1)]
    first, second, sync = fc.sent
    assert first.member_id == "" and second.member_id == "m1"       # KIP-394 retry
    assert [p.name for p in first.protocols] == ["range", "cooperative-sticky"]
    assignments = {a.member_id: decode_assignment(a.assignment).partitions
                   for a in sync.assignments}
    assert assignments == {"m1": [("t", 0), ("t", 1)], "m2": [("t", 2)]}
    assert m.is_leader and m.stable and not m.rejoin_needed and m.generation == 1
    assert m.assigned_partition_counts == {"t": 3}


async def test_follower_sends_no_assignments_and_sync_rebalance_means_rejoin():
    fc = FakeCluster({ApiKey.JOIN_GROUP: [join_resp(member_id="m2", leader="m1")],
                      ApiKey.SYNC_GROUP: [sync_resp(ErrorCode.REBALANCE_IN_PROGRESS)]})
    m = member(fc)
    assert await m.join(["t"], [], deadline=1e9) is None
    assert fc.sent[1].assignments == []
    assert m.rejoin_needed and not m.stable and m.member_id == "m2"


async def test_unknown_member_and_coordinator_moves_are_retried():
    fc = FakeCluster({ApiKey.JOIN_GROUP: [join_resp(ErrorCode.UNKNOWN_MEMBER_ID, member_id=""),
                           join_resp(ErrorCode.NOT_COORDINATOR),
                           join_resp(ErrorCode.REBALANCE_IN_PROGRESS),
                           join_resp(member_id="m9", leader="m1")],
                      ApiKey.SYNC_GROUP: [sync_resp(partitions=[("t", 2)])]})
    m = member(fc)
    m.member_id = "stale"
    assert await m.join(["t"], [], deadline=1e9) == [("t", 2)]
    assert [r.member_id for r in fc.sent[:4]] == ["stale", "", "", ""]
    assert fc.forgotten == 1


@pytest.mark.parametrize("code", [ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                                  ErrorCode.GROUP_AUTHORIZATION_FAILED,
                                  ErrorCode.INVALID_SESSION_TIMEOUT])
async def test_fatal_join_errors_raise_typed(code):
    fc = FakeCluster({ApiKey.JOIN_GROUP: [join_resp(code)]})
    with pytest.raises(KafkaError) as info:
        await member(fc).join(["t"], [], deadline=1e9)
    assert info.value.code == code


async def test_heartbeat_codes():
    fc = FakeCluster({ApiKey.HEARTBEAT: [RESPONSES[ApiKey.HEARTBEAT](error_code=0),
                           RESPONSES[ApiKey.HEARTBEAT](error_code=ErrorCode.REBALANCE_IN_PROGRESS),
                           RESPONSES[ApiKey.HEARTBEAT](error_code=ErrorCode.UNKNOWN_MEMBER_ID)]})
    m = member(fc)
    m.member_id, m.generation, m.stable, m.rejoin_needed = "m1", 3, True, False
    assert await m.heartbeat() == 0 and m.stable
    assert await m.heartbeat() == ErrorCode.REBALANCE_IN_PROGRESS
    assert m.rejoin_needed and m.member_id == "m1" and m.generation == 3
    m.stable = True
    assert await m.heartbeat() == ErrorCode.UNKNOWN_MEMBER_ID
    assert m.member_id == "" and m.generation == -1 and m.rejoin_needed


def commit_resp(code):
    cls = RESPONSES[ApiKey.OFFSET_COMMIT]
    return cls(topics=[cls.OffsetCommitResponseTopic(name="t", partitions=[
        cls.OffsetCommitResponsePartition(partition_index=0, error_code=code)])])


async def test_commit_retries_coordinator_moves_and_fails_after_rebalance():
    fc = FakeCluster({ApiKey.OFFSET_COMMIT: [commit_resp(ErrorCode.NOT_COORDINATOR), commit_resp(0),
                          commit_resp(ErrorCode.ILLEGAL_GENERATION),
                          commit_resp(ErrorCode.TOPIC_AUTHORIZATION_FAILED)]})
    m = member(fc)
    m.member_id, m.generation, m.stable = "m1", 4, True
    await m.commit({("t", 0): (10, -1, None)}, use_generation=True)
    assert fc.forgotten == 1 and fc.sent[-1].generation_id_or_member_epoch == 4
    with pytest.raises(CommitFailedError):
        await m.commit({("t", 0): (11, -1, None)}, use_generation=True)
    assert m.rejoin_needed and not m.stable
    with pytest.raises(KafkaError) as info:
        await m.commit({("t", 0): (11, -1, None)}, use_generation=False)
    assert info.value.code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert fc.sent[-1].generation_id_or_member_epoch == -1 and fc.sent[-1].member_id == ""


async def test_fetch_committed_none_for_missing():
    cls = RESPONSES[ApiKey.OFFSET_FETCH]
    resp = cls(error_code=0, topics=[cls.OffsetFetchResponseTopic(name="t", partitions=[
        cls.OffsetFetchResponsePartition(partition_index=0, committed_offset=7,
                                         committed_leader_epoch=2, metadata="", error_code=0),
        cls.OffsetFetchResponsePartition(partition_index=1, committed_offset=-1,
                                         committed_leader_epoch=-1, metadata="", error_code=0)])])
    fc = FakeCluster({ApiKey.OFFSET_FETCH: [resp]})
    got = await member(fc).fetch_committed([("t", 0), ("t", 1)])
    assert got == {("t", 0): (7, 2, ""), ("t", 1): None}


async def test_fetch_committed_without_a_coordinator_for_30_s(autojump_clock):
    """A poll must not fail for a coordinator that moved or is loading (Kafka's consumer
    returns without those positions and asks again at its next poll): `or_none` gives None
    after 30 s of retriable answers; without it, as before, the error."""
    cls = RESPONSES[ApiKey.OFFSET_FETCH]
    moved = cls(error_code=ErrorCode.NOT_COORDINATOR, topics=[])
    fc = FakeCluster({ApiKey.OFFSET_FETCH: [moved] * 1000})
    m = member(fc)
    m.retry_backoff_s = 0.1
    assert await m.fetch_committed([("t", 0)], or_none=True) is None
    assert fc.forgotten > 0                          # it looked for the coordinator again
    with pytest.raises(KafkaError) as info:
        await m.fetch_committed([("t", 0)])
    assert info.value.code == ErrorCode.NOT_COORDINATOR
