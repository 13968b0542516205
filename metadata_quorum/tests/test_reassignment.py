"""Partition reassignment (KIP-455) at the controller: start, completion on ISR expansion,
leadership off a removed replica, cancel, replacement, every error writing nothing, replay
equality, and a hypothesis run of random moves, ISR changes and fencing against the invariants."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from metadata_quorum.testing import RecordLog
from wire.errors import ErrorCode as E


def cluster(n=4):
    log = RecordLog(session_timeout_ms=3000, default_partitions=1, default_replication_factor=2)
    c, epochs = log.controller, {}
    for b in range(n):
        res = log.run_pure(lambda: c.register_broker(b, f"i{b}", "127.0.0.1", 9092, None, 0))
        epochs[b] = res.broker_epoch
        log.run_pure(lambda: c.broker_heartbeat(b, epochs[b], len(log.entries), False, False, 0))
    return log, c, epochs


def topic(log, replicas=(0, 1), name="t"):
    res = log.run_pure(lambda: log.controller.create_topics(
        [{"name": name, "assignments": {0: list(replicas)}}]))[0]
    assert res.error == E.NONE
    return res.topic_id


def move(log, target, name="t", partition=0):
    return log.run_pure(lambda: log.controller.alter_partition_reassignments(
        [(name, partition, target)]))[0]


def expand(log, epochs, isr, name="t"):
    """The leader's AlterPartition setting the ISR to `isr`."""
    c = log.controller
    p = c.image.partition(name, 0)
    tid = c.image.topics[name].topic_id
    return log.run_pure(lambda: c.alter_partition(p.leader, epochs[p.leader], tid, 0,
                                                  p.leader_epoch, p.partition_epoch, list(isr)))


def state(c, name="t"):
    p = c.image.partition(name, 0)
    return p.replicas, p.isr, p.leader, p.adding_replicas, p.removing_replicas


def test_move_starts_completes_when_targets_join_and_leader_moves_off_removed():
    log, c, ep = cluster()
    topic(log, (0, 1))
    assert move(log, [1, 2]) == (E.NONE, None)
    assert state(c) == ((1, 2, 0), (0, 1), 0, (2,), (0,))
    assert c.list_partition_reassignments(None)[0][0] == "t"
    epoch = c.image.partition("t", 0).leader_epoch
    res = expand(log, ep, (0, 1, 2))
    # the answer is the ISR change alone; the completion record follows it
    assert res.error == E.NONE and res.leader == 0 and res.isr == (0, 1, 2)
    assert state(c) == ((1, 2), (1, 2), 1, (), ())
    assert c.image.partition("t", 0).leader_epoch == epoch + 1
    assert c.list_partition_reassignments(None) == []
    assert log.replay_all().image.same_state(c.image)


def test_completion_waits_for_every_target_replica_in_the_isr():
    log, c, ep = cluster()
    topic(log, (0, 1, 2))
    expand(log, ep, (0, 1))                       # 2 fell behind
    move(log, [0, 2, 3])
    expand(log, ep, (0, 1, 3))                    # 3 joined, 2 still out: Kafka waits
    assert state(c)[3:] == ((3,), (1,))
    expand(log, ep, (0, 1, 2, 3))
    assert state(c) == ((0, 2, 3), (0, 2, 3), 0, (), ())


def test_target_inside_the_isr_completes_at_once():
    log, c, _ = cluster()
    topic(log, (0, 1, 2))
    assert move(log, [2, 1]) == (E.NONE, None)
    assert state(c) == ((2, 1), (1, 2), 2, (), ())   # leader 0 removed: first in-sync target
    assert move(log, [2, 1]) == (E.NONE, None)       # same again: no record
    n = len(log.entries)
    assert move(log, [2, 1]) == (E.NONE, None) and len(log.entries) == n


def test_cancel_restores_the_original_and_moves_leadership_off_an_adding_replica():
    log, c, ep = cluster()
    topic(log, (0, 1))
    move(log, [2, 3])
    expand(log, ep, (0, 1, 2))
    # leadership went to an adding replica meanwhile (0 fenced, then back)
    log.run_pure(lambda: c.broker_heartbeat(0, ep[0], 0, True, False, 1))
    log.run_pure(lambda: c.broker_heartbeat(1, ep[1], 0, True, False, 1))
    assert state(c)[2] == 2
    log.run_pure(lambda: c.broker_heartbeat(0, ep[0], len(log.entries), False, False, 2))
    # only 2 (adding) is in sync: reverting needs an unclean election, refused as Kafka does
    # (cancel and a replacing target alike), and nothing changes
    before = c.image
    for target in (None, [0, 1], [1, 3]):
        code, message = move(log, target)
        assert code == E.INVALID_REPLICA_ASSIGNMENT and "unclean leader election" in message
    assert c.image is before
    # allowed once the topic allows unclean election: the first usable original replica leads
    log.run_pure(lambda: c.incremental_alter_configs(
        [(2, "t", [("unclean.leader.election.enable", 0, "true")])]))
    assert move(log, None) == (E.NONE, None)
    assert state(c) == ((0, 1), (0,), 0, (), ())
    assert move(log, None)[0] == E.NO_REASSIGNMENT_IN_PROGRESS


def test_cancel_keeps_an_in_sync_original_leader():
    log, c, ep = cluster()
    topic(log, (0, 1))
    move(log, [2, 3])
    expand(log, ep, (0, 1, 2))
    assert move(log, None) == (E.NONE, None)
    assert state(c) == ((0, 1), (0, 1), 0, (), ())


