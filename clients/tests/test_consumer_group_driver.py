"""ConsumerGroupMember (the KIP-848 driver) against a fake cluster whose coordinator is the
broker's own state machine (partition_server/group/consumer_group.py), with injected errors:
reconciliation inside ensure_active calls revoke before assign and acknowledges at once;
fencing hands partitions over as lost and rejoins with epoch 0; coordinator errors rediscover
the coordinator; OffsetCommit carries member id + epoch (v9) and retries STALE_MEMBER_EPOCH;
leave sends epoch -1 (static: -2); fatal answers surface as typed errors."""

from __future__ import annotations

import types
import uuid

import pytest
import trio

from clients.consumer.group.kip848_member import ConsumerGroupMember
from clients.consumer.group.kip848_state import MemberState
from clients.errors import KafkaConnectionError
from clients.consumer.group.coordinator import CommitFailedError
from partition_server.group.consumer_group import ConsumerGroupCoordinatorState
from wire.errors import ErrorCode, KafkaError
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import RESPONSES

T1 = uuid.UUID(int=7)


class FakeCluster:
    def __init__(self, partitions=4):
        self.coord = ConsumerGroupCoordinatorState(heartbeat_interval_ms=50)
        self.topics = {"orders": (T1, partitions)}
        self.metadata = types.SimpleNamespace(
            brokers={1: object()},
            topics={"orders": types.SimpleNamespace(topic_id=T1, partitions={})})
        self.sent: list = []
        self.inject: dict[int, list] = {}       # api key -> errors to answer first
        self.forgotten = 0
        self.commits: list = []

    async def find_coordinator(self, group):
        return 1

    def forget_coordinator(self, group):
        self.forgotten += 1

    async def refresh_metadata(self, topics=None, force=False, all_topics=False):
        return self.metadata

    async def drop_connection(self, node, channel="default"):
        pass

    async def call_versioned(self, node, build, api_key, **kw):
        return await self.call(node, build(1 if api_key == ApiKey.CONSUMER_GROUP_HEARTBEAT else 9), **kw)

    async def call(self, node, req, **kw):
        self.sent.append(req)
        await trio.sleep(0)
        queue = self.inject.get(req.API_KEY)
        if queue:
            answer = queue.pop(0)
            if isinstance(answer, Exception):
                raise answer
            if req.API_KEY == ApiKey.CONSUMER_GROUP_HEARTBEAT:
                return RESPONSES[ApiKey.CONSUMER_GROUP_HEARTBEAT](error_code=answer, member_epoch=-1)
            return self._commit_answer(req, answer)
        if req.API_KEY == ApiKey.CONSUMER_GROUP_HEARTBEAT:
            owned = None if req.topic_partitions is None else {
                tp.topic_id: list(tp.partitions) for tp in req.topic_partitions}
            r = self.coord.heartbeat(
                "g", req.member_id, req.member_epoch, instance_id=req.instance_id,
                rebalance_timeout_ms=req.rebalance_timeout_ms,
                subscribed_names=req.subscribed_topic_names,
                subscribed_regex=req.subscribed_topic_regex, server_assignor=req.server_assignor,
                owned=owned, topics=self.topics, now_ms=int(trio.current_time() * 1000))
            cls = RESPONSES[ApiKey.CONSUMER_GROUP_HEARTBEAT]
            assignment = None if r.assignment is None else cls.Assignment(topic_partitions=[
                cls.TopicPartitions(topic_id=t, partitions=sorted(ps))
                for t, ps in r.assignment.items()])
            return cls(error_code=r.error, error_message=r.message, member_id=r.member_id,
                       member_epoch=r.member_epoch, heartbeat_interval_ms=50,
                       assignment=assignment)
        if req.API_KEY == ApiKey.OFFSET_COMMIT:
            code = self.coord.can_commit("g", req.member_id, req.generation_id_or_member_epoch)
            if code == 0:
                self.commits.append((req.member_id, req.generation_id_or_member_epoch))
            return self._commit_answer(req, code)
        raise AssertionError(f"unexpected api {req.API_KEY}")

    @staticmethod
    def _commit_answer(req, code):
        cls = RESPONSES[ApiKey.OFFSET_COMMIT]
        return cls(topics=[cls.OffsetCommitResponseTopic(name=t.name, partitions=[
            cls.OffsetCommitResponsePartition(partition_index=p.partition_index, error_code=code)
            for p in t.partitions]) for t in req.topics])


