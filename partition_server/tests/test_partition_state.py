"""The pure replication state machine: HW, ISR shrink/expand, epochs."""

from partition_server.replication.partition import PartitionState, Role


class FakeLog:
    def __init__(self, leo=0):
        self.log_end_offset = leo
        self.log_start_offset = 0


def leader(leo=10, isr=(0, 1, 2), replicas=(0, 1, 2), now=0):
    log = FakeLog(leo)
    p = PartitionState("t", 0, 0, log)
    assert p.become_leader(leader_epoch=1, partition_epoch=1, replicas=list(replicas),
                           isr=list(isr), now_ms=now)
    return p, log


def test_new_leader_waits_for_every_isr_member_before_moving_hw():
    p, log = leader(leo=10)
    assert p.high_watermark == 0
    p.update_follower_fetch(1, 10, now_ms=1)
    assert p.high_watermark == 0          # replica 2 unknown in this epoch
    assert p.update_follower_fetch(2, 7, now_ms=1)
    assert p.high_watermark == 7
    p.update_follower_fetch(2, 10, now_ms=2)
    assert p.high_watermark == 10


def test_hw_never_moves_backwards():
    p, log = leader(leo=10)
    p.update_follower_fetch(1, 10, 1)
    p.update_follower_fetch(2, 10, 1)
    assert p.high_watermark == 10
    p.update_follower_fetch(2, 5, 2)      # a restarted follower reports less
    assert p.high_watermark == 10


def test_single_member_isr_hw_follows_local_appends():
    p, log = leader(leo=0, isr=(0,), replicas=(0,))
    log.log_end_offset = 5
    assert p.after_local_append()
    assert p.high_watermark == 5


def test_lagging_follower_is_proposed_out_and_hw_uses_maximal_isr_meanwhile():
    p, log = leader(leo=10, now=0)
    p.update_follower_fetch(1, 10, 100)
    p.update_follower_fetch(2, 4, 100)     # replica 2 is behind and stays behind
    assert p.isr_change_needed(now_ms=200, replica_lag_time_max_ms=1000) is None
    change = p.isr_change_needed(now_ms=1050, replica_lag_time_max_ms=1000)
    assert change is not None and change.new_isr == (0, 1)
    # While pending, replica 2 still holds the HW back (maximal ISR), and committed ISR is 3.
    log.log_end_offset = 20
    p.update_follower_fetch(1, 20, 1102)
    assert p.high_watermark == 4
    assert p.in_sync_count() == 3
    assert p.isr_change_needed(now_ms=1200, replica_lag_time_max_ms=1000) is None  # one at a time
    # The controller commits the shrink: the metadata image re-applies leadership, same epoch.
    p.become_leader(1, 2, [0, 1, 2], [0, 1], now_ms=1203)
    p.maybe_advance_high_watermark()
    assert p.high_watermark == 20
    assert p.in_sync_count() == 2


def test_caught_up_follower_is_proposed_back_in():
    p, log = leader(leo=10, isr=(0, 1), now=0)
    p.update_follower_fetch(1, 10, 1)
    assert p.high_watermark == 10
    p.update_follower_fetch(2, 3, 2)
    assert p.isr_change_needed(3, 1000) is None     # not yet at the high watermark
    p.update_follower_fetch(2, 10, 4)
    change = p.isr_change_needed(5, 1000)
    assert change.new_isr == (0, 1, 2)
    p.isr_change_failed()
    assert p.pending_isr is None


def test_only_an_eligible_broker_is_proposed_back_in():
    """KIP-841: a caught-up follower whose broker the metadata shows fenced (it just died) is
    not proposed; once unfenced it is."""
    p, log = leader(leo=10, isr=(0, 1), now=0)
    p.update_follower_fetch(1, 10, 1)
    p.update_follower_fetch(2, 10, 4)
    assert p.isr_change_needed(5, 1000, eligible=lambda b: b != 2) is None
    assert p.isr_change_needed(6, 1000, eligible=lambda b: True).new_isr == (0, 1, 2)


def test_follower_that_keeps_up_with_moving_leader_counts_as_caught_up():
    p, log = leader(leo=10)
    p.update_follower_fetch(1, 10, 0)
    for t in range(1, 50):
        log.log_end_offset += 5                  # the leader keeps appending
        p.update_follower_fetch(1, log.log_end_offset - 5, t * 100)  # one fetch behind
    assert p.followers[1].last_caught_up_ms >= 4700


