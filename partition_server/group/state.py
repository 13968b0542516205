"""Classic consumer-group membership as a pure state machine (Kafka's GroupCoordinator, KIP-62,
KIP-345 static membership, KIP-394 member id required). No I/O, no clock: callers pass `now_ms`
and deliver the returned effects (delayed JoinGroup/SyncGroup answers).

States and transitions:

    EMPTY ──join──▶ PREPARING_REBALANCE ──all known members joined (after the initial delay for
        a new group) or rebalance timeout──▶ COMPLETING_REBALANCE (generation + 1, leader chosen,
        join answers sent) ──leader's SyncGroup──▶ (StoreGroup effect: the caller makes the
        group record durable) ──stored()──▶ STABLE (assignments sent)
        or ──store failed──▶ PREPARING_REBALANCE (the error sent to every waiting member)
    STABLE / COMPLETING_REBALANCE ──join of a new member, leave, session expiry, changed
        protocols──▶ PREPARING_REBALANCE
    PREPARING_REBALANCE ──rebalance completes with no member──▶ EMPTY (generation + 1)
    any ──group deleted──▶ DEAD

Error codes: UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS, MEMBER_ID_REQUIRED,
INCONSISTENT_GROUP_PROTOCOL, FENCED_INSTANCE_ID, INVALID_SESSION_TIMEOUT, GROUP_ID_NOT_FOUND,
NON_EMPTY_GROUP.

Timers: `tick` looks only at groups with a deadline due (timers.py): a group is scheduled at the
earliest of its members' session expiries (members waiting in JoinGroup/SyncGroup excluded: they
cannot heartbeat), its pending member ids' expiries and, while preparing a rebalance, the
rebalance timeout and the initial delay. Heartbeats only push deadlines later, so they never
touch the heap; a join schedules its member's session, and the once-per-rebalance transitions
(rebalance started or completed, generation stored, members left) recompute the group's
deadline. `changed` names the groups a call may have changed (not heartbeats), so the
coordinator persists and logs only those.
"""

from __future__ import annotations

import dataclasses
import enum
import uuid

from partition_server.group.timers import INF, DeadlineHeap
from wire.errors import ErrorCode
from wire.messages.consumer_protocol_subscription_generated import ConsumerProtocolSubscription


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclasses.dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list                     # [(name, metadata bytes)] in preference order
    assignment: bytes = b""
    last_heartbeat_ms: int = 0


@dataclasses.dataclass
class JoinResult:
    member_id: str
    error: ErrorCode = ErrorCode.NONE
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    members: list = dataclasses.field(default_factory=list)   # [(member_id, instance_id, metadata)]


@dataclasses.dataclass
class SyncResult:
    member_id: str
    error: ErrorCode = ErrorCode.NONE
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclasses.dataclass
class StoreGroup:
    """Effect: persist the group record of `generation_id` (acks=all) and then call
    `GroupCoordinatorState.stored`. As in Kafka, no member learns its assignment before the
    generation is durable, so a coordinator failover never forgets a generation whose members
    already run with it (they would all have to rejoin)."""
    group_id: str
    generation_id: int


@dataclasses.dataclass
class GroupConfig:
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    initial_rebalance_delay_ms: int = 3000