class Hooks:
    """The consumer's side of reconciliation, recording the order of calls."""

    def __init__(self):
        self.calls: list = []
        self.owned: list = []

    def assignment(self):
        return list(self.owned)

    async def _cg_revoke(self, tps):
        self.calls.append(("revoke", sorted(tps)))
        self.owned = [tp for tp in self.owned if tp not in tps]

    async def _cg_assign(self, added, partitions):
        self.calls.append(("assign", sorted(added)))
        self.owned = sorted(partitions)

    async def _cg_lose(self, tps):
        self.calls.append(("lose", sorted(tps)))
        self.owned = [tp for tp in self.owned if tp not in tps]


async def drive(member, hooks, until, timeout_s=5.0):
    with trio.fail_after(timeout_s):
        while not until():
            await member.ensure_active(["orders"], None, hooks)
            await trio.sleep(0.01)


def heartbeats(fc):
    return [r for r in fc.sent if r.API_KEY == ApiKey.CONSUMER_GROUP_HEARTBEAT]


async def test_join_reconcile_ack_then_leave(nursery):
    fc = FakeCluster()
    m = ConsumerGroupMember(fc, "g", rebalance_timeout_ms=5000, server_assignor="range",
                            retry_backoff_ms=10)
    hooks = Hooks()
    nursery.start_soon(m.heartbeat_loop)
    await drive(m, hooks, lambda: m.state.state is MemberState.STABLE and hooks.owned)
    assert hooks.calls == [("assign", [("orders", p) for p in range(4)])]
    join, *rest = heartbeats(fc)
    assert (join.member_epoch, join.subscribed_topic_names, join.server_assignor) == \
        (0, ["orders"], "range")
    ack = next(r for r in rest if r.topic_partitions)
    assert ack.member_epoch == m.generation > 0
    assert m.stable and m.commit_identity() == (m.generation, m.member_id, None)
    await m.commit({("orders", 0): (5, -1, None)}, True)
    assert fc.commits == [(m.member_id, m.generation)]
    await m.leave()
    assert heartbeats(fc)[-1].member_epoch == -1
    assert m.state.state is MemberState.UNSUBSCRIBED and not fc.coord.groups["g"].members


async def test_second_member_revoke_happens_before_it_is_assigned(nursery):
    fc = FakeCluster()
    a = ConsumerGroupMember(fc, "g", retry_backoff_ms=10)
    b = ConsumerGroupMember(fc, "g", retry_backoff_ms=10)
    ha, hb = Hooks(), Hooks()
    nursery.start_soon(a.heartbeat_loop)
    await drive(a, ha, lambda: len(ha.owned) == 4)
    nursery.start_soon(b.heartbeat_loop)
    order: list = []

    async def both():
        while not (len(ha.owned) == 2 and len(hb.owned) == 2):
            before = (len(ha.calls), len(hb.calls))
            await a.ensure_active(["orders"], None, ha)
            await b.ensure_active(["orders"], None, hb)
            order.extend(("a",) + c for c in ha.calls[before[0]:])
            order.extend(("b",) + c for c in hb.calls[before[1]:])
            assert not set(ha.owned) & set(hb.owned)
            await trio.sleep(0.01)
    with trio.fail_after(5):
        await both()
    revoke = next(i for i, c in enumerate(order) if c[:2] == ("a", "revoke"))
    gained = next(i for i, c in enumerate(order) if c[:2] == ("b", "assign") and c[2])
    assert revoke < gained
    assert set(order[revoke][2]) == set(order[gained][2])


async def test_fenced_member_loses_partitions_and_rejoins(nursery):
    fc = FakeCluster()
    m = ConsumerGroupMember(fc, "g", retry_backoff_ms=10)
    hooks = Hooks()
    nursery.start_soon(m.heartbeat_loop)
    await drive(m, hooks, lambda: m.state.state is MemberState.STABLE and hooks.owned)
    fc.inject[68] = [ErrorCode.FENCED_MEMBER_EPOCH]
    await drive(m, hooks, lambda: ("lose", [("orders", p) for p in range(4)]) in hooks.calls)
    await drive(m, hooks, lambda: m.state.state is MemberState.STABLE and len(hooks.owned) == 4)
    assert hooks.calls[-2:] == [("lose", [("orders", p) for p in range(4)]),
                                ("assign", [("orders", p) for p in range(4)])]
    rejoin = [r for r in heartbeats(fc) if r.member_epoch == 0]
    assert len(rejoin) == 2 and rejoin[1].member_id == m.member_id   # same id, epoch 0