def test_new_target_replaces_the_one_in_progress():
    log, c, ep = cluster()
    topic(log, (0, 1))
    move(log, [1, 2])
    expand(log, ep, (0, 1))
    move(log, [3, 1])
    assert state(c) == ((3, 1, 0), (0, 1), 0, (3,), (0,))
    expand(log, ep, (0, 1, 3))
    assert state(c) == ((3, 1), (1, 3), 3, (), ())


def test_bad_plans_get_kafkas_codes_and_change_nothing():
    log, c, _ = cluster()
    topic(log, (0, 1))
    before, n = c.image, len(log.entries)
    results = log.run_pure(lambda: c.alter_partition_reassignments([
        ("t", 0, [1, 1]), ("t", 0, [1, 9]), ("t", 0, []), ("t", 7, [1]), ("nope", 0, [1]),
        ("t", 0, None)]))
    assert [code for code, _ in results] == [
        E.INVALID_REPLICA_ASSIGNMENT, E.INVALID_REPLICA_ASSIGNMENT, E.INVALID_REPLICA_ASSIGNMENT,
        E.UNKNOWN_TOPIC_OR_PARTITION, E.UNKNOWN_TOPIC_OR_PARTITION, E.NO_REASSIGNMENT_IN_PROGRESS]
    assert "more than once" in results[0][1] and "broker 9" in results[1][1]
    assert "empty replica list" in results[2][1]
    assert len(log.entries) == n and c.image is before


def test_one_request_moving_two_partitions_and_listing_a_subset():
    log, c, _ = cluster()
    log.run_pure(lambda: c.create_topics([{"name": "u", "assignments": {0: [0], 1: [1]}}]))
    res = log.run_pure(lambda: c.alter_partition_reassignments([("u", 0, [2]), ("u", 1, [3])]))
    assert res == [(E.NONE, None), (E.NONE, None)]
    listed = c.list_partition_reassignments([("u", [1, 5]), ("zz", [0])])
    assert [(t, [(o.partition, o.replicas, o.adding, o.removing) for o in os])
            for t, os in listed] == [("u", [(1, (3, 1), (3,), (1,))])]


def test_tick_finishes_a_move_whose_isr_changed_without_a_completion_check():
    """E.g. an ISR change committed by a controller that did not check for completion."""
    from metadata_quorum import records as r
    log, c, _ = cluster()
    tid = topic(log, (0, 1))
    move(log, [2])
    assert c.tick(1, rebalance=False) == []
    log.commit([r.PartitionChangeRecord(tid, 0, isr=(0, 1, 2))])
    log.commit(c.tick(1, rebalance=True))
    assert state(c) == ((2,), (2,), 2, (), ())
    assert c.tick(1, rebalance=True) == []


# -- invariants under random operations ---------------------------------------------------------

OPS = st.lists(st.one_of(
    st.tuples(st.just("move"), st.lists(st.integers(0, 4), min_size=1, max_size=4,
                                        unique=True)),
    st.tuples(st.just("move"), st.lists(st.integers(0, 5), min_size=0, max_size=3)),
    st.tuples(st.just("cancel"), st.none()),
    st.tuples(st.just("expand"), st.integers(0, 15)),
    st.tuples(st.just("shrink"), st.integers(0, 15)),
    st.tuples(st.just("fence"), st.integers(0, 3)),
    st.tuples(st.just("unfence"), st.integers(0, 3)),
    st.tuples(st.just("expand"), st.just(15)),     # every replica caught up
    st.tuples(st.just("tick"), st.none())), max_size=30)


def check(p, target):
    assert set(p.isr) <= set(p.replicas), p
    assert p.isr, p
    assert p.leader == -1 or (p.leader in p.isr and p.leader in p.replicas), p
    assert set(p.adding_replicas) <= set(p.replicas) and set(p.removing_replicas) <= set(p.replicas)
    assert not set(p.adding_replicas) & set(p.removing_replicas), p
    assert len(set(p.replicas)) == len(p.replicas), p
    if not p.adding_replicas and not p.removing_replicas and target is not None:
        # a finished move leaves exactly its target, never fewer replicas
        assert p.replicas == target, (p, target)
    assert set(p.elr) <= set(p.replicas) and not set(p.elr) & set(p.isr), p


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(OPS)
def test_invariants_hold_under_random_moves_isr_changes_and_fencing(ops):
    log, c, ep = cluster(5)
    topic(log, (0, 1))
    target = (0, 1)           # what the partition must hold once no move is in progress
    for op, arg in ops:
        p = c.image.partition("t", 0)
        before = c.image
        if op == "move":
            code, _ = move(log, arg)
            if code == E.NONE:
                target = tuple(arg)
            else:
                assert c.image is before           # a refused plan changes nothing
        elif op == "cancel":
            code, _ = move(log, None)
            if code == E.NONE:
                target = tuple(x for x in p.replicas if x not in p.adding_replicas)
        elif op in ("expand", "shrink") and p.leader != -1:
            members = [x for i, x in enumerate(p.replicas) if arg >> i & 1]
            isr = (set(p.isr) | set(members)) if op == "expand" else (set(p.isr) - set(members))
            usable = {b.broker_id for b in c.image.usable_brokers()}
            isr = sorted({x for x in isr if x in usable or x in p.isr} | {p.leader})
            expand(log, ep, isr)
        elif op == "fence":
            log.run_pure(lambda: c.broker_heartbeat(arg, ep[arg], 0, True, False, 1))
        elif op == "unfence":
            log.run_pure(lambda: c.broker_heartbeat(arg, ep[arg], len(log.entries), False,
                                                    False, 1))
        elif op == "tick":
            log.commit(c.tick(1, rebalance=True))
        check(c.image.partition("t", 0), target)
    assert log.replay_all().image.same_state(c.image)