class Group:
    def __init__(self, group_id: str):
        self.group_id = group_id
        self.state = GroupState.EMPTY
        self.generation_id = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, Member] = {}
        self.static: dict[str, str] = {}            # group.instance.id → member id
        self.pending_join: set[str] = set()
        self.pending_sync: set[str] = set()
        self.pending_members: dict[str, int] = {}   # ids handed out by MEMBER_ID_REQUIRED
        self.rebalance_deadline_ms = 0
        self.initial_delay_until_ms = 0
        self.storing: int | None = None             # generation whose record is being stored

    # -- helpers ----------------------------------------------------------------------------------

    def _join_result(self, member_id: str) -> JoinResult:
        members = []
        if member_id == self.leader_id:
            members = [(m.member_id, m.group_instance_id, dict(m.protocols)[self.protocol_name])
                       for m in self.members.values()]
        return JoinResult(member_id, ErrorCode.NONE, self.generation_id, self.protocol_type,
                          self.protocol_name, self.leader_id or "", members)

    def _select_protocol(self) -> str | None:
        common = None
        for m in self.members.values():
            names = {n for n, _ in m.protocols}
            common = names if common is None else common & names
        if not common:
            return None
        votes = {n: 0 for n in common}
        for m in self.members.values():
            first = next(n for n, _ in m.protocols if n in common)
            votes[first] += 1
        return max(sorted(common), key=lambda n: votes[n])

    def _prepare_rebalance(self, now_ms: int) -> list:
        timeout = max((m.rebalance_timeout_ms for m in self.members.values()), default=0)
        if self.state is not GroupState.PREPARING_REBALANCE:
            self.rebalance_deadline_ms = now_ms + timeout
        self.state = GroupState.PREPARING_REBALANCE
        self.storing = None                         # a store in flight answers no one now
        # Members waiting in SyncGroup for the old generation are answered now with
        # REBALANCE_IN_PROGRESS so they rejoin at once (instead of waiting out the rebalance
        # timeout, which is max.poll.interval.ms — minutes — for most clients); their session
        # restarts from this answer.
        effects = []
        for mid in sorted(self.pending_sync):
            if mid in self.members:
                self.members[mid].last_heartbeat_ms = now_ms
            effects.append(SyncResult(mid, ErrorCode.REBALANCE_IN_PROGRESS))
        self.pending_sync.clear()
        return effects

    def _complete_join(self, now_ms: int) -> list:
        effects: list = []
        for mid in list(self.members):
            if mid not in self.pending_join:
                self._remove(mid)
        # Every member that made it into the new generation starts a fresh session now (Kafka
        # reschedules each member's heartbeat expiry when the join completes). Without this a
        # member that joined early and then waited the whole rebalance in JoinGroup — longer than
        # its session timeout on a slow machine — was expired right after the join completed,
        # which started another rebalance, and so on.
        for m in self.members.values():
            m.last_heartbeat_ms = now_ms
        self.generation_id += 1
        if not self.members:
            self.state = GroupState.EMPTY
            self.protocol_name = None
            self.leader_id = None
            return effects
        self.protocol_name = self._select_protocol()
        if self.leader_id not in self.members:
            self.leader_id = next(iter(self.members))
        self.state = GroupState.COMPLETING_REBALANCE
        for mid in sorted(self.pending_join, key=lambda m: m != self.leader_id):
            effects.append(self._join_result(mid))
        self.pending_join.clear()
        return effects

    def _remove(self, member_id: str) -> None:
        m = self.members.pop(member_id, None)
        if m is not None and m.group_instance_id is not None:
            self.static.pop(m.group_instance_id, None)
        self.pending_join.discard(member_id)
        self.pending_sync.discard(member_id)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)

    def next_deadline_ms(self, now_ms: int) -> float:
        """The earliest moment at which `tick` may have something to do. It may be past: a
        member out of SyncGroup whose session ran out while it waited goes on the next tick."""
        waiting = self.pending_join | self.pending_sync
        deadlines = [m.last_heartbeat_ms + m.session_timeout_ms + 1
                     for mid, m in self.members.items() if mid not in waiting]
        deadlines += [expiry + 1 for expiry in self.pending_members.values()]
        if self.state is GroupState.PREPARING_REBALANCE:
            deadlines.append(self.rebalance_deadline_ms)
            if self.initial_delay_until_ms > now_ms:
                # once past, the delay no longer completes anything by itself (joins do)
                deadlines.append(self.initial_delay_until_ms)
        return min(deadlines, default=INF)

    def ready_to_complete_join(self, now_ms: int) -> bool:
        if self.state is not GroupState.PREPARING_REBALANCE:
            return False
        if now_ms >= self.rebalance_deadline_ms:
            return True
        return (set(self.members) <= self.pending_join and bool(self.pending_join)
                and now_ms >= self.initial_delay_until_ms)


