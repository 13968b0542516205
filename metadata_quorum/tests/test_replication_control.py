"""Topic, partition, election, AlterPartition, config, producer-id and heartbeat commands:
command → response → replay → state, every error path, and no state change by a command alone."""

import uuid

import pytest

from metadata_quorum.controller import config_control as cc
from metadata_quorum.testing import RecordLog
from wire.errors import ErrorCode as E


def cluster(n=3, racks=None):
    log = RecordLog(session_timeout_ms=3000, default_partitions=2, default_replication_factor=2)
    c, epochs = log.controller, {}
    for b in range(n):
        res = log.run_pure(lambda: c.register_broker(b, f"i{b}", "127.0.0.1", 9092,
                                                     racks[b] if racks else None, 0))
        assert res.error == E.NONE
        epochs[b] = res.broker_epoch
        hb = log.run_pure(lambda: c.broker_heartbeat(b, epochs[b], len(log.entries), False, False, 0))
        assert hb.error == E.NONE and not hb.is_fenced and hb.is_caught_up
    return log, c, epochs


def create(log, **topic):
    return log.run_pure(lambda: log.controller.create_topics([topic]))[0]


@pytest.mark.parametrize("topic,code", [
    ({"name": "."}, E.INVALID_TOPIC_EXCEPTION), ({"name": ".."}, E.INVALID_TOPIC_EXCEPTION),
    ({"name": "a" * 250}, E.INVALID_TOPIC_EXCEPTION), ({"name": "a b"}, E.INVALID_TOPIC_EXCEPTION),
    ({"name": ""}, E.INVALID_TOPIC_EXCEPTION),
    ({"name": "p", "num_partitions": 0}, E.INVALID_PARTITIONS),
    ({"name": "p", "num_partitions": -5}, E.INVALID_PARTITIONS),
    ({"name": "p", "replication_factor": 4}, E.INVALID_REPLICATION_FACTOR),
    ({"name": "p", "replication_factor": 0}, E.INVALID_REPLICATION_FACTOR),
    ({"name": "p", "assignments": {0: [0, 0]}}, E.INVALID_REPLICA_ASSIGNMENT),
    ({"name": "p", "assignments": {0: [0, 9]}}, E.INVALID_REPLICA_ASSIGNMENT),
    ({"name": "p", "assignments": {1: [0]}}, E.INVALID_REPLICA_ASSIGNMENT),
    ({"name": "p", "configs": {"retention.ms": "soon"}}, E.INVALID_CONFIG),
    ({"name": "p", "configs": {"no.such.key": "1"}}, E.INVALID_CONFIG),
    ({"name": "p", "configs": {"cleanup.policy": "shred"}}, E.INVALID_CONFIG),
])
def test_create_topics_errors_write_nothing(topic, code):
    log, c, _ = cluster()
    before = len(log.entries)
    res = create(log, **topic)
    assert res.error == code, res
    assert len(log.entries) == before and not c.image.topics


def test_create_topics_success_defaults_validate_only_and_duplicates():
    log, c, _ = cluster()
    res = create(log, name="a_b-c.1")
    assert res.error == E.NONE and (res.num_partitions, res.replication_factor) == (2, 2)
    t = c.image.topics["a_b-c.1"]
    assert t.topic_id == res.topic_id and len(t.partitions) == 2
    for p in t.partitions.values():
        assert p.leader == p.replicas[0] and p.isr == p.replicas and p.leader_epoch == 0
    assert create(log, name="a_b-c.1").error == E.TOPIC_ALREADY_EXISTS
    recs, res = c.create_topics([{"name": "v"}], validate_only=True)
    assert recs == [] and res[0].error == E.NONE
    res = log.run_pure(lambda: c.create_topics([{"name": "d"}, {"name": "d"}]))
    assert [x.error for x in res] == [E.NONE, E.INVALID_REQUEST]
    res = create(log, name="m", assignments={0: [2, 1], 1: [1, 0]})
    assert [c.image.partition("m", p).replicas for p in (0, 1)] == [(2, 1), (1, 0)]


