"""KIP-966 at the controller: eligible leader replicas (ELR) and unclean-shutdown detection.

The scenario that motivates it (fault F7 in chaos_tests/README.md): RF 3, min.insync.replicas 2. Two followers fail,
the ISR shrinks to the leader alone; then the leader loses power and comes back with its
unflushed tail gone. Without KIP-966 it is the last ISR member and leads again — the records it
lost, which the others had, are truncated everywhere. With it, the replicas that left the ISR
while it was too small stay eligible, and the unclean leader is not trusted."""

from metadata_quorum.tests.test_metadata_unit import Harness
from wire.errors import ErrorCode


def _cluster(min_isr=2, rf=3):
    h = Harness(session_timeout_ms=1000, default_min_isr=min_isr)
    epochs = {b: h.broker(b) for b in range(3)}
    h.run(h.c.create_topics([{"name": "t", "num_partitions": 1, "replication_factor": rf}]))
    h.c.become_active(0)
    return h, epochs


def _p(h):
    return h.c.image.topics["t"].partitions[0]


def _fence(h, epochs, dead, now):
    """Every broker but `dead` heartbeats at `now`; then the controller's tick fences the rest."""
    for b in epochs:
        if b not in dead:
            h.run(h.c.broker_heartbeat(b, epochs[b], len(h.log), False, False, now - 100))
    h.commit(h.c.tick(now))


def _shrink(h, epochs, isr):
    p, t = _p(h), h.c.image.topics["t"]
    res = h.run(h.c.alter_partition(p.leader, epochs[p.leader], t.topic_id, 0, p.leader_epoch,
                                    p.partition_epoch, isr))
    assert res.error == ErrorCode.NONE


def test_replicas_leaving_a_too_small_isr_become_eligible_until_it_recovers():
    h, epochs = _cluster()
    p = _p(h)
    a, b, c = p.replicas
    assert p.leader == a
    _shrink(h, epochs, [a, b])                    # 2 = min.insync.replicas: c is simply behind
    assert _p(h).elr == ()
    _shrink(h, epochs, [a])                       # below: b holds everything committed so far
    assert _p(h).elr == (b,)
    _shrink(h, epochs, [a, c])                    # back at min: the high watermark moves again
    assert _p(h).isr == (a, c) and _p(h).elr == ()


def test_min_isr_is_capped_at_the_replication_factor():
    h, epochs = _cluster(min_isr=2, rf=1)
    p = _p(h)
    _fence(h, epochs, {p.leader}, 1500)
    assert _p(h).elr == () and _p(h).isr == (p.leader,)


def test_f7_the_last_isr_member_back_from_an_unclean_shutdown_is_not_trusted():
    h, epochs = _cluster()
    a, b, c = _p(h).replicas
    _fence(h, epochs, {c}, 1500)                  # c dies: ISR (a, b)
    assert _p(h).isr == (a, b) and _p(h).elr == ()
    _fence(h, epochs, {b, c}, 3000)               # b dies: ISR (a) — b becomes eligible
    assert _p(h).isr == (a,) and _p(h).elr == (b,)
    _fence(h, epochs, {a, b, c}, 4500)            # a dies: offline, last member remembered
    assert _p(h).leader == -1 and _p(h).isr == (a,) and _p(h).elr == (b,)
    # a comes back after a power loss (no clean-shutdown epoch): not trusted, not elected
    res = h.run(h.c.register_broker(a, "a-2", "127.0.0.1", 9092, None, 5000,
                                    previous_broker_epoch=-1))
    epochs[a] = res.broker_epoch
    h.run(h.c.broker_heartbeat(a, epochs[a], len(h.log), False, False, 5000))
    assert not h.c.image.brokers[a].fenced
    assert _p(h).leader == -1 and _p(h).isr == () and _p(h).elr == (b,)
    # b (clean) comes back: elected from the ELR; a may then catch up from it
    res = h.run(h.c.register_broker(b, "b-2", "127.0.0.1", 9093, None, 5100,
                                    previous_broker_epoch=epochs[b]))
    epochs[b] = res.broker_epoch
    h.run(h.c.broker_heartbeat(b, epochs[b], len(h.log), False, False, 5100))
    assert _p(h).leader == b and _p(h).isr == (b,) and _p(h).elr == ()