class GroupCoordinatorState:
    """All groups of one coordinator; every method returns (result, effects)."""

    def __init__(self, config: GroupConfig | None = None):
        self.config = config or GroupConfig()
        self.groups: dict[str, Group] = {}
        self.timers = DeadlineHeap()
        self.changed: set[str] = set()

    def restored(self, g: Group, now_ms: int) -> None:
        """Install a group rebuilt from its record (a coordinator failover) with its timers."""
        self.groups[g.group_id] = g
        self.changed.add(g.group_id)
        self._reschedule(g, now_ms)

    def take_changed(self) -> set[str]:
        """The ids of the groups changed since the last call (some may be gone since)."""
        changed, self.changed = self.changed, set()
        return changed

    def _reschedule(self, g: Group, now_ms: int) -> None:
        self.timers.schedule(g, g.next_deadline_ms(now_ms))

    def group(self, group_id: str) -> Group:
        g = self.groups.get(group_id)
        if g is None or g.state is GroupState.DEAD:
            g = self.groups[group_id] = Group(group_id)
        return g

    # -- JoinGroup --------------------------------------------------------------------------------

    def join(self, group_id: str, member_id: str, instance_id: str | None, client_id: str,
             client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int,
             protocol_type: str, protocols: list, require_member_id: bool, now_ms: int):
        """Returns (JoinResult now | None to wait, effects, member id used)."""
        cfg = self.config
        if not (cfg.min_session_timeout_ms <= session_timeout_ms <= cfg.max_session_timeout_ms):
            return JoinResult(member_id, ErrorCode.INVALID_SESSION_TIMEOUT), [], member_id
        g = self.group(group_id)
        self.changed.add(group_id)
        # the joining member's session (or its pending member id) runs from now
        self.timers.schedule(g, now_ms + session_timeout_ms + 1)
        if not protocols or not protocol_type or (
                g.members and g.protocol_type is not None and protocol_type != g.protocol_type):
            return JoinResult(member_id, ErrorCode.INCONSISTENT_GROUP_PROTOCOL), [], member_id
        if g.members and g.state is not GroupState.PREPARING_REBALANCE and \
                not ({n for n, _ in protocols} & {n for m in g.members.values() for n, _ in m.protocols}):
            return JoinResult(member_id, ErrorCode.INCONSISTENT_GROUP_PROTOCOL), [], member_id
        if instance_id is not None and instance_id in g.static:
            old = g.static[instance_id]
            if member_id and member_id != old:
                return JoinResult(member_id, ErrorCode.FENCED_INSTANCE_ID), [], member_id
            member_id = old                      # a static member comes back under its old id
        if not member_id:
            member_id = f"{client_id or 'member'}-{uuid.uuid4()}"
            if require_member_id and instance_id is None:
                # KIP-394: hand out the id first; the member rejoins with it
                g.pending_members[member_id] = now_ms + session_timeout_ms
                return JoinResult(member_id, ErrorCode.MEMBER_ID_REQUIRED), [], member_id
        elif member_id not in g.members:
            if g.pending_members.pop(member_id, None) is None:
                return JoinResult(member_id, ErrorCode.UNKNOWN_MEMBER_ID), [], member_id
        existing = g.members.get(member_id)
        new_member = existing is None
        m = Member(member_id, instance_id, client_id, client_host, session_timeout_ms,
                   rebalance_timeout_ms, protocol_type, list(protocols),
                   existing.assignment if existing else b"", now_ms)
        g.members[member_id] = m
        if instance_id is not None:
            g.static[instance_id] = member_id
        g.protocol_type = protocol_type
        changed = new_member or existing.protocols != m.protocols
        if g.state is GroupState.STABLE and not changed and member_id != g.leader_id:
            return g._join_result(member_id), [], member_id   # nothing changed: same generation
        if g.state is GroupState.EMPTY:
            g.initial_delay_until_ms = now_ms + cfg.initial_rebalance_delay_ms
        effects = []
        began = g.state is not GroupState.PREPARING_REBALANCE
        if began:
            effects += g._prepare_rebalance(now_ms)
        g.pending_join.add(member_id)
        completed = g.ready_to_complete_join(now_ms)
        if completed:
            effects += g._complete_join(now_ms)
        if began or completed:
            self._reschedule(g, now_ms)     # once per rebalance: its deadlines are new
        mine = next((e for e in effects
                     if isinstance(e, JoinResult) and e.member_id == member_id), None)
        return mine, [e for e in effects if e is not mine], member_id

    # -- SyncGroup --------------------------------------------------------------------------------

    def sync(self, group_id: str, generation_id: int, member_id: str, assignments: dict,
             now_ms: int | None = None):
        """Returns (SyncResult now | None to wait, effects)."""
        g = self.groups.get(group_id)
        if g is None or member_id not in g.members:
            return SyncResult(member_id, ErrorCode.UNKNOWN_MEMBER_ID), []
        if now_ms is not None:
            g.members[member_id].last_heartbeat_ms = now_ms     # a SyncGroup proves liveness
        if generation_id != g.generation_id:
            return SyncResult(member_id, ErrorCode.ILLEGAL_GENERATION), []
        if g.state is GroupState.PREPARING_REBALANCE:
            return SyncResult(member_id, ErrorCode.REBALANCE_IN_PROGRESS), []
        if g.state is GroupState.STABLE:
            return self._sync_result(g, member_id), []
        g.pending_sync.add(member_id)
        if member_id != g.leader_id or g.storing is not None:
            return None, []
        for mid, m in g.members.items():
            m.assignment = assignments.get(mid, b"")
        self.changed.add(group_id)
        g.storing = g.generation_id
        return None, [StoreGroup(group_id, g.generation_id)]

    def stored(self, group_id: str, generation_id: int, error: ErrorCode, now_ms: int) -> list:
        """The group record of `generation_id` is durable (error NONE) or could not be stored;
        returns the SyncGroup answers to deliver. A store overtaken by a rebalance (or a deleted
        group) answers no one: the rebalance already did."""
        g = self.groups.get(group_id)
        if g is None or g.storing != generation_id or g.generation_id != generation_id \
                or g.state is not GroupState.COMPLETING_REBALANCE:
            return []
        g.storing = None
        self.changed.add(group_id)
        if error == ErrorCode.NONE:
            g.state = GroupState.STABLE
            effects = [self._sync_result(g, mid) for mid in sorted(g.pending_sync)]
        else:
            # Kafka's resetAndPropagateAssignmentError, then a new rebalance
            for m in g.members.values():
                m.assignment = b""
            effects = [SyncResult(mid, error) for mid in sorted(g.pending_sync)]
        g.pending_sync.clear()
        if error != ErrorCode.NONE:
            effects += g._prepare_rebalance(now_ms)
        self._reschedule(g, now_ms)       # members out of SyncGroup count their sessions again
        return effects

    @staticmethod
    def _sync_result(g: Group, member_id: str) -> SyncResult:
        return SyncResult(member_id, ErrorCode.NONE, g.protocol_type, g.protocol_name,
                          g.members[member_id].assignment)

    # -- liveness ---------------------------------------------------------------------------------

    def heartbeat(self, group_id: str, generation_id: int, member_id: str, now_ms: int) -> ErrorCode:
        g = self.groups.get(group_id)
        if g is None or member_id not in g.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        g.members[member_id].last_heartbeat_ms = now_ms
        if generation_id != g.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if g.state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def leave(self, group_id: str, members: list[tuple[str, str | None]], now_ms: int):
        """members: [(member_id, instance_id)] → ([codes], effects)."""
        g = self.groups.get(group_id)
        codes, effects = [], []
        for member_id, instance_id in members:
            if g is None:
                codes.append(ErrorCode.UNKNOWN_MEMBER_ID)
                continue
            if instance_id is not None:
                mid = g.static.get(instance_id)
                if mid is None or (member_id and member_id != mid):
                    codes.append(ErrorCode.FENCED_INSTANCE_ID if mid else ErrorCode.UNKNOWN_MEMBER_ID)
                    continue
                member_id = mid
            if member_id not in g.members:
                codes.append(ErrorCode.UNKNOWN_MEMBER_ID)
                continue
            g._remove(member_id)
            codes.append(ErrorCode.NONE)
            effects += self._membership_changed(g, now_ms)
        if g is not None:
            self.changed.add(group_id)
            self._reschedule(g, now_ms)
        return codes, effects

    def _membership_changed(self, g: Group, now_ms: int) -> list:
        effects = []
        if g.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            effects += g._prepare_rebalance(now_ms)
        if not g.members and g.state is GroupState.PREPARING_REBALANCE:
            return effects + g._complete_join(now_ms)
        if g.ready_to_complete_join(now_ms):
            return effects + g._complete_join(now_ms)
        return effects

    def tick(self, now_ms: int) -> list:
        """Expire sessions and complete rebalances whose time has come; returns effects. Only
        groups with a deadline due are looked at (see the module docstring)."""
        effects: list = []
        for g in self.timers.due(now_ms, self.groups):
            self.changed.add(g.group_id)
            g.pending_members = {k: v for k, v in g.pending_members.items() if v >= now_ms}
            for mid, m in list(g.members.items()):
                if mid in g.pending_join or mid in g.pending_sync:
                    # a member waiting in JoinGroup or SyncGroup is alive: it cannot heartbeat
                    # while it waits (the rebalance timeout bounds the wait instead)
                    continue
                if now_ms - m.last_heartbeat_ms > m.session_timeout_ms:
                    g._remove(mid)
                    effects += self._membership_changed(g, now_ms)
            if g.ready_to_complete_join(now_ms):
                effects += g._complete_join(now_ms)
            self._reschedule(g, now_ms)
        return effects

    # -- offsets (validation only; storage is the caller's) ----------------------------------------

    def can_commit(self, group_id: str, generation_id: int, member_id: str) -> ErrorCode:
        g = self.groups.get(group_id)
        if generation_id < 0 and not member_id:
            # simple (non-member) commits, e.g. manual assignment: allowed if nobody is a member
            if g is not None and g.members:
                return ErrorCode.UNKNOWN_MEMBER_ID
            return ErrorCode.NONE
        if g is None or member_id not in g.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation_id != g.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if g.state is GroupState.COMPLETING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS      # assignments not handed out yet
        # PreparingRebalance with the current generation is accepted, as in Kafka: members commit
        # what they processed before rejoining (e.g. in their on-revoke callback).
        return ErrorCode.NONE

    def delete(self, group_id: str) -> ErrorCode:
        g = self.groups.get(group_id)
        if g is None:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if g.members:
            return ErrorCode.NON_EMPTY_GROUP
        g.state = GroupState.DEAD
        del self.groups[group_id]
        self.changed.add(group_id)
        return ErrorCode.NONE