def test_placement_spreads_leaders_and_racks():
    log, c, _ = cluster(6, racks=["a", "a", "b", "b", "c", "c"])
    create(log, name="t", num_partitions=12, replication_factor=3)
    parts = c.image.topics["t"].partitions.values()
    leaders = [p.leader for p in parts]
    assert sorted(set(leaders)) == list(range(6)) and max(map(leaders.count, set(leaders))) == 2
    rack = {b: "abc"[b // 2] for b in range(6)}
    for p in parts:
        assert len({rack[x] for x in p.replicas}) == 3, p


def test_delete_topics_by_name_and_id():
    log, c, _ = cluster()
    tid = create(log, name="a").topic_id
    create(log, name="b")
    res = log.run_pure(lambda: c.delete_topics(["a", "zz"], [uuid.UUID(int=1)]))
    assert [x.error for x in res] == [E.NONE, E.UNKNOWN_TOPIC_OR_PARTITION, E.UNKNOWN_TOPIC_ID]
    assert set(c.image.topics) == {"b"} and c.image.topic_by_id(tid) is None
    bid = c.image.topics["b"].topic_id
    assert log.run_pure(lambda: c.delete_topics([], [bid]))[0].error == E.NONE
    assert not c.image.topics


def test_create_partitions():
    log, c, _ = cluster()
    create(log, name="a")
    res = log.run_pure(lambda: c.create_partitions([("a", 4, None), ("a", 1, None), ("q", 3, None),
                                                    ]))
    assert [x.error for x in res] == [E.NONE, E.INVALID_PARTITIONS, E.UNKNOWN_TOPIC_OR_PARTITION]
    assert len(c.image.topics["a"].partitions) == 4
    res = log.run_pure(lambda: c.create_partitions([("a", 5, [[0]])]))
    assert res[0].error == E.INVALID_REPLICA_ASSIGNMENT


def test_alter_partition_checks_and_epochs():
    log, c, ep = cluster()
    tid = create(log, name="a", num_partitions=1, replication_factor=3).topic_id
    p = c.image.partition("a", 0)
    ldr = p.leader
    other = [x for x in p.replicas if x != ldr]
    call = lambda b=ldr, be=None, le=None, pe=None, isr=(ldr,): c.alter_partition(  # noqa: E731
        b, ep[b] if be is None else be, tid, 0, p.leader_epoch if le is None else le,
        p.partition_epoch if pe is None else pe, list(isr))
    assert call(be=999)[1].error == E.STALE_BROKER_EPOCH
    assert call(b=other[0])[1].error == E.NOT_LEADER_OR_FOLLOWER
    assert call(le=p.leader_epoch - 1)[1].error == E.FENCED_LEADER_EPOCH
    assert call(pe=p.partition_epoch + 3)[1].error == E.INVALID_UPDATE_VERSION
    assert call(isr=(other[0],))[1].error == E.INVALID_REQUEST
    res = log.run_pure(lambda: call())
    assert res.error == E.NONE and res.partition_epoch == p.partition_epoch + 1
    q = c.image.partition("a", 0)
    assert q.isr == (ldr,) and q.partition_epoch == res.partition_epoch
    assert q.leader_epoch == p.leader_epoch
    # a fenced broker may not rejoin the ISR
    log.run_pure(lambda: c.broker_heartbeat(other[0], ep[other[0]], 0, True, False, 1))
    bad = c.alter_partition(ldr, ep[ldr], tid, 0, q.leader_epoch, q.partition_epoch,
                            [ldr, other[0]])
    assert bad[1].error == E.INELIGIBLE_REPLICA


def test_fence_elects_first_live_isr_member_then_offline_then_unclean():
    log, c, ep = cluster()
    create(log, name="a", num_partitions=1, replication_factor=2)
    p = c.image.partition("a", 0)
    first, second = p.replicas
    log.run_pure(lambda: c.broker_heartbeat(first, ep[first], 0, True, False, 1))
    q = c.image.partition("a", 0)
    assert q.leader == second and q.isr == (second,) and q.leader_epoch == p.leader_epoch + 1
    assert q.partition_epoch > p.partition_epoch
    log.run_pure(lambda: c.broker_heartbeat(second, ep[second], 0, True, False, 1))
    q = c.image.partition("a", 0)
    assert q.leader == -1 and q.isr == (second,)       # last member kept, partition offline
    log.run_pure(lambda: c.broker_heartbeat(first, ep[first], 10**6, False, False, 2))  # unfence
    assert c.image.partition("a", 0).leader == -1     # first not in ISR, no unclean election
    res = log.run_pure(lambda: c.elect_leaders(1, [("a", 0)]))
    assert res == [("a", 0, E.NONE)] and c.image.partition("a", 0).leader == first
    assert c.elect_leaders(1, [("a", 0)])[1] == [("a", 0, E.ELECTION_NOT_NEEDED)]


def test_turning_unclean_election_on_elects_an_offline_partitions_out_of_sync_replica():
    """Kafka's trade-off (seed 002 §2.3): an offline partition stays offline while only an
    out-of-sync replica is alive; allowing unclean election for the topic brings it back with
    that replica as leader and sole ISR member — records only the lost ISR had are gone."""
    log, c, ep = cluster()
    create(log, name="a", num_partitions=1, replication_factor=2)
    first, second = c.image.partition("a", 0).replicas
    log.run_pure(lambda: c.broker_heartbeat(first, ep[first], 0, True, False, 1))     # ISR → second
    log.run_pure(lambda: c.broker_heartbeat(second, ep[second], 0, True, False, 1))   # offline
    log.run_pure(lambda: c.broker_heartbeat(first, ep[first], 10**6, False, False, 2))
    assert c.tick(3) == [] and c.image.partition("a", 0).leader == -1
    before = c.image.partition("a", 0)
    log.run_pure(lambda: c.incremental_alter_configs(
        [(cc.TOPIC_RESOURCE, "a", [("unclean.leader.election.enable", cc.SET, "true")])]))
    log.commit(c.tick(4))
    q = c.image.partition("a", 0)
    assert q.leader == first and q.isr == (first,) and q.leader_epoch == before.leader_epoch + 1
    assert c.tick(5) == []


def test_unclean_election_when_the_out_of_sync_replica_comes_back_resets_the_isr():
    log, c, ep = cluster()
    log.run_pure(lambda: c.incremental_alter_configs(
        [(cc.BROKER_RESOURCE, "", [("unclean.leader.election.enable", cc.SET, "true")])]))
    create(log, name="a", num_partitions=1, replication_factor=2)
    first, second = c.image.partition("a", 0).replicas
    log.run_pure(lambda: c.broker_heartbeat(first, ep[first], 0, True, False, 1))
    log.run_pure(lambda: c.broker_heartbeat(second, ep[second], 0, True, False, 1))
    assert c.image.partition("a", 0).leader == -1
    log.run_pure(lambda: c.broker_heartbeat(first, ep[first], 10**6, False, False, 2))
    q = c.image.partition("a", 0)
    assert q.leader == first and q.isr == (first,)       # never a leader outside its own ISR


def test_tick_fences_lapsed_sessions_and_preferred_election():
    log, c, ep = cluster()
    create(log, name="a", num_partitions=3, replication_factor=3)
    for b in (1, 2):
        log.run_pure(lambda: c.broker_heartbeat(b, ep[b], 10**6, False, False, 2500))
    assert c.tick(2900) == []
    log.commit(c.tick(3500))
    assert c.image.brokers[0].fenced and not c.image.brokers[1].fenced
    assert not list(c.image.partitions_led_by(0))
    res = c.elect_leaders(0, [("a", 0), ("zz", 0)])[1]
    assert res[1][2] == E.UNKNOWN_TOPIC_OR_PARTITION
    log.run_pure(lambda: c.broker_heartbeat(0, ep[0], 10**6, False, False, 3600))
    assert not c.image.brokers[0].fenced


def test_heartbeat_and_registration_errors():
    log, c, ep = cluster()
    assert c.broker_heartbeat(9, 1, 0, False, False, 0)[1].error == E.BROKER_ID_NOT_REGISTERED
    assert c.broker_heartbeat(0, ep[0] + 100, 0, False, False, 0)[1].error == E.STALE_BROKER_EPOCH
    dup = c.register_broker(0, "someone-else", "127.0.0.1", 1, None, 100)[1]
    assert dup.error == E.DUPLICATE_BROKER_REGISTRATION
    # a registered-but-behind broker stays fenced until it reaches its registration offset
    res = log.run_pure(lambda: c.register_broker(5, "new", "127.0.0.1", 1, None, 0))
    hb = log.run_pure(lambda: c.broker_heartbeat(5, res.broker_epoch, 0, False, False, 0))
    assert hb.is_fenced and not hb.is_caught_up and c.image.brokers[5].fenced


def test_configs_incremental_and_legacy():
    log, c, _ = cluster()
    create(log, name="a")
    res = log.run_pure(lambda: c.incremental_alter_configs([
        (cc.TOPIC_RESOURCE, "a", [("retention.ms", cc.SET, "1000"),
                                  ("cleanup.policy", cc.APPEND, "compact")]),
        (cc.TOPIC_RESOURCE, "a", [("min.insync.replicas", cc.SET, "0")]),
        (cc.TOPIC_RESOURCE, "zz", [("retention.ms", cc.SET, "1")]),
        (cc.TOPIC_RESOURCE, "a", [("bogus", cc.SET, "1")])]))
    assert [x[0] for x in res] == [E.NONE, E.INVALID_CONFIG, E.UNKNOWN_TOPIC_OR_PARTITION,
                                   E.INVALID_CONFIG]
    assert c.image.topic_config("a") == {"retention.ms": "1000", "cleanup.policy": "delete,compact"}
    res = log.run_pure(lambda: c.alter_configs([(cc.TOPIC_RESOURCE, "a", {"segment.bytes": "1048576"})]))
    assert res == [(E.NONE, None)] and c.image.topic_config("a") == {"segment.bytes": "1048576"}
    _, res = c.incremental_alter_configs([(cc.TOPIC_RESOURCE, "a", [("retention.ms", cc.SET, "5")])],
                                         validate_only=True)
    assert res == [(E.NONE, None)] and c.image.topic_config("a") == {"segment.bytes": "1048576"}
    log.run_pure(lambda: c.incremental_alter_configs(
        [(cc.BROKER_RESOURCE, "", [("unclean.leader.election.enable", cc.SET, "true")])]))
    assert c.image.broker_config(1)["unclean.leader.election.enable"] == "true"


def test_producer_id_blocks_are_monotonic():
    log, c, ep = cluster()
    starts = [log.run_pure(lambda: c.allocate_producer_ids(b % 3, ep[b % 3])) for b in range(4)]
    assert [s for _, s, _ in starts] == [0, 1000, 2000, 3000] and all(n == 1000 for *_, n in starts)
    assert c.allocate_producer_ids(0, 12345)[1][0] == E.STALE_BROKER_EPOCH


def test_a_closed_heartbeat_connection_cuts_the_session_short():
    log, c, ep = cluster()                      # session timeout 3000 ms, all seen at 0
    create(log, name="a", num_partitions=1, replication_factor=3)
    leader = c.image.partition("a", 0).leader
    for b in range(3):
        log.run_pure(lambda: c.broker_heartbeat(b, ep[b], 10**6, False, False, 1000))
    c.heartbeats.cut_short(leader, 1200, grace_ms=500)
    assert c.tick(1600) == []                   # within the grace: a live broker heartbeats now
    log.commit(c.tick(1750))                    # no heartbeat: fenced long before 1000 + 3000
    assert c.image.brokers[leader].fenced and c.image.partition("a", 0).leader != leader
    other = (leader + 1) % 3
    c.heartbeats.cut_short(other, 1800, grace_ms=500)
    log.run_pure(lambda: c.broker_heartbeat(other, ep[other], 10**6, False, False, 2000))
    assert c.tick(2400) == [] and not c.image.brokers[other].fenced     # it did heartbeat
    c.heartbeats.cut_short(other, 2500, grace_ms=10**6)                # never extends a session
    assert c.heartbeats.last_seen[other] == 2000


def test_a_stalled_controller_forgives_the_stall_instead_of_fencing_everyone():
    """The active controller did not run for 5 s (its heartbeats waited unread in sockets):
    every session gets a grace after the stall, so the next tick fences no one; a broker that
    stays silent after it is fenced once the grace is over."""
    log, c, ep = cluster()                      # session timeout 3000 ms, all seen at 0
    create(log, name="a", num_partitions=1, replication_factor=3)
    for b in range(3):
        log.run_pure(lambda: c.broker_heartbeat(b, ep[b], 10**6, False, False, 1000))
    c.heartbeats.forgive(6000, 1000)
    assert c.tick(6000) == []                   # 5 s since the heartbeats, all of it a stall
    for b in (0, 1):
        log.run_pure(lambda: c.broker_heartbeat(b, ep[b], 10**6, False, False, 6100))
    assert c.tick(6900) == []                   # broker 2 still within its grace
    log.commit(c.tick(7100))                    # grace over: broker 2 fenced, 0 and 1 not
    assert [b for b in range(3) if c.image.brokers[b].fenced] == [2]


def test_stalls_that_keep_coming_do_not_keep_a_dead_broker_alive():
    """Each stall gives at most the grace: a broker that died before a series of stalls is
    fenced within one grace of the last one, not after the sum of them."""
    log, c, ep = cluster()                      # session timeout 3000 ms
    for b in range(3):
        log.run_pure(lambda: c.broker_heartbeat(b, ep[b], 10**6, False, False, 1000))
    for now in (3500, 5000, 6500):               # stalls; 0 and 1 heartbeat after each
        c.heartbeats.forgive(now, 1000)
        for b in (0, 1):
            log.run_pure(lambda: c.broker_heartbeat(b, ep[b], 10**6, False, False, now + 100))
    log.commit(c.tick(7600))
    assert [b for b in range(3) if c.image.brokers[b].fenced] == [2]
