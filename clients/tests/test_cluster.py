"""Cluster (metadata cache, connection pool, coordinators): unit checks and one live cluster."""

from __future__ import annotations

import pytest
import trio

from clients.cluster import Cluster, TopicPartition, parse_bootstrap
from clients.errors import (KafkaConnectionError, NoBrokersAvailable, Retry, UnknownTopicError,
                            classify)
from clients.connection import ConnectionClosed
from partition_server.testing import LiveCluster
from wire.errors import ErrorCode, NotLeaderOrFollowerError, TopicAlreadyExistsError
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS


def test_parse_bootstrap():
    assert parse_bootstrap("a:1, b:2") == [("a", 1), ("b", 2)]
    assert parse_bootstrap(["[::1]:9092"]) == [("::1", 9092)]
    for bad in ("", "host", "host:x", ":9"):
        with pytest.raises(ValueError):
            parse_bootstrap(bad)


def test_classify():
    assert classify(0) is Retry.NO
    assert classify(ErrorCode.NOT_LEADER_OR_FOLLOWER) is Retry.REFRESH_AND_RETRY
    assert classify(ErrorCode.NOT_COORDINATOR) is Retry.REFRESH_AND_RETRY
    assert classify(ErrorCode.NOT_ENOUGH_REPLICAS) is Retry.RETRY
    assert classify(ErrorCode.TOPIC_AUTHORIZATION_FAILED) is Retry.NO
    assert classify(9999) is Retry.NO
    assert classify(NotLeaderOrFollowerError()) is Retry.REFRESH_AND_RETRY
    assert classify(TopicAlreadyExistsError()) is Retry.NO
    assert classify(ConnectionClosed("x")) is Retry.REFRESH_AND_RETRY
    assert classify(KafkaConnectionError("x")) is Retry.REFRESH_AND_RETRY
    assert classify(trio.TooSlowError()) is Retry.RETRY
    assert classify(ValueError()) is Retry.NO


async def test_unreachable_bootstrap():
    # a port nobody listens on: a clear error, quickly
    c = Cluster("127.0.0.1:1", connect_timeout_ms=2000)
    with pytest.raises(NoBrokersAvailable, match="127.0.0.1:1"):
        await c.start()
    await c.aclose()


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    c = LiveCluster(tmp_path_factory.mktemp("cluster"))
    c.start()
    yield c
    c.stop()


async def _create(cluster: Cluster, name: str, partitions: int, rf: int) -> None:
    ct = REQUESTS[ApiKey.CREATE_TOPICS]
    resp = await cluster.call_controller(ct(topics=[ct.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=rf)], timeout_ms=10000))
    assert resp.topics[0].error_code == 0, resp.topics[0]


@pytest.mark.live
async def test_live_metadata_leaders_coordinator(live):
    async with Cluster(f"127.0.0.1:1,{live.bootstrap}", client_id="t") as cluster:
        md = cluster.metadata
        assert set(md.brokers) == {0, 1, 2}
        assert md.cluster_id
        await _create(cluster, "cl-a", 3, 3)
        t = await cluster.wait_for_topic("cl-a")
        assert sorted(t.partitions) == [0, 1, 2]
        for p in t.partitions.values():
            assert p.leader in p.replicas and len(p.replicas) == 3 and p.leader_epoch >= 0
        assert cluster.partitions_for("cl-a") == [0, 1, 2]
        leader = cluster.leader_for("cl-a", 1)
        assert leader == md.leader_for(TopicPartition("cl-a", 0)) or leader in md.brokers

        # pooled: the same connection is reused; channels are separate connections
        c1 = await cluster.connection(leader)
        assert await cluster.connection(leader) is c1
        assert await cluster.connection(leader, "fetch") is not c1

        # a request on a leader: ListOffsets answers from it without NOT_LEADER
        lo = REQUESTS[ApiKey.LIST_OFFSETS]
        resp = await cluster.call(leader, lo(replica_id=-1, topics=[lo.ListOffsetsTopic(
            name="cl-a", partitions=[lo.ListOffsetsPartition(partition_index=1,
                                                             timestamp=-1)])]))
        assert resp.topics[0].partitions[0].error_code == 0

        # coordinator lookup is cached
        node = await cluster.find_coordinator("some-group")
        assert node in md.brokers
        assert await cluster.find_coordinator("some-group") == node

        with pytest.raises(UnknownTopicError):
            await cluster.wait_for_topic("no-such-topic", timeout_s=1)

        # concurrent refreshes coalesce into one request's answer
        before = cluster.metadata.version
        async with trio.open_nursery() as n:
            for _ in range(5):
                n.start_soon(cluster.refresh_metadata)
        assert cluster.metadata.version <= before + 2


@pytest.mark.live
async def test_live_survives_broker_loss(live):
    async with Cluster(live.bootstrap) as cluster:
        await _create(cluster, "cl-b", 1, 3)
        t = await cluster.wait_for_topic("cl-b")
        old = t.partitions[0].leader
        await cluster.connection(old)
        live.kill(f"broker-{old}")
        try:
            with pytest.raises(KafkaConnectionError):
                lo = REQUESTS[ApiKey.LIST_OFFSETS]
                await cluster.call(old, lo(replica_id=-1, topics=[]))
            # the controller moves leadership; metadata shows the new leader
            with trio.fail_after(30):
                while True:
                    await cluster.refresh_metadata(force=True)
                    new = cluster.leader_for("cl-b", 0)
                    if new is not None and new != old:
                        break
                    await trio.sleep(0.3)
            assert cluster.partition_info("cl-b", 0).leader_epoch > t.partitions[0].leader_epoch
        finally:
            live.restart_broker(old)
