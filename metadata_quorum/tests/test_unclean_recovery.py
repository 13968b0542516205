"""KIP-966 unclean recovery at the controller (metadata_quorum/controller/unclean_recovery.py):
a partition with no leader and an empty ISR and ELR gets the replica with the longest log, by
the strategy in force (None / Balanced / Aggressive)."""

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from metadata_quorum import records as r
from metadata_quorum.controller import unclean_recovery as ur
from metadata_quorum.image import MetadataImage
from metadata_quorum.tests.test_eligible_leader_replicas import _cluster, _fence, _p
from wire.errors import ErrorCode

TID = uuid.UUID(int=7)


def _image(replicas, last_known, fenced=(), strategy=None, timeout_ms=None):
    """One topic 't', partition 0 leaderless with an empty ISR and ELR, on brokers 0..9."""
    recs = [r.RegisterBrokerRecord(b, f"i{b}", 100 + b, "h", 9000 + b, None, b in fenced)
            for b in range(10)]
    recs += [r.TopicRecord("t", TID),
             r.PartitionRecord(TID, 0, tuple(replicas), (), -1, 3, 8, elr=(),
                               last_known_elr=tuple(last_known))]
    if strategy is not None:
        recs.append(r.ConfigRecord(2, "t", "unclean.recovery.strategy", strategy))
    if timeout_ms is not None:
        recs.append(r.ConfigRecord(4, "", "unclean.recovery.timeout.ms", str(timeout_ms)))
    return MetadataImage.from_records(recs, len(recs))


def _answer(infos, broker, last_epoch, leo, partition_epoch=8, broker_epoch=None):
    infos.record(broker, 100 + broker if broker_epoch is None else broker_epoch,
                 [(TID, 0, partition_epoch, last_epoch, leo)])


def _leader(records):
    assert len(records) == 1
    rec = records[0]
    assert rec.isr == (rec.leader,) and rec.leader != -1
    return rec.leader


def test_the_highest_last_epoch_wins_then_the_longest_log():
    image = _image([0, 1, 2], [0, 1], strategy="Aggressive")
    infos = ur.ReplicaLogInfos()
    _answer(infos, 0, last_epoch=4, leo=900)
    _answer(infos, 1, last_epoch=5, leo=300)      # written under a later leader: it wins
    _answer(infos, 2, last_epoch=5, leo=200)
    assert _leader(ur.elections(image, infos, 0)) == 1


def test_stale_reports_do_not_count():
    image = _image([0, 1, 2], [0], strategy="Aggressive", fenced=(2,))
    infos = ur.ReplicaLogInfos()
    _answer(infos, 0, 1, 50, partition_epoch=7)   # about an older partition state
    _answer(infos, 1, 1, 60, broker_epoch=3)      # from a registration before a restart
    _answer(infos, 2, 1, 70)                      # from a fenced broker
    assert ur.elections(image, infos, 0) == []
    _answer(infos, 0, 1, 50)
    assert _leader(ur.elections(image, infos, 0)) == 0


def test_a_reassignment_target_that_never_was_in_sync_is_no_candidate():
    image = _image([0, 1, 2, 3], [0], strategy="Aggressive")
    image = image.apply(image.offset + 1, r.PartitionChangeRecord(TID, 0, adding_replicas=(3,)))
    infos = ur.ReplicaLogInfos()
    _answer(infos, 3, 2, 0, partition_epoch=9)    # the new replica: nothing copied yet
    assert ur.elections(image, infos, 0) == []
    _answer(infos, 1, 1, 40, partition_epoch=9)
    assert _leader(ur.elections(image, infos, 0)) == 1


def test_balanced_waits_for_every_last_known_elr_member():
    image = _image([0, 1, 2, 3, 4], [0, 1])
    infos = ur.ReplicaLogInfos()
    assert ur.strategy(image, "t") == "Balanced"  # KIP-966's default
    _answer(infos, 0, 2, 250)
    _answer(infos, 3, 2, 100)
    assert ur.elections(image, infos, 0) == []    # 1 is a last copy and has not answered
    _answer(infos, 1, 2, 300)
    assert _leader(ur.elections(image, infos, 10)) == 1


def test_balanced_elects_once_a_majority_answered():
    image = _image([0, 1, 2], [0])
    infos = ur.ReplicaLogInfos()
    _answer(infos, 1, 2, 250)
    assert ur.elections(image, infos, 0) == []
    _answer(infos, 2, 2, 260)                     # 2 of 3: a majority, though 0 is missing
    assert _leader(ur.elections(image, infos, 0)) == 2


