"""Replication state of one partition on one broker: a pure state machine (no I/O, no clock).

States and transitions (driven by the metadata image, never by peers):

    NONE ──become_leader(epoch)──▶ LEADER(epoch) ──become_follower(epoch' > epoch)──▶ FOLLOWER
    NONE ──become_follower(epoch)──▶ FOLLOWER(epoch, leader_id) ──become_leader(epoch' ≥ epoch)──▶ LEADER
    any  ──stop_replica()──▶ NONE            (partition deleted or this broker removed)

A change older than the current (leader epoch, partition epoch) is stale and ignored; one equal
to it is already applied and changes nothing (the broker applies only changed partitions of
each metadata image, but a config change or a snapshot load re-applies unchanged ones).

Leader side, as Kafka's `Partition` (KIP-101 leader epochs, KIP-497 AlterPartition, KIP-841):
- each follower's log end offset is the fetch offset it last sent; its `last_caught_up_ms` moves
  to the fetch time when that fetch offset reached the leader's log end offset as of this fetch or
  the previous one (so a follower that keeps up under steady load counts as caught up);
- the ISR changes only through AlterPartition, one change in flight at a time. While a change is
  pending, the high watermark is computed over the *maximal* ISR (current ∪ pending additions):
  an expansion counts the new member at once, a shrink counts the leaving member until the
  controller has committed the change, so the high watermark never gets ahead of what the
  committed ISR holds. A pending change is dropped only when the controller refuses it against
  the current partition epoch (`isr_change_failed`) or the metadata stream brings a newer
  partition state; with no answer or an ambiguous one it stays pending and is sent again
  (`isr_change_uncertain`) — an earlier attempt may have been committed. `min.insync.replicas`
  is judged on the committed ISR;
- a replica joins the ISR once its log end offset reaches both the high watermark and the
  leader's epoch start offset (our log end when this epoch began): right after a leader change
  the high watermark lags, and joining at it could admit a replica missing committed records;
- the high watermark is the minimum log end offset over the maximal ISR and only moves forward;
  after become_leader every follower's offset is unknown, so the high watermark waits for every
  ISR member to fetch in the new epoch;
- KIP-966: the high watermark does not move while the committed ISR is smaller than
  `min.insync.replicas` (capped at the replication factor). Replicas that left an ISR that went
  below it become eligible leaders at the controller, which is only safe if nothing is committed
  without them meanwhile. (acks=all writes are refused then anyway; acks=1 writes wait.)

Follower side: the high watermark is the leader's, capped by the local log end offset.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Protocol


class Role(enum.Enum):
    NONE = "none"
    LEADER = "leader"
    FOLLOWER = "follower"


class LogLike(Protocol):
    """What the state machine needs from a partition log."""

    @property
    def log_end_offset(self) -> int: ...

    @property
    def log_start_offset(self) -> int: ...


UNKNOWN_OFFSET = -1


class FetchClock:
    """When a follower's incremental fetch session (KIP-227) last fetched, shared by every
    partition of the session: a session fetch reads only partitions that changed, so an idle
    partition's follower state is not touched, yet the fetch covers it. `alive` goes False when
    the session is closed or evicted."""

    __slots__ = ("last_fetch_ms", "alive")

    def __init__(self, now_ms: int = 0):
        self.last_fetch_ms = now_ms
        self.alive = True


@dataclasses.dataclass
class FollowerState:
    log_end_offset: int = UNKNOWN_OFFSET
    last_caught_up_ms: int = 0
    last_fetch_leader_leo: int = UNKNOWN_OFFSET
    last_fetch_ms: int = 0
    fetch_clock: FetchClock | None = None     # the session this partition is fetched in


@dataclasses.dataclass(frozen=True)
class IsrChange:
    """An AlterPartition proposal for the controller (effect)."""
    topic: str
    partition: int
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[int, ...]


class PartitionState:
    def __init__(self, topic: str, partition: int, broker_id: int, log: LogLike,
                 high_watermark: int = 0):
        self.topic = topic
        self.partition = partition
        self.broker_id = broker_id
        self.log = log
        self.role = Role.NONE
        self.leader_id = -1
        self.leader_epoch = -1
        self.partition_epoch = -1
        self.replicas: tuple[int, ...] = ()
        self.isr: tuple[int, ...] = ()
        self.pending_isr: tuple[int, ...] | None = None
        self._resend_isr = False
        self.min_insync_replicas = 1          # effective (capped at the replication factor)
        self.epoch_start_offset = 0           # our log end when we became leader (this epoch)
        self.followers: dict[int, FollowerState] = {}
        # A restarted broker only knows the high watermark it checkpointed (or 0); it is never
        # above the local log end offset.
        self._high_watermark = min(high_watermark, log.log_end_offset)
        self.on_high_watermark_change = None  # the replica manager's checkpoint dirty mark
        self._leo_seen = log.log_end_offset   # our log end as of the last local append

    # -- transitions ---------------------------------------------------------------------------

    def _stale(self, leader_epoch: int, partition_epoch: int) -> bool:
        """Older than what we applied. An AlterPartition answer can arrive after the metadata
        stream already delivered a newer change of the same leader epoch (the controller shrank
        the ISR meanwhile): applying it would bring back an old ISR."""
        return (leader_epoch, partition_epoch) < (self.leader_epoch, self.partition_epoch)

    def offsets_available(self) -> bool:
        """Whether a client may be told offsets by this leader (Kafka's OFFSET_NOT_AVAILABLE
        check in fetchOffsetForTimestamp). Right after a leader change our high watermark lags
        the previous leader's until every ISR member has fetched in this epoch: answering
        "the log ends at the high watermark" then would show a client the end of the log going
        back, past records that were acknowledged and read."""
        return self.role is not Role.LEADER or self.high_watermark >= self.epoch_start_offset

    def become_leader(self, leader_epoch: int, partition_epoch: int, replicas: list[int],
                      isr: list[int], now_ms: int) -> bool:
        """Apply a metadata change naming this broker leader; False if it is stale or already
        applied (a config change or snapshot load re-applies unchanged partitions: one must
        not drop an AlterPartition in flight)."""
        if self._stale(leader_epoch, partition_epoch) or (
                self.role is Role.LEADER and
                (leader_epoch, partition_epoch) == (self.leader_epoch, self.partition_epoch)):
            return False
        new_epoch = leader_epoch > self.leader_epoch or self.role is not Role.LEADER
        self.role = Role.LEADER
        self.leader_id = self.broker_id
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.replicas = tuple(replicas)
        self.isr = tuple(isr)
        self.pending_isr = None
        self._resend_isr = False
        if new_epoch:
            # Everything committed before this epoch is below our log end now: a replica must
            # reach it before it may join the ISR (Kafka's leaderEpochStartOffset).
            self.epoch_start_offset = self.log.log_end_offset
            # Followers' positions from an older epoch say nothing about the new one.
            self.followers = {r: FollowerState(last_caught_up_ms=now_ms)
                              for r in replicas if r != self.broker_id}
        else:
            self.followers = {r: self.followers.get(r, FollowerState(last_caught_up_ms=now_ms))
                              for r in replicas if r != self.broker_id}
        self._leo_seen = self.log.log_end_offset
        self.maybe_advance_high_watermark()
        return True

    def become_follower(self, leader_id: int, leader_epoch: int, partition_epoch: int,
                        replicas: list[int], isr: list[int]) -> bool:
        if self._stale(leader_epoch, partition_epoch):
            return False
        if self.role is Role.FOLLOWER and leader_id == self.leader_id and \
                (leader_epoch, partition_epoch) == (self.leader_epoch, self.partition_epoch):
            return False
        self.role = Role.FOLLOWER
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.replicas = tuple(replicas)
        self.isr = tuple(isr)
        self.pending_isr = None
        self._resend_isr = False
        self.followers = {}
        return True

    def restart_followers(self, replica_ids, now_ms: int) -> None:
        """Forget the fetch positions of these followers outside the ISR: a reassignment's
        adding replicas (KIP-455). One removed and added back between two images we applied
        (both changes in one metadata batch) is a new, empty replica; its old position must not
        let it join the ISR before it has fetched again (found by the seeded simulation)."""
        for r in replica_ids:
            if r in self.followers and r not in self.isr:
                self.followers[r] = FollowerState(last_caught_up_ms=now_ms)

    def stop_replica(self) -> None:
        self.role = Role.NONE
        self.leader_id = -1
        self.followers = {}
        self.pending_isr = None

    # -- leader side ---------------------------------------------------------------------------

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        if self.pending_isr is None:
            return self.isr
        return tuple(sorted(set(self.isr) | set(self.pending_isr)))

    def in_sync_count(self) -> int:
        """Committed ISR size, the figure `min.insync.replicas` is checked against."""
        return len(self.isr)

    def replica_log_end_offset(self, replica_id: int) -> int:
        if replica_id == self.broker_id:
            return self.log.log_end_offset
        state = self.followers.get(replica_id)
        return state.log_end_offset if state else UNKNOWN_OFFSET

    def maybe_advance_high_watermark(self) -> bool:
        """Move the high watermark to the minimum log end offset of the maximal ISR."""
        if self.role is not Role.LEADER or len(self.isr) < self.min_insync_replicas:
            return False
        # the minimum in one pass, without lists: this runs for every follower fetch position
        # of every partition (the leader's own log end always counts, in the ISR or not)
        candidate = self.log.log_end_offset
        me, followers = self.broker_id, self.followers
        for r in self.maximal_isr:          # the committed ISR itself, unless one is pending
            if r != me:
                state = followers.get(r)
                offset = state.log_end_offset if state is not None else UNKNOWN_OFFSET
                if offset == UNKNOWN_OFFSET:
                    return False
                if offset < candidate:
                    candidate = offset
        if candidate > self._high_watermark:
            self._set_high_watermark(candidate)
            return True
        return False

    def update_follower_fetch(self, replica_id: int, fetch_offset: int, now_ms: int,
                              fetch_clock: FetchClock | None = None) -> bool:
        """Record a follower's fetch; returns True when the high watermark moved.
        `fetch_clock`: the follower's fetch session, whose later fetches keep this partition
        caught up while neither side's log end moves (see `caught_up_ms`)."""
        state = self.followers.get(replica_id)
        if state is None or self.role is not Role.LEADER:
            return False
        state.fetch_clock = fetch_clock
        leader_leo = self.log.log_end_offset
        if fetch_offset >= leader_leo:
            state.last_caught_up_ms = now_ms
        elif (state.last_fetch_leader_leo != UNKNOWN_OFFSET
              and fetch_offset >= state.last_fetch_leader_leo):
            # Caught up to where the leader was at the previous fetch: caught up as of then.
            state.last_caught_up_ms = max(state.last_caught_up_ms, state.last_fetch_ms)
        state.log_end_offset = fetch_offset
        state.last_fetch_leader_leo = leader_leo
        state.last_fetch_ms = now_ms
        return self.maybe_advance_high_watermark()

    def follower_left_session(self, replica_id: int) -> None:
        """The follower's session no longer holds this partition: its fetches stop counting."""
        state = self.followers.get(replica_id)
        if state is not None:
            state.fetch_clock = None

    def caught_up_ms(self, replica_id: int) -> int:
        """When the follower was last known caught up. A follower whose last fetch offset is
        our log end offset, fetching in a live session that holds this partition, is caught up
        as of the session's last fetch: had our log end moved, the session would have read the
        partition again and `update_follower_fetch` would have judged it."""
        state = self.followers[replica_id]
        clock = state.fetch_clock
        if clock is not None and clock.alive and state.log_end_offset >= self.log.log_end_offset:
            return max(state.last_caught_up_ms, clock.last_fetch_ms)
        return state.last_caught_up_ms

    def after_local_append(self) -> bool:
        """The leader's own log grew; with a single-member ISR that alone moves the HW."""
        # A follower that was at the log end before this append, fetching in a session, was
        # caught up as of the session's last fetch (the log end did not move until now):
        # remember it, as `caught_up_ms` can no longer tell once the log end has moved.
        before, self._leo_seen = self._leo_seen, self.log.log_end_offset
        for state in self.followers.values():
            clock = state.fetch_clock
            if clock is not None and clock.alive and state.log_end_offset >= before:
                state.last_caught_up_ms = max(state.last_caught_up_ms, clock.last_fetch_ms)
        return self.maybe_advance_high_watermark()

    def isr_change_needed(self, now_ms: int, replica_lag_time_max_ms: int,
                          eligible=None) -> IsrChange | None:
        """Propose one ISR shrink (laggards) or expansion (caught-up replicas), if any; or the
        pending one again when its outcome was left uncertain. `eligible(broker_id)` (KIP-841):
        only a broker the metadata shows unfenced may join — a follower that just died looks
        caught up for up to replica.lag.time.max.ms, and the controller would refuse it
        (INELIGIBLE_REPLICA) on every tick until then."""
        if self.role is not Role.LEADER:
            return None
        if self.pending_isr is not None:
            if not self._resend_isr:
                return None
            self._resend_isr = False
            return IsrChange(self.topic, self.partition, self.leader_epoch, self.partition_epoch,
                             self.pending_isr)
        lagging = [r for r in self.isr if r != self.broker_id and r in self.followers
                   and now_ms - self.caught_up_ms(r) > replica_lag_time_max_ms]
        if lagging:
            new_isr = tuple(r for r in self.isr if r not in lagging)
        else:
            joining = [r for r, s in self.followers.items()
                       if r not in self.isr and s.log_end_offset != UNKNOWN_OFFSET
                       and s.log_end_offset >= self._high_watermark
                       and s.log_end_offset >= self.epoch_start_offset
                       and now_ms - self.caught_up_ms(r) <= replica_lag_time_max_ms
                       and (eligible is None or eligible(r))]
            if not joining:
                return None
            new_isr = tuple(sorted(set(self.isr) | set(joining)))
        self.pending_isr = new_isr
        return IsrChange(self.topic, self.partition, self.leader_epoch, self.partition_epoch,
                         new_isr)

    def isr_change_failed(self) -> None:
        """The controller refused the change against our current partition epoch (so neither
        this nor an earlier attempt was applied): forget it; the next tick may propose again."""
        self.pending_isr = None
        self._resend_isr = False

    def isr_change_uncertain(self) -> None:
        """No answer, or an answer that does not prove the change was not applied (an earlier
        attempt may have been committed: the controller's ISR may already include a replica we
        would leave out). Keep the pending ISR — the high watermark stays computed over the
        union, as Kafka's pending ISR states do — and send it again on the next tick; the
        metadata stream settles it either way."""
        self._resend_isr = True

    # -- follower side -------------------------------------------------------------------------

    def update_follower_high_watermark(self, leader_high_watermark: int) -> None:
        if self.role is Role.FOLLOWER:
            hw = min(leader_high_watermark, self.log.log_end_offset)
            self._set_high_watermark(max(self._high_watermark, hw))

    def truncated_to(self, offset: int) -> None:
        """The local log was truncated (divergence); the HW cannot exceed the new end."""
        self._set_high_watermark(min(self._high_watermark, offset))

    def _set_high_watermark(self, value: int) -> None:
        if value != self._high_watermark:
            self._high_watermark = value
            if self.on_high_watermark_change is not None:
                self.on_high_watermark_change()