def test_the_last_isr_member_back_from_a_clean_shutdown_leads_again():
    h, epochs = _cluster()
    a, b, c = _p(h).replicas
    _fence(h, epochs, {c}, 1500)
    _fence(h, epochs, {b, c}, 3000)
    _fence(h, epochs, {a, b, c}, 4500)
    res = h.run(h.c.register_broker(a, "a-2", "127.0.0.1", 9092, None, 5000,
                                    previous_broker_epoch=epochs[a]))
    epochs[a] = res.broker_epoch
    h.run(h.c.broker_heartbeat(a, epochs[a], len(h.log), False, False, 5000))
    assert _p(h).leader == a and _p(h).isr == (a,) and _p(h).elr == (b,)


def test_an_eligible_replica_leads_when_no_isr_member_is_usable():
    h, epochs = _cluster()
    a, b, c = _p(h).replicas
    _fence(h, epochs, {c}, 1500)
    _fence(h, epochs, {b, c}, 3000)               # ISR (a), ELR (b)
    _fence(h, epochs, {a, b, c}, 4500)
    res = h.run(h.c.register_broker(b, "b-2", "127.0.0.1", 9093, None, 5000,
                                    previous_broker_epoch=epochs[b]))
    epochs[b] = res.broker_epoch
    h.run(h.c.broker_heartbeat(b, epochs[b], len(h.log), False, False, 5000))
    # a (the ISR) is still down: b, which holds every committed record, leads; a stays eligible
    assert _p(h).leader == b and _p(h).isr == (b,) and _p(h).elr == (a,)
    # an eligible replica back from an unclean shutdown leaves the ELR
    res = h.run(h.c.register_broker(a, "a-2", "127.0.0.1", 9092, None, 5100,
                                    previous_broker_epoch=-1))
    assert _p(h).elr == () and _p(h).leader == b


def test_unclean_election_forgets_the_elr():
    h, epochs = _cluster()
    a, b, c = _p(h).replicas
    _fence(h, epochs, {c}, 1500)
    _fence(h, epochs, {b, c}, 3000)
    _fence(h, epochs, {a, b, c}, 4500)
    res = h.run(h.c.register_broker(c, "c-2", "127.0.0.1", 9094, None, 5000,
                                    previous_broker_epoch=epochs[c]))
    epochs[c] = res.broker_epoch
    h.run(h.c.broker_heartbeat(c, epochs[c], len(h.log), False, False, 5000))
    assert _p(h).leader == -1                     # c is neither in the ISR nor eligible
    assert h.run(h.c.elect_leaders(1, [("t", 0)])) == [("t", 0, ErrorCode.NONE)]
    assert _p(h).leader == c and _p(h).isr == (c,) and _p(h).elr == ()


def test_every_copy_back_from_unclean_shutdowns_the_former_last_isr_member_leads():
    """A power loss everywhere: no replica is known intact. With unclean.recovery.strategy None,
    once all the last known copies are back the former last ISR member leads (the best guess
    without asking for log ends; test_unclean_recovery.py covers Balanced and Aggressive)."""
    h, epochs = _cluster()
    assert h.run(h.c.incremental_alter_configs(
        [(2, "t", [("unclean.recovery.strategy", 0, "None")])])) == [(ErrorCode.NONE, None)]
    a, b, c = _p(h).replicas
    _fence(h, epochs, {c}, 1500)
    _fence(h, epochs, {b, c}, 3000)
    _fence(h, epochs, {a, b, c}, 4500)            # ISR (a), ELR (b)
    now = 5000
    for x in (b, a):
        res = h.run(h.c.register_broker(x, f"{x}-2", "127.0.0.1", 9092 + x, None, now,
                                        previous_broker_epoch=-1))
        epochs[x] = res.broker_epoch
        h.run(h.c.broker_heartbeat(x, epochs[x], len(h.log), False, False, now))
        now += 10
        if x == b:                                # a, the last ISR member, is not back yet
            assert _p(h).leader == -1 and _p(h).isr == (a,) and _p(h).elr == ()
    p = _p(h)
    assert p.leader == a and p.isr == (a,) and p.elr == () and p.last_known_elr == ()