def test_balanced_elects_among_the_answers_after_the_timeout():
    image = _image([0, 1, 2], [0], timeout_ms=1000)
    infos = ur.ReplicaLogInfos()
    assert ur.elections(image, infos, 5000) == []  # the wait starts when first seen
    _answer(infos, 1, 2, 250)
    assert ur.elections(image, infos, 5999) == []
    assert _leader(ur.elections(image, infos, 6000)) == 1


def test_none_never_elects_and_neither_does_a_partition_with_a_leader():
    image = _image([0, 1, 2], [0], strategy="None")
    infos = ur.ReplicaLogInfos()
    for b in range(3):
        _answer(infos, b, 2, 100 + b)
    assert ur.elections(image, infos, 10**9) == []
    led = image.apply(image.offset + 1, r.PartitionChangeRecord(TID, 0, leader=0, isr=(0,)))
    assert ur.elections(led, infos, 0) == [] and infos.reports == {}


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_the_elected_replica_always_has_the_longest_log_among_the_answers(data):
    replicas = data.draw(st.lists(st.integers(0, 9), min_size=1, max_size=5, unique=True))
    last_known = data.draw(st.lists(st.sampled_from(replicas), unique=True))
    fenced = data.draw(st.sets(st.integers(0, 9)))
    kind = data.draw(st.sampled_from(["None", "Balanced", "Aggressive"]))
    timeout = data.draw(st.integers(0, 2000))
    image = _image(replicas, last_known, fenced, kind, timeout_ms=timeout)
    infos = ur.ReplicaLogInfos()
    valid = {}
    for b in data.draw(st.lists(st.integers(0, 9), unique=True)):
        epoch, leo = data.draw(st.integers(-1, 5)), data.draw(st.integers(0, 1000))
        fresh = data.draw(st.booleans())
        _answer(infos, b, epoch, leo, partition_epoch=8 if fresh else 6)
        if fresh and b in replicas and b not in fenced:
            valid[b] = (epoch, leo)
    now = data.draw(st.integers(0, 3000))
    records = ur.elections(image, infos, now)
    if kind == "None" or not valid:
        assert records == []
        return
    if kind == "Aggressive":
        assert len(records) == 1
    else:       # Balanced: every last copy answered, or a majority, or the wait (from now) is over
        enough = (bool(last_known) and set(last_known) <= set(valid)) \
            or 2 * len(valid) > len(replicas) or timeout == 0
        assert len(records) == (1 if enough else 0)
    if records:
        leader = _leader(records)
        assert leader in valid
        assert valid[leader] == max(valid.values())
        assert records[0].last_known_elr in ((), None)


# -- through the controller: fencing, unclean registrations, heartbeats, the tick ----------------

def _power_loss_everywhere(strategy):
    """ISR (a), ELR (b) when every replica went down; then a and b come back from a power loss
    (their epochs unknown): the ISR and ELR empty, last-known ELR (a, b)."""
    h, epochs = _cluster()
    if strategy != "Balanced":
        h.run(h.c.incremental_alter_configs([(2, "t", [("unclean.recovery.strategy", 0,
                                                         strategy)])]))
    a, b, c = _p(h).replicas
    _fence(h, epochs, {c}, 1500)
    _fence(h, epochs, {b, c}, 3000)
    _fence(h, epochs, {a, b, c}, 4500)
    return h, epochs, (a, b, c)


def _back(h, epochs, broker, now, log_end=None):
    res = h.run(h.c.register_broker(broker, f"{broker}-{now}", "127.0.0.1", 9092 + broker,
                                    None, now, previous_broker_epoch=-1))
    epochs[broker] = res.broker_epoch
    hb = h.run(h.c.broker_heartbeat(broker, epochs[broker], len(h.log), False, False, now))
    assert hb.error == ErrorCode.NONE


def _report(h, epochs, broker, last_epoch, leo):
    """What controller_handlers does with a heartbeat's RaftkaReplicaLogInfo."""
    p, t = _p(h), h.c.image.topics["t"]
    h.c.log_infos.record(broker, epochs[broker],
                         [(t.topic_id, 0, p.partition_epoch, last_epoch, leo)])


def test_balanced_through_the_controller_elects_the_longest_log_once_both_last_copies_answer():
    h, epochs, (a, b, c) = _power_loss_everywhere("Balanced")
    _back(h, epochs, a, 5000)                     # the former leader, its tail lost: 250
    _report(h, epochs, a, 1, 250)
    h.commit(h.c.tick(5100))
    assert _p(h).leader == -1 and _p(h).elr == (b,)   # b, eligible, may yet come back intact
    _back(h, epochs, b, 5200)                     # also from a power loss, yet it kept 300
    assert _p(h).leader == -1 and _p(h).elr == () and _p(h).last_known_elr == (a, b)
    _report(h, epochs, a, 1, 250)                 # (a's first report is stale now)
    h.commit(h.c.tick(5300))
    assert _p(h).leader == -1                     # b, a last copy, has not answered
    _report(h, epochs, b, 1, 300)
    h.commit(h.c.tick(5400))
    p = _p(h)
    assert (p.leader, p.isr, p.elr, p.last_known_elr) == (b, (b,), (), ())
    assert p.leader_epoch == 2                    # a new epoch: a truncates to b's log