# -- persistence (pure): a group's membership as a record value, and back ---------------------------

def group_record(g: Group) -> list | None:
    """The value persisted for a group once it is Stable or Empty, or its generation is being
    stored (Kafka's GroupMetadata record): enough for a new coordinator to keep the generation
    going without a rebalance. None while a rebalance is in flight (only settled generations
    are persisted)."""
    if g.state not in (GroupState.STABLE, GroupState.EMPTY) and g.storing is None:
        return None
    members = [[m.member_id, m.group_instance_id, m.client_id, m.client_host, m.session_timeout_ms,
                m.rebalance_timeout_ms, dict(m.protocols).get(g.protocol_name, b""), m.assignment]
               for m in g.members.values()]
    return [g.protocol_type, g.generation_id, g.protocol_name, g.leader_id, members]


def restore_group(group_id: str, value: list, now_ms: int) -> Group:
    """A group rebuilt from its last persisted record; every member gets a fresh session (it has
    to heartbeat the new coordinator within its session timeout, or it is expired as usual)."""
    protocol_type, generation, protocol_name, leader, members = value
    g = Group(group_id)
    g.protocol_type, g.generation_id, g.protocol_name = protocol_type, generation, protocol_name
    for mid, instance, client_id, host, session_ms, rebalance_ms, metadata, assignment in members:
        g.members[mid] = Member(mid, instance, client_id, host, session_ms, rebalance_ms,
                                protocol_type, [(protocol_name, metadata)], assignment, now_ms)
        if instance is not None:
            g.static[instance] = mid
    g.leader_id = leader if leader in g.members else next(iter(g.members), None)
    g.state = GroupState.STABLE if g.members else GroupState.EMPTY
    return g