@pytest.mark.parametrize("failure", [ErrorCode.NOT_COORDINATOR,
                                     ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                     ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                                     KafkaConnectionError("gone")])
async def test_coordinator_errors_rediscover_and_retry(nursery, failure):
    fc = FakeCluster()
    m = ConsumerGroupMember(fc, "g", retry_backoff_ms=10)
    hooks = Hooks()
    fc.inject[68] = [failure, failure]
    nursery.start_soon(m.heartbeat_loop)
    await drive(m, hooks, lambda: m.state.state is MemberState.STABLE and hooks.owned)
    assert fc.forgotten >= 2 and len(hooks.owned) == 4


async def test_commit_stale_epoch_retries_fenced_fails(nursery):
    fc = FakeCluster()
    m = ConsumerGroupMember(fc, "g", retry_backoff_ms=10)
    hooks = Hooks()
    nursery.start_soon(m.heartbeat_loop)
    await drive(m, hooks, lambda: m.state.state is MemberState.STABLE and hooks.owned)
    fc.inject[8] = [ErrorCode.STALE_MEMBER_EPOCH]
    await m.commit({("orders", 1): (3, -1, None)}, True)
    assert len(fc.commits) == 1                      # retried with the current epoch
    fc.inject[8] = [ErrorCode.FENCED_MEMBER_EPOCH]
    with pytest.raises(CommitFailedError) as err:
        await m.commit({("orders", 1): (4, -1, None)}, True)
    assert err.value.code == ErrorCode.FENCED_MEMBER_EPOCH


async def test_static_member_leaves_with_minus_two_and_fatal_errors_raise(nursery):
    fc = FakeCluster()
    m = ConsumerGroupMember(fc, "g", group_instance_id="i-1", retry_backoff_ms=10)
    hooks = Hooks()
    nursery.start_soon(m.heartbeat_loop)
    await drive(m, hooks, lambda: m.state.state is MemberState.STABLE and hooks.owned)
    await m.leave()
    last = heartbeats(fc)[-1]
    assert (last.member_epoch, last.instance_id) == (-2, "i-1")
    fc.inject[68] = [ErrorCode.GROUP_AUTHORIZATION_FAILED]
    with pytest.raises(KafkaError) as err:
        await drive(m, hooks, lambda: False)
    assert err.value.code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    assert "GROUP_AUTHORIZATION_FAILED" in str(err.value)


def test_config_group_protocol_and_remote_assignor():
    from clients.consumer import Consumer
    from clients.config import ConfigError
    from clients.consumer.config import parse_config
    from clients.consumer.group.classic_member import GroupMember
    assert parse_config({}, {})["group.protocol"] == "classic"
    assert parse_config({"group.protocol": "CONSUMER"}, {})["group.protocol"] == "consumer"
    with pytest.raises(ConfigError, match="Invalid value eager for configuration group.protocol: "
                                          "must be one of classic, consumer"):
        parse_config({"group.protocol": "eager"}, {})
    with pytest.raises(ValueError, match="needs group.protocol=consumer"):
        parse_config({"group.remote.assignor": "range"}, {})
    with pytest.raises(ConfigError, match="configuration group.remote.assignor: must be an assignor"):
        parse_config({"group.protocol": "consumer", "group.remote.assignor": ""}, {})
    # the coordinator owns these with KIP-848: setting one is refused, as Kafka's Java client does
    for key, value in (("session.timeout.ms", 10_000), ("heartbeat.interval.ms", 500),
                       ("partition.assignment.strategy", "range")):
        with pytest.raises(ValueError, match=f"{key} is not supported with group.protocol=consumer"):
            parse_config({"group.protocol": "consumer", key: value}, {})
        assert parse_config({key: value}, {})[key] == value          # classic: as before
    with pytest.raises(ValueError, match="session.timeout.ms is not supported"):
        Consumer("127.0.0.1:1", group_id="g", group_protocol="consumer", session_timeout_ms=6000)
    c = Consumer("127.0.0.1:1", group_id="g", group_protocol="consumer",
                 group_remote_assignor="uniform", group_instance_id="i")
    assert isinstance(c.member, ConsumerGroupMember)
    assert c.member.state.server_assignor == "uniform" and c.member.state.instance_id == "i"
    assert c.member.rebalance_timeout_ms == 300_000
    assert isinstance(Consumer("127.0.0.1:1", group_id="g").member, GroupMember)
