"""Offline log directories on the controller (controller/log_dirs.py, KIP-858): a heartbeat
names a broker's offline directories, an AssignReplicasToDirs under such a directory takes just
those replicas out of leadership and ISRs, through the real handlers and wire types; both are
records of the metadata log, so a controller that takes over (or replays a snapshot) knows which
replicas are offline without hearing from the broker again."""

from __future__ import annotations

import uuid

import trio

from metadata_quorum import controller_handlers as ch
from metadata_quorum import records as r
from metadata_quorum.controller.quorum_controller import QuorumController
from metadata_quorum.image import UNASSIGNED_DIR, MetadataImage
from metadata_quorum.tests.test_unregister_broker import FakeService
from wire.connection import Request
from wire.errors import ErrorCode
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS

BAD, GOOD = uuid.uuid4(), uuid.uuid4()


def _register(svc, b, dirs=(BAD, GOOD)):
    c = svc.controller
    svc.run(lambda now: c.register_broker(b, f"inc{b}", "127.0.0.1", 9092 + b, None, now,
                                          log_dirs=dirs if b == 0 else (uuid.uuid4(),)))
    epoch = c.image.brokers[b].broker_epoch
    svc.run(lambda now: c.broker_heartbeat(b, epoch, svc.offset, False, False, now))