def expired_offsets(offsets: dict, groups: dict, now_ms: int, retention_ms: int,
                    empty_since_ms: dict) -> dict:
    """{group: [(topic, partition)]} whose committed offsets have expired (Kafka ≥ 2.1 rule,
    KIP-211): only groups without members expire, and only once they have been empty — and the
    offset left uncommitted — for `offsets.retention.minutes`."""
    out = {}
    for gid, parts in offsets.items():
        g = groups.get(gid)
        if g is not None and g.members:
            continue
        base = empty_since_ms.get(gid, 0)
        gone = [tp for tp, value in parts.items() if max(value[3], base) + retention_ms <= now_ms]
        if gone:
            out[gid] = gone
    return out


def subscribed_topics(g: Group | None) -> set[str] | None:
    """Topics a classic group's consumers subscribe to (their ConsumerProtocolSubscription);
    None means "can't tell, assume all"."""
    if g is None or not g.members:
        return set()
    if g.protocol_type != "consumer":
        return None
    topics: set[str] = set()
    for m in g.members.values():
        meta = dict(m.protocols).get(g.protocol_name) if g.protocol_name else None
        if meta is None:
            meta = m.protocols[0][1] if m.protocols else b""
        try:
            version = min(int.from_bytes(meta[:2], "big", signed=True), 3)
            sub = ConsumerProtocolSubscription.decode(memoryview(meta)[2:], version, strict=False)
        except Exception:  # noqa: BLE001 - foreign metadata: be conservative
            return None
        topics.update(sub.topics)
    return topics