def test_stale_epoch_changes_are_ignored():
    p, log = leader()
    assert p.become_leader(3, 3, [0, 1, 2], [0, 1, 2], 0)
    assert not p.become_follower(1, 2, 2, [0, 1, 2], [0, 1, 2])
    assert p.role is Role.LEADER and p.leader_epoch == 3
    assert p.become_follower(1, 4, 4, [0, 1, 2], [0, 1, 2])
    assert p.role is Role.FOLLOWER and p.leader_id == 1


def test_follower_hw_is_capped_by_local_log():
    log = FakeLog(5)
    p = PartitionState("t", 0, 1, log)
    p.become_follower(0, 1, 1, [0, 1], [0, 1])
    p.update_follower_high_watermark(9)
    assert p.high_watermark == 5
    log.log_end_offset = 12
    p.update_follower_high_watermark(9)
    assert p.high_watermark == 9
    p.truncated_to(7)
    assert p.high_watermark == 7


def test_older_partition_epoch_of_the_same_leader_epoch_is_ignored():
    """An AlterPartition answer (partition epoch 2) arriving after the metadata stream already
    applied the controller's own shrink (partition epoch 3) must not bring the old ISR back."""
    p, _ = leader()
    assert p.become_leader(1, 3, [0, 1, 2], [0, 1], 5)            # from the metadata stream
    assert not p.become_leader(1, 2, [0, 1, 2], [0, 1, 2], 6)     # late AlterPartition answer
    assert p.isr == (0, 1) and p.partition_epoch == 3
    assert not p.become_follower(2, 1, 2, [0, 1, 2], [0, 1, 2])
    assert p.become_follower(2, 2, 0, [0, 1, 2], [2])             # a newer leader epoch wins
    assert p.role is Role.FOLLOWER and p.isr == (2,)


def test_uncertain_isr_expansion_stays_pending_and_is_sent_again():
    """Seed 30 of the simulation: an expansion to {0,1,2} timed out but the controller had
    committed it. Forgetting it let the high watermark pass replica 2's end while the
    controller counted 2 in the ISR (and could elect it)."""
    p, log = leader(leo=155, isr=(0, 1))
    p.update_follower_fetch(1, 155, now_ms=1)
    p.update_follower_fetch(2, 155, now_ms=1)
    assert p.high_watermark == 155
    change = p.isr_change_needed(now_ms=2, replica_lag_time_max_ms=1000)
    assert change.new_isr == (0, 1, 2)
    assert p.isr_change_needed(now_ms=3, replica_lag_time_max_ms=1000) is None     # in flight
    p.isr_change_uncertain()                                # the request timed out
    log.log_end_offset = 156
    p.update_follower_fetch(1, 156, now_ms=4)
    assert p.high_watermark == 155                          # still waits for replica 2
    again = p.isr_change_needed(now_ms=5, replica_lag_time_max_ms=1000)
    assert again == change                                  # the same change, sent again
    assert p.isr_change_needed(now_ms=6, replica_lag_time_max_ms=1000) is None
    # every metadata image re-applies every partition: the unchanged state keeps the proposal
    assert not p.become_leader(1, 1, [0, 1, 2], [0, 1], 7)
    assert p.pending_isr == (0, 1, 2) and p.high_watermark == 155
    assert p.become_leader(1, 2, [0, 1, 2], [0, 1, 2], 8)   # the committed change arrives
    assert p.pending_isr is None and p.isr == (0, 1, 2)


def test_definite_refusal_forgets_the_pending_change():
    p, _ = leader(leo=10, isr=(0, 1))
    p.update_follower_fetch(1, 10, now_ms=1)
    p.update_follower_fetch(2, 10, now_ms=1)
    assert p.isr_change_needed(now_ms=2, replica_lag_time_max_ms=1000).new_isr == (0, 1, 2)
    p.isr_change_failed()
    assert p.pending_isr is None
    assert p.isr_change_needed(now_ms=3, replica_lag_time_max_ms=1000).new_isr == (0, 1, 2)


def test_a_replica_joins_the_isr_only_past_the_leaders_epoch_start():
    p, log = leader(leo=100, isr=(0, 1))          # became leader with log end 100, HW 0
    p.update_follower_fetch(1, 100, now_ms=1)
    assert p.high_watermark == 100
    p.update_follower_fetch(2, 97, now_ms=2)
    assert p.isr_change_needed(now_ms=3, replica_lag_time_max_ms=1000) is None
    p.update_follower_fetch(2, 100, now_ms=4)
    assert p.isr_change_needed(now_ms=5, replica_lag_time_max_ms=1000).new_isr == (0, 1, 2)