def _cluster():
    svc = FakeService()
    for b in range(3):
        _register(svc, b)
    svc.run(lambda now: svc.controller.create_topics([
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


def test_assignments_to_an_online_directory_only_record_where_the_replica_is():
    svc = _cluster()
    c = svc.controller
    _heartbeat(svc, [BAD])
    before = c.image.topics["t"].partitions[1]
    resp = _assign(svc, {GOOD: {"t": [1]}})
    assert resp.error_code == ErrorCode.NONE and _codes(resp) == {(GOOD, 1): ErrorCode.NONE}
    p = c.image.topics["t"].partitions[1]
    assert p.directory(0) == GOOD and p.directory(1) == UNASSIGNED_DIR
    assert (p.leader, p.isr) == (before.leader, before.isr)
    committed = len(svc.committed)
    assert _assign(svc, {GOOD: {"t": [1]}}).error_code == ErrorCode.NONE    # the same again
    assert len(svc.committed) == committed


def test_a_restart_with_the_directory_fixed_brings_its_replicas_back():
    svc = _cluster()
    c = svc.controller
    _heartbeat(svc, [BAD])
    _assign(svc, {BAD: {"t": [0]}})
    assert c.image.replica_offline(c.image.topics["t"].partitions[0], 0)
    _register(svc, 0)               # a new registration names both directories online
    p = c.image.topics["t"].partitions[0]
    assert p.directory(0) == BAD and not c.image.replica_offline(p, 0)
    assert 0 in p.isr or p.leader != 0     # back in sync through AlterPartition, as usual


def test_the_heartbeat_takes_already_assigned_replicas_offline_at_once():
    """Assignments may commit before the heartbeat naming their directory (the broker sends
    both): the heartbeat's records then move the leadership."""
    svc = _cluster()
    c = svc.controller
    _assign(svc, {BAD: {"t": [0, 3]}, GOOD: {"t": [1]}})
    assert c.image.topics["t"].partitions[0].leader == 0           # not offline yet
    _heartbeat(svc, [BAD])
    parts = c.image.topics["t"].partitions
    assert c.image.brokers[0].log_dirs == (GOOD,)
    assert parts[0].leader != 0 and 0 not in parts[0].isr
    assert parts[3].leader != 0 and 0 not in parts[3].isr
    assert parts[1].leader == 0 and 0 in parts[1].isr


def test_offline_replicas_survive_a_failover_and_a_snapshot():
    """A new controller replays the same records (or loads a snapshot of them) and, without
    any heartbeat from broker 0, never elects its offline replica."""
    svc = _cluster()
    _heartbeat(svc, [BAD])
    _assign(svc, {BAD: {"solo": [0], "t": [0]}})
    replayed = QuorumController()
    for offset, rec in enumerate(svc.committed):
        replayed.replay(offset, rec)
    snap = MetadataImage.from_records(
        [r.decode_record(r.encode_record(x)) for x in replayed.image.to_records()],
        replayed.image.offset)
    assert snap.same_state(replayed.image)
    for image in (replayed.image, snap):
        c = QuorumController()
        c.load_image(image)
        c.become_active(0)
        assert image.replica_offline(image.topics["solo"].partitions[0], 0)
        for rebalance in (False, True):
            records = c.tick(0, rebalance=rebalance)
            assert not any(getattr(x, "leader", None) == 0 for x in records), records
        # broker 0 unfenced again by a heartbeat that names no directory (v0 cannot): still
        # not elected for the replicas of its failed directory
        epoch = image.brokers[0].broker_epoch
        records, _ = c.broker_heartbeat(0, epoch, image.offset, False, False, 0, None)
        assert not any(getattr(x, "leader", None) == 0 for x in records), records


def test_records_without_directories_read_as_unassigned():
    """A metadata log written before directories: the fields absent, every replica online."""
    import msgpack
    tid = uuid.uuid4()
    old = [r.TopicRecord("x", tid),
           msgpack.packb([3, 0, {"topic_id": tid.bytes, "partition_id": 0, "replicas": [0, 1],
                                 "isr": [0, 1], "leader": 0}], use_bin_type=True),
           msgpack.packb([0, 0, {"broker_id": 0, "incarnation_id": "i", "broker_epoch": 1,
                                 "host": "h", "port": 1}], use_bin_type=True)]
    recs = [old[0]] + [r.decode_record(x) for x in old[1:]]
    image = MetadataImage().apply_all(0, recs)
    p = image.topics["x"].partitions[0]
    assert p.directories == () and p.directory(0) == UNASSIGNED_DIR
    assert image.brokers[0].log_dirs == () and not image.replica_offline(p, 0)
    # a reassignment keeps each kept replica's directory
    image = image.apply(3, r.PartitionChangeRecord(tid, 0, directories=(GOOD, BAD)))
    image = image.apply(4, r.PartitionChangeRecord(tid, 0, replicas=(1, 2)))
    assert image.topics["x"].partitions[0].directories == (BAD, UNASSIGNED_DIR)
    image = image.apply(5, r.PartitionChangeRecord(tid, 0, replicas=(2, 3)))
    assert image.topics["x"].partitions[0].directories == ()
    bad = msgpack.packb([5, 0, {"topic_id": tid.bytes, "partition_id": 0,
                                "directories": [b"short"]}], use_bin_type=True)
    try:
        r.decode_record(bad)
        raise AssertionError("a malformed directory id decoded")
    except r.MetadataRecordError:
        pass


def test_every_directory_offline_reads_offline_not_unknown():
    svc = _cluster()
    c = svc.controller
    _assign(svc, {BAD: {"t": [0]}, GOOD: {"t": [1]}})
    _heartbeat(svc, [BAD, GOOD])
    parts = c.image.topics["t"].partitions
    assert c.image.replica_offline(parts[0], 0) and c.image.replica_offline(parts[1], 0)
    assert parts[0].leader != 0 and parts[1].leader != 0


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
    svc.run(lambda now: (c.tick(now, rebalance=True), None))
    for _ in range(2):
        records = c.tick(0, rebalance=True)
        assert not any(getattr(x, "leader", None) == 0 for x in records), records
    assert c.image.topics["solo"].partitions[0].leader == -1
    assert c.image.topics["t"].partitions[0].leader != 0
    # broker 0 stops (its session lapses), restarts with the directory fixed: registered again
    # with both directories online
    svc.run(lambda now: (c.tick(10 ** 9), None))
    assert c.image.brokers[0].fenced
    svc.run(lambda now: c.register_broker(0, "inc0-again", "127.0.0.1", 9092, None, now,
                                          log_dirs=(BAD, GOOD)))
    epoch = c.image.brokers[0].broker_epoch
    svc.run(lambda now: c.broker_heartbeat(0, epoch, svc.offset, False, False, now, ()))
    assert c.image.topics["solo"].partitions[0].leader == 0


def test_a_move_onto_an_offline_replica_keeps_the_usable_leader():
    """A command computed before the directory's replicas left the ISR (a preferred-leader move
    back to broker 0 in that window) must not leave the partition leaderless: the filter keeps
    the usable leader it has."""
    from metadata_quorum.controller.log_dirs import without_offline_leaders
    svc = _cluster()
    c = svc.controller
    _heartbeat(svc, [BAD])
    _assign(svc, {BAD: {"t": [0]}})
    t = c.image.topics["t"]
    assert t.partitions[0].leader in (1, 2)
    move = r.PartitionChangeRecord(t.topic_id, 0, leader=0)
    assert without_offline_leaders(c.image, [move]) == []
    with_isr = r.PartitionChangeRecord(t.topic_id, 0, leader=0, isr=(1, 2))
    assert without_offline_leaders(c.image, [with_isr]) == [
        r.PartitionChangeRecord(t.topic_id, 0, leader=None, isr=(1, 2))]