def test_aggressive_through_the_controller_elects_the_first_to_answer():
    h, epochs, (a, b, c) = _power_loss_everywhere("Aggressive")
    _back(h, epochs, a, 5000)
    _report(h, epochs, a, 1, 250)
    h.commit(h.c.tick(5100))
    assert _p(h).leader == -1                     # the ELR (b) is not empty: no recovery yet
    _back(h, epochs, b, 5200)
    _report(h, epochs, a, 1, 250)
    h.commit(h.c.tick(5300))
    assert _p(h).leader == a                      # b had not answered yet


def test_none_through_the_controller_keeps_the_former_last_isr_member():
    h, epochs, (a, b, c) = _power_loss_everywhere("None")
    _back(h, epochs, a, 5000)
    _back(h, epochs, b, 5200)                     # every last copy back: a, whatever b holds
    assert _p(h).leader == a
    # and no report is ever needed or sent for such a topic: nothing left to recover
    assert h.c.tick(5300) == []


def test_a_new_active_controller_waits_afresh():
    h, epochs, (a, b, c) = _power_loss_everywhere("Balanced")
    h.run(h.c.incremental_alter_configs([(4, "", [("unclean.recovery.timeout.ms", 0, "1000")])]))
    _back(h, epochs, a, 5000)
    _back(h, epochs, b, 5010)
    _report(h, epochs, a, 1, 250)
    h.commit(h.c.tick(5100))
    h.c.become_active(5500)                       # reports and waits were soft state

    def tick(now):                                # a and b stay alive (1 s sessions)
        for x in (a, b):
            h.run(h.c.broker_heartbeat(x, epochs[x], len(h.log), False, False, now))
        h.commit(h.c.tick(now))
    tick(6000)
    assert _p(h).leader == -1                     # nothing heard since: nothing to elect
    _report(h, epochs, a, 1, 250)
    tick(6100)
    assert _p(h).leader == -1                     # waiting for b since 6000
    tick(6900)
    assert _p(h).leader == -1
    tick(7000)
    assert _p(h).leader == a                      # timed out: a is all it heard


def test_bad_strategy_values_are_refused():
    h, _ = _cluster()
    res = h.run(h.c.incremental_alter_configs([(2, "t", [("unclean.recovery.strategy", 0,
                                                          "balanced")])]))
    assert res[0][0] == ErrorCode.INVALID_CONFIG and "Balanced" in res[0][1]
    res = h.run(h.c.incremental_alter_configs([(4, "", [("unclean.recovery.timeout.ms", 0,
                                                         "-5")])]))
    assert res[0][0] == ErrorCode.INVALID_CONFIG


def test_a_tick_looks_again_only_at_topics_that_changed():
    """The leaderless partitions of a topic are found again only when its TopicImage changed
    (the image copies a topic on any change to its partitions): a tick at 30,000 partitions
    scanned them all (3.4 ms, four times a second)."""
    other = uuid.UUID(int=8)
    recs = [r.RegisterBrokerRecord(b, f"i{b}", 100 + b, "h", 9000 + b, None, False)
            for b in range(3)]
    recs += [r.TopicRecord("t", TID), r.TopicRecord("u", other)]
    recs += [r.PartitionRecord(t, p, (0, 1, 2), (0, 1, 2), 0, 1, 1)
             for t in (TID, other) for p in range(3)]
    image = MetadataImage.from_records(recs, len(recs))
    infos = ur.ReplicaLogInfos()
    assert ur.elections(image, infos, 0) == []
    u_before = infos.leaderless.of(image.topics["u"])
    # partition 1 of 't' loses its leader and every in-sync replica
    image = image.apply(len(recs), r.PartitionChangeRecord(TID, 1, leader=-1, isr=()))
    assert [p.partition_id for p in infos.leaderless.of(image.topics["t"])] == [1]
    assert infos.leaderless.of(image.topics["u"]) is u_before      # not looked at again
    infos.record(0, 100, [(TID, 1, image.partition("t", 1).partition_epoch, 2, 10)])
    image = image.apply(len(recs) + 1, r.ConfigRecord(2, "t", "unclean.recovery.strategy",
                                                       "Aggressive"))
    assert _leader(ur.elections(image, infos, 0)) == 0
    # a deleted topic is forgotten, with the TopicImage held for it
    image = image.apply(len(recs) + 2, r.RemoveTopicRecord(other))
    ur.elections(image, infos, 0)
    assert "u" not in infos.leaderless._by_name
