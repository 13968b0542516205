"""Offline log directories on the controller (controller/log_dirs.py, KIP-858): a heartbeat
names a broker's offline directories, an AssignReplicasToDirs under such a directory takes just
those replicas out of leadership and ISRs, through the real handlers and wire types."""

from __future__ import annotations

import uuid

import trio

from metadata_quorum import controller_handlers as ch
from metadata_quorum.tests.test_unregister_broker import FakeService
from wire.connection import Request
from wire.errors import ErrorCode
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS

BAD, GOOD = uuid.uuid4(), uuid.uuid4()


def _cluster():
    svc = FakeService()
    c = svc.controller
    for b in range(3):
        svc.run(lambda now: c.register_broker(b, f"inc{b}", "127.0.0.1", 9092 + b, None, now))
        epoch = c.image.brokers[b].broker_epoch
        svc.run(lambda now: c.broker_heartbeat(b, epoch, svc.offset, False, False, now))
    svc.run(lambda now: c.create_topics([
        {"name": "t", "assignments": {0: [0, 1, 2], 1: [0, 1, 2], 2: [1, 0, 2], 3: [0, 1, 2]}},
        {"name": "solo", "assignments": {0: [0]}}]))
    return svc


def _wire(api_key, version, **fields):
    cls = REQUESTS[api_key]
    body = cls.decode(cls(**fields).encode(version), version)      # as a broker sends it
    return Request(api_key, version, 1, "broker-0", None, body, 0)


def _heartbeat(svc, offline):
    epoch = svc.controller.image.brokers[0].broker_epoch
    return trio.run(ch.handle_broker_heartbeat, svc, _wire(
        ApiKey.BROKER_HEARTBEAT, 1, broker_id=0, broker_epoch=epoch,
        current_metadata_offset=svc.offset, offline_log_dirs=offline))


def _assign(svc, dirs, epoch=None):
    cls = REQUESTS[ApiKey.ASSIGN_REPLICAS_TO_DIRS]
    image = svc.controller.image
    epoch = image.brokers[0].broker_epoch if epoch is None else epoch
    directories = [cls.DirectoryData(id=d, topics=[cls.TopicData(
        topic_id=image.topics[t].topic_id if t in image.topics else uuid.uuid4(),
        partitions=[cls.PartitionData(partition_index=p) for p in ps])
        for t, ps in topics.items()]) for d, topics in dirs.items()]
    return trio.run(ch.handle_assign_replicas_to_dirs, svc, _wire(
        ApiKey.ASSIGN_REPLICAS_TO_DIRS, 0, broker_id=0, broker_epoch=epoch,
        directories=directories))


def _codes(resp):
    return {(d.id, p.partition_index): p.error_code
            for d in resp.directories for t in d.topics for p in t.partitions}


def test_replicas_of_an_offline_directory_leave_leadership_and_isr_only_those():
    svc = _cluster()
    assert _heartbeat(svc, [BAD]).error_code == ErrorCode.NONE
    before = svc.controller.image.topics["t"].partitions
    resp = _assign(svc, {BAD: {"t": [0, 2], "solo": [0]}})
    assert resp.error_code == ErrorCode.NONE
    assert set(_codes(resp).values()) == {ErrorCode.NONE}
    parts = svc.controller.image.topics["t"].partitions
    assert parts[0].leader in (1, 2) and 0 not in parts[0].isr          # was led by 0
    assert parts[2].leader == 1 and 0 not in parts[2].isr               # 0 was a follower
    assert parts[1] is before[1] and parts[3] is before[3]              # other dir: untouched
    assert parts[1].leader == 0 and parts[3].leader == 0
    solo = svc.controller.image.topics["solo"].partitions[0]
    assert solo.leader == -1 and solo.isr == (0,)      # last ISR member: kept, no leader (KIP-841)


def test_assignments_to_an_online_directory_change_nothing():
    svc = _cluster()
    _heartbeat(svc, [BAD])
    committed = len(svc.committed)
    resp = _assign(svc, {GOOD: {"t": [1]}})
    assert resp.error_code == ErrorCode.NONE and _codes(resp) == {(GOOD, 1): ErrorCode.NONE}
    assert len(svc.committed) == committed
    # the directory comes back online in the heartbeats (a restart): nothing is offline any more
    _heartbeat(svc, [])
    assert _assign(svc, {BAD: {"t": [1]}}).error_code == ErrorCode.NONE
    assert len(svc.committed) == committed


def test_errors_unknown_topic_not_a_replica_stale_epoch():
    svc = _cluster()
    _heartbeat(svc, [BAD])
    resp = _assign(svc, {BAD: {"t": [9], "nope": [0]}})
    codes = sorted(_codes(resp).values())
    assert codes == sorted([ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_ID])
    assert _assign(svc, {BAD: {"t": [0]}}, epoch=12345).error_code == ErrorCode.STALE_BROKER_EPOCH
    assert svc.controller.image.topics["t"].partitions[0].leader == 0


def test_not_controller_is_answered_top_level():
    svc = _cluster()
    svc.active = False
    assert _assign(svc, {BAD: {"t": [0]}}).error_code == ErrorCode.NOT_CONTROLLER


def test_assign_replicas_to_dirs_is_on_the_controller_listener():
    assert ch.SUPPORTED[ApiKey.ASSIGN_REPLICAS_TO_DIRS] == (0, 0)


def test_an_offline_replica_is_never_elected_until_its_directory_is_back():
    svc = _cluster()
    c = svc.controller
    _heartbeat(svc, [BAD])
    _assign(svc, {BAD: {"solo": [0], "t": [0]}})
    solo = c.image.topics["solo"].partitions[0]
    assert solo.leader == -1 and solo.isr == (0,)
    # the periodic preferred-leader rebalance would hand "solo" back to broker 0, its last ISR
    # member and preferred replica, and t-0 too: neither happens while the replica is offline
    committed = len(svc.committed)
    svc.run(lambda now: (c.tick(now, rebalance=True), None))
    for _ in range(2):
        records = c.tick(0, rebalance=True)
        assert not any(getattr(x, "leader", None) == 0 for x in records), records
    assert c.image.topics["solo"].partitions[0].leader == -1
    assert c.image.topics["t"].partitions[0].leader != 0
    # restarted with the directory fixed: its heartbeats name no offline directory
    _heartbeat(svc, [])
    records = c.tick(0, rebalance=True)
    assert {(x.partition_id, x.leader) for x in records if getattr(x, "leader", None) == 0} >= \
        {(0, 0)}
    assert len(svc.committed) >= committed


def test_a_move_onto_an_offline_replica_keeps_the_usable_leader():
    """A command computed before the directory's replicas left the ISR (a preferred-leader move
    back to broker 0 in that window) must not leave the partition leaderless: the filter keeps
    the usable leader it has."""
    from metadata_quorum import records as r
    from metadata_quorum.controller.log_dirs import without_offline_leaders
    svc = _cluster()
    c = svc.controller
    _heartbeat(svc, [BAD])
    _assign(svc, {BAD: {"t": [0]}})
    t = c.image.topics["t"]
    assert t.partitions[0].leader in (1, 2)
    move = r.PartitionChangeRecord(t.topic_id, 0, leader=0)
    assert without_offline_leaders(c.image, c.offline_log_dirs, [move]) == []
    with_isr = r.PartitionChangeRecord(t.topic_id, 0, leader=0, isr=(1, 2))
    assert without_offline_leaders(c.image, c.offline_log_dirs, [with_isr]) == [
        r.PartitionChangeRecord(t.topic_id, 0, leader=None, isr=(1, 2))]
