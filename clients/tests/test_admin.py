"""Admin client against one live cluster: every call, with its error cases."""

from __future__ import annotations

import uuid

import pytest
import trio

from clients.admin import (EARLIEST, LATEST, AclBinding, AclBindingFilter, AclOperation,
                           AclPermissionType, AdminClient, AlterConfigOp, AlterConfigOpType,
                           ConfigResource, ConfigResourceType, NewTopic, PatternType,
                           ResourceType, decode_assignment)
from clients.cluster import TopicPartition
from clients.producer import Producer
from partition_server.testing import LiveCluster
from wire.errors import (InvalidPartitionsError, InvalidReplicationFactorError, KafkaError,
                         TopicAlreadyExistsError, UnknownTopicOrPartitionError)
from wire.messages.consumer_protocol_assignment_generated import ConsumerProtocolAssignment


def test_decode_assignment():
    msg = ConsumerProtocolAssignment(assigned_partitions=[ConsumerProtocolAssignment.TopicPartition(
        topic="t", partitions=[0, 2])], user_data=None)
    data = (0).to_bytes(2, "big") + msg.encode(0)
    assert decode_assignment(data) == [TopicPartition("t", 0), TopicPartition("t", 2)]
    assert decode_assignment(b"\x00") == [] and decode_assignment(b"garbage!!") == []


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    c = LiveCluster(tmp_path_factory.mktemp("cluster"))
    c.start()
    yield c
    c.stop()


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


async def _listed(admin, present: set, absent: set = frozenset()) -> set:
    """The topics once `present` are listed and `absent` are not. The broker that answered a
    CreateTopics or DeleteTopics waits for its own metadata, but list_topics asks any broker,
    and the others learn the change from the controller a little later: as in Kafka, whose
    AdminClient says it may take a while for every broker to know (a CI run listed a topic
    deleted a moment before)."""
    with trio.fail_after(10):
        while True:
            topics = set(await admin.list_topics())
            if present <= topics and not absent & topics:
                return topics
            await trio.sleep(0.1)


@pytest.mark.live
async def test_live_topics_lifecycle(live):
    async with AdminClient(live.bootstrap) as admin:
        a, b = _name("ad"), _name("ad")
        res = await admin.create_topics([NewTopic(a, 3, 3, {"cleanup.policy": "compact"}),
                                         NewTopic(b, 1, 1)])
        assert res == {a: None, b: None}
        res = await admin.create_topics([NewTopic(a, 3, 3), NewTopic(_name("x"), 1, 9)])
        assert isinstance(res[a], TopicAlreadyExistsError)
        assert any(isinstance(e, InvalidReplicationFactorError) for e in res.values())
        # validate_only creates nothing
        c = _name("ad")
        assert (await admin.create_topics([NewTopic(c, 1, 1)], validate_only=True)) == {c: None}
        assert c not in await admin.list_topics()
        topics = await _listed(admin, {a, b})
        assert "__consumer_offsets" not in topics
        desc = await admin.describe_topics([a, "nope-" + a])
        assert [p.partition for p in desc[a].partitions] == [0, 1, 2]
        assert all(len(p.replicas) == 3 and p.leader in p.replicas for p in desc[a].partitions)
        assert isinstance(desc["nope-" + a], UnknownTopicOrPartitionError)
        # partitions: grow, refuse to shrink
        assert await admin.create_partitions({a: 5}) == {a: None}
        assert len((await admin.describe_topics([a]))[a].partitions) == 5
        assert isinstance((await admin.create_partitions({a: 2}))[a], InvalidPartitionsError)
        # configs: describe shows the topic's override; alter incrementally; delete reverts
        res = ConfigResource(ConfigResourceType.TOPIC, a)
        entries = {e.name: e for e in (await admin.describe_configs([res]))[res]}
        assert entries["cleanup.policy"].value == "compact"
        assert entries["cleanup.policy"].source == "DYNAMIC_TOPIC_CONFIG"
        assert await admin.incremental_alter_configs({res: [
            AlterConfigOp("retention.ms", "12345"),
            AlterConfigOp("cleanup.policy", None, AlterConfigOpType.DELETE)]}) == {res: None}
        with trio.fail_after(10):
            while True:
                entries = {e.name: e for e in (await admin.describe_configs([res]))[res]}
                if entries["retention.ms"].value == "12345":
                    break
                await trio.sleep(0.2)
        assert entries["cleanup.policy"].value == "delete"
        bad = await admin.incremental_alter_configs({res: [AlterConfigOp("no.such.config", "1")]})
        assert isinstance(bad[res], KafkaError)
        broker = ConfigResource(ConfigResourceType.BROKER, "0")
        assert isinstance((await admin.describe_configs([broker]))[broker], list)
        # delete
        assert await admin.delete_topics([b]) == {b: None}
        await _listed(admin, {a}, {b})
        assert isinstance((await admin.delete_topics([b]))[b], UnknownTopicOrPartitionError)