def test_session_fetches_keep_an_idle_caught_up_follower_in_the_isr():
    """KIP-227: a follower's session fetch reads only partitions that changed; an idle partition
    whose follower is at the log end stays caught up as long as the session keeps fetching."""
    from partition_server.replication.partition import FetchClock
    p, log = leader(leo=10, now=0)
    clock1, clock2 = FetchClock(100), FetchClock(100)
    p.update_follower_fetch(1, 10, 100, clock1)
    p.update_follower_fetch(2, 10, 100, clock2)
    clock1.last_fetch_ms = clock2.last_fetch_ms = 5_000     # later fetches that did not read it
    assert p.caught_up_ms(1) == 5_000
    assert p.isr_change_needed(now_ms=5_500, replica_lag_time_max_ms=1000) is None
    # the session of replica 2 stopped fetching (paused process): it falls out
    clock1.last_fetch_ms = 7_000
    change = p.isr_change_needed(now_ms=7_000, replica_lag_time_max_ms=1000)
    assert change.new_isr == (0, 1)
    p.isr_change_failed()
    # the leader's log grows: replica 1 was caught up as of its session's last fetch before it
    clock1.last_fetch_ms = 9_000
    log.log_end_offset = 11
    p.after_local_append()
    clock1.last_fetch_ms = 9_500              # a later fetch, before it read the new record
    assert p.caught_up_ms(1) == 9_000
    p.update_follower_fetch(1, 11, 9_600, clock1)
    assert p.caught_up_ms(1) == 9_600
    # a closed session, or the partition leaving it, stops counting
    clock1.last_fetch_ms = 12_000
    assert p.caught_up_ms(1) == 12_000
    clock1.alive = False
    assert p.caught_up_ms(1) == 9_600
    clock1.alive = True
    p.follower_left_session(1)
    assert p.caught_up_ms(1) == 9_600


def test_offsets_not_available_until_the_new_leaders_hw_reaches_its_epoch_start():
    # found by the campaign (seed 11, round 2): right after a leader change ListOffsets
    # answered the lagging high watermark, so an acknowledged, already-read record at the end
    # of the log seemed gone to the final read
    p, log = leader(leo=10)
    assert p.epoch_start_offset == 10 and not p.offsets_available()
    p.update_follower_fetch(1, 10, now_ms=1)
    p.update_follower_fetch(2, 8, now_ms=1)
    assert p.high_watermark == 8 and not p.offsets_available()
    p.update_follower_fetch(2, 10, now_ms=2)
    assert p.offsets_available()
    log.log_end_offset = 15                      # later appends do not take it back
    assert p.offsets_available()
    follower = PartitionState("t", 0, 1, FakeLog(3))
    assert follower.offsets_available()          # not the leader: the caller says so instead


# -- the one-pass high-watermark advance against its definition -------------------------------

from hypothesis import example, given, strategies as st                          # noqa: E402

from partition_server.replication.partition import FollowerState, UNKNOWN_OFFSET   # noqa: E402


def _reference_hw(p: PartitionState, hw_before: int) -> int:
    """The minimum log end offset over the maximal ISR and the leader (the list-based form the
    one pass replaced), or the old HW when a member's position is unknown or it is lower."""
    members = p.maximal_isr
    offsets = [p.replica_log_end_offset(r) for r in members]
    if p.broker_id not in members:
        offsets.append(p.log.log_end_offset)
    if any(o == UNKNOWN_OFFSET for o in offsets):
        return hw_before
    return max(hw_before, min(offsets))


@given(leo=st.integers(10, 60), hw=st.integers(0, 10),
       isr=st.sets(st.integers(0, 4), max_size=5), pending=st.none() | st.sets(st.integers(0, 4)),
       positions=st.fixed_dictionaries({}, optional={r: st.integers(-1, 60) for r in (1, 2, 3, 4)}),
       min_isr=st.integers(1, 3))
@example(leo=20, hw=0, isr={0, 1}, pending={0, 1, 2}, positions={1: 15, 2: 5}, min_isr=1)
def test_high_watermark_advance_matches_its_definition(leo, hw, isr, pending, positions, min_isr):
    """Committed ISR, a pending (maximal) one, the leader in it or not, unknown positions."""
    log = FakeLog(leo)
    p = PartitionState("t", 0, 0, log, high_watermark=hw)
    p.role = Role.LEADER
    p.isr = tuple(sorted(isr))
    p.pending_isr = tuple(sorted(pending)) if pending is not None else None
    p.min_insync_replicas = min_isr
    p.followers = {r: FollowerState(log_end_offset=o) for r, o in positions.items()}
    before = p.high_watermark
    expected = before if len(p.isr) < min_isr else _reference_hw(p, before)
    moved = p.maybe_advance_high_watermark()
    assert p.high_watermark == expected
    assert moved == (expected > before)