@pytest.mark.live
async def test_live_records_offsets_groups(live):
    topic = _name("off")
    async with AdminClient(live.bootstrap) as admin:
        assert (await admin.create_topics([NewTopic(topic, 2, 3)]))[topic] is None
        async with Producer(admin.cluster) as p:
            for i in range(10):
                await p.send(topic, b"v%d" % i, partition=i % 2)
            await p.flush()
        tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
        ends = await admin.list_offsets({tp0: LATEST, tp1: LATEST})
        assert ends[tp0][0] == 5 and ends[tp1][0] == 5
        # delete records, then the log starts later
        low = await admin.delete_records({tp0: 3})
        assert low[tp0] == 3
        assert (await admin.list_offsets({tp0: EARLIEST}))[tp0][0] == 3
        # group offsets for a group without members
        group = _name("g")
        assert await admin.alter_group_offsets(group, {tp0: 4, tp1: 1}) == {tp0: None, tp1: None}
        got = await admin.list_group_offsets(group)
        assert {tp: o.offset for tp, o in got.items()} == {tp0: 4, tp1: 1}
        assert await admin.reset_group_offsets(group, [topic], "earliest") == {tp0: 3, tp1: 0}
        assert await admin.reset_group_offsets(group, [topic], "shift-by", 2) == {tp0: 5, tp1: 2}
        assert await admin.reset_group_offsets(group, [topic], "offset", 99, dry_run=True) == \
            {tp0: 5, tp1: 5}
        got = await admin.list_group_offsets(group)
        assert {tp: o.offset for tp, o in got.items()} == {tp0: 5, tp1: 2}
        # a group with a real member (librdkafka), described while it is there
        live_group = _name("cg")
        started, stop = trio.Event(), trio.Event()

        def run_consumer(token):
            from confluent_kafka import Consumer
            c = Consumer({"bootstrap.servers": live.bootstrap, "group.id": live_group,
                          "auto.offset.reset": "earliest", "client.id": "cg-member"})
            c.subscribe([topic])
            try:
                while not c.assignment():
                    c.poll(0.2)
                trio.from_thread.run_sync(started.set, trio_token=token)
                while not trio.from_thread.run_sync(stop.is_set, trio_token=token):
                    c.poll(0.2)
            finally:
                c.close()

        async with trio.open_nursery() as n:
            token = trio.lowlevel.current_trio_token()
            n.start_soon(trio.to_thread.run_sync, run_consumer, token)
            with trio.fail_after(30):
                await started.wait()
            groups = await admin.list_groups()
            assert live_group in [g.group_id for g in groups]
            desc = (await admin.describe_groups([live_group]))[live_group]
            assert desc.state == "Stable" and len(desc.members) == 1
            assert desc.members[0].client_id == "cg-member"
            assert sorted(desc.members[0].assignment) == [tp0, tp1]
            # Kafka refuses to delete a group with members
            assert isinstance((await admin.delete_groups([live_group]))[live_group], KafkaError)
            stop.set()
        assert await admin.delete_groups([live_group]) == {live_group: None}
        assert live_group not in [g.group_id for g in await admin.list_groups()]
        assert isinstance((await admin.delete_groups([live_group]))[live_group], KafkaError)


@pytest.mark.live
async def test_live_cluster_quorum_acls(live):
    async with AdminClient(live.bootstrap) as admin:
        cl = await admin.describe_cluster()
        assert [b["id"] for b in cl["brokers"]] == [0, 1, 2] and cl["cluster_id"]
        q = await admin.describe_quorum()
        assert q["leader_id"] >= 0 and len(q["voters"]) == 3
        binding = AclBinding(ResourceType.TOPIC, "acl-t", PatternType.LITERAL, "User:alice", "*",
                             AclOperation.READ, AclPermissionType.ALLOW)
        assert await admin.create_acls([binding]) == [None]
        with trio.fail_after(10):       # brokers answer DescribeAcls from their metadata image
            while await admin.describe_acls(AclBindingFilter(ResourceType.TOPIC)) != [binding]:
                await trio.sleep(0.2)
        assert await admin.describe_acls(AclBindingFilter(principal="User:bob")) == []
        deleted = await admin.delete_acls([AclBindingFilter(ResourceType.TOPIC, "acl-t")])
        assert deleted == [[binding]]
        assert await admin.delete_acls([AclBindingFilter(ResourceType.TOPIC, "acl-t")]) == [[]]


@pytest.mark.live
async def test_live_unreachable():
    from clients.errors import NoBrokersAvailable
    with pytest.raises(NoBrokersAvailable):
        async with AdminClient("127.0.0.1:1", {"socket.connection.setup.timeout.ms": 1000}):
            pass
