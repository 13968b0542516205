"""KIP-848 consumer groups ("group.protocol=consumer") as a pure state machine: the coordinator
computes assignments itself (server-side assignors) and members converge to them through
ConsumerGroupHeartbeat. No I/O, no clock: callers pass `now_ms` and a snapshot of the topics.

Epochs and the reconciliation rule:

- The *group epoch* goes up whenever membership, a subscription, or the partitions of a subscribed
  topic change; the coordinator then computes a new *target assignment* (assignment epoch = group
  epoch) with the group's assignor.
- Each member has a *member epoch*. A member behind the assignment epoch first *revokes* the
  partitions it owns that are no longer in its target (it is told its assignment without them and
  keeps its epoch: state UNREVOKED_PARTITIONS), and only once a heartbeat shows it no longer owns
  them does it advance to the assignment epoch and receive new partitions — and only partitions no
  other member still owns or is revoking (the rest follow on later heartbeats: state
  UNRELEASED_PARTITIONS). So a partition is never owned by two members at once.
- Member states: STABLE (owns exactly its target at the assignment epoch), UNREVOKED_PARTITIONS,
  UNRELEASED_PARTITIONS. Group states: EMPTY (no members), RECONCILING (some member not stable),
  STABLE.

Requests: member_epoch 0 joins (a member id is generated when none is given), -1 leaves, -2 is a
static member leaving temporarily (treated as a leave here: its partitions are reassigned at
once). A member epoch ahead of the coordinator's, or behind it other than "the previous epoch
with nothing newer owned" (the answer got lost), is FENCED_MEMBER_EPOCH; the member must rejoin
with epoch 0. A member that misses its session timeout, or does not revoke within its rebalance
timeout, is removed.
"""

from __future__ import annotations

import dataclasses
import enum
import uuid

from partition_server.group.timers import INF, DeadlineHeap
from wire.errors import ErrorCode

ASSIGNORS = ("uniform", "range")

# {topic_id: frozenset(partitions)}
Assignment = dict


class MemberState(enum.Enum):
    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


@dataclasses.dataclass
class ConsumerMember:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    subscribed_names: list
    subscribed_regex: str | None
    server_assignor: str | None
    member_epoch: int = 0
    previous_epoch: int = -1
    assigned: dict = dataclasses.field(default_factory=dict)     # topic id → set, usable now
    revoking: dict = dataclasses.field(default_factory=dict)     # topic id → set, to give up
    last_heartbeat_ms: int = 0
    revoke_deadline_ms: int = 0
    last_sent: dict | None = None


def member_deadline_ms(m: ConsumerMember, session_timeout_ms: int) -> int:
    """The first moment `tick` removes the member unless it heartbeats (or revokes) first."""
    deadline = m.last_heartbeat_ms + session_timeout_ms + 1
    return min(deadline, m.revoke_deadline_ms + 1) if m.revoking else deadline


@dataclasses.dataclass
class HeartbeatResult:
    error: ErrorCode = ErrorCode.NONE
    member_id: str | None = None
    member_epoch: int = -1
    assignment: dict | None = None          # None: unchanged since the last answer
    message: str | None = None


def _norm(a: dict) -> dict:
    return {t: frozenset(ps) for t, ps in a.items() if ps}


def _minus(a: dict, b: dict) -> dict:
    return _norm({t: set(ps) - set(b.get(t, ())) for t, ps in a.items()})


def _union(a: dict, b: dict) -> dict:
    out = {t: set(ps) for t, ps in a.items()}
    for t, ps in b.items():
        out.setdefault(t, set()).update(ps)
    return _norm(out)


def _intersect(a: dict, b: dict) -> dict:
    return _norm({t: set(ps) & set(b.get(t, ())) for t, ps in a.items()})


# -- server-side assignors (pure) -------------------------------------------------------------------

def range_assign(subs: dict, topics: dict) -> dict:
    """Per topic, contiguous ranges over the sorted members subscribed to it (like the classic
    range assignor). subs: {member: set(topic names)}; topics: {name: (topic_id, partitions)}."""
    out = {m: {} for m in subs}
    for name, (tid, n) in sorted(topics.items()):
        members = sorted(m for m, names in subs.items() if name in names)
        for i, m in enumerate(members):
            lo, hi = i * n // len(members), (i + 1) * n // len(members)
            if hi > lo:
                out[m][tid] = frozenset(range(lo, hi))
    return out


def uniform_assign(subs: dict, topics: dict, current: dict) -> dict:
    """Balanced and sticky: every partition of a subscribed topic goes to one subscriber; members
    keep what they own as long as they stay within the fair share; the rest go to the least loaded
    eligible member. With identical subscriptions counts differ by at most one."""
    parts = [(tid, p, name) for name, (tid, n) in sorted(topics.items()) for p in range(n)
             if any(name in names for names in subs.values())]
    members = sorted(subs)
    if not members:
        return {}
    quota = -(-len(parts) // len(members))              # ceil: nobody keeps more than this
    out = {m: {} for m in members}
    load = {m: 0 for m in members}
    free = []
    for tid, p, name in parts:
        owner = next((m for m in members if p in current.get(m, {}).get(tid, ())), None)
        if owner is not None and name in subs[owner] and load[owner] < quota:
            out[owner].setdefault(tid, set()).add(p)
            load[owner] += 1
        else:
            free.append((tid, p, name))
    for tid, p, name in free:
        eligible = [m for m in members if name in subs[m]]
        m = min(eligible, key=lambda x: (load[x], x))
        out[m].setdefault(tid, set()).add(p)
        load[m] += 1
    # a member left above the floor by stickiness while another eligible one starves: move one
    # partition at a time until counts differ by at most one among interchangeable members
    changed = True
    while changed:
        changed = False
        lo = min(members, key=lambda x: (load[x], x))
        hi = max(members, key=lambda x: (load[x], x))
        if load[hi] - load[lo] <= 1:
            break
        for tid in sorted(out[hi], key=str):
            name = next(n for n, (t, _) in topics.items() if t == tid)
            if name in subs[lo] and out[hi][tid]:
                p = max(out[hi][tid])
                out[hi][tid].discard(p)
                out[lo].setdefault(tid, set()).add(p)
                load[hi] -= 1
                load[lo] += 1
                changed = True
                break
    return {m: _norm(a) for m, a in out.items()}


# -- the group ----------------------------------------------------------------------------------------

class ConsumerGroup:
    def __init__(self, group_id: str):
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerMember] = {}
        self.target: dict[str, dict] = {}
        self.topics_seen: dict = {}            # subscribed topics' (id, partitions) at last assign
        self.assignor = ASSIGNORS[0]

    def member_state(self, m: ConsumerMember) -> MemberState:
        if m.revoking:
            return MemberState.UNREVOKED_PARTITIONS
        if m.member_epoch != self.assignment_epoch or _minus(self.target.get(m.member_id, {}),
                                                             m.assigned):
            return MemberState.UNRELEASED_PARTITIONS
        return MemberState.STABLE

    @property
    def state(self) -> str:
        if not self.members:
            return "Empty"
        if any(self.member_state(m) is not MemberState.STABLE for m in self.members.values()):
            return "Reconciling"
        return "Stable"

    def subscribed(self, topics: dict) -> dict:
        """The topics (of the snapshot) that some member subscribes to."""
        import re
        out = {}
        for m in self.members.values():
            for name in m.subscribed_names or ():
                if name in topics:
                    out[name] = topics[name]
            if m.subscribed_regex:
                try:
                    rx = re.compile(m.subscribed_regex)
                except re.error:
                    continue
                for name, v in topics.items():
                    if not name.startswith("__") and rx.fullmatch(name):
                        out[name] = v
        return out

    @staticmethod
    def _subscribes(m: ConsumerMember, name: str) -> bool:
        import re
        if name in (m.subscribed_names or ()):
            return True
        if m.subscribed_regex and not name.startswith("__"):
            try:
                return re.fullmatch(m.subscribed_regex, name) is not None
            except re.error:
                return False
        return False

    def _choose_assignor(self) -> str:
        wanted = [m.server_assignor for m in self.members.values() if m.server_assignor]
        if not wanted:
            return ASSIGNORS[0]
        return max(sorted(set(wanted)), key=wanted.count)

    def bump(self) -> None:
        self.group_epoch += 1

    def compute_target(self, topics: dict) -> None:
        subscribed = self.subscribed(topics)
        subs = {mid: {n for n in subscribed if self._subscribes(m, n)}
                for mid, m in self.members.items()}
        self.assignor = self._choose_assignor()
        if self.assignor == "range":
            self.target = range_assign(subs, subscribed)
        else:
            current = {mid: _union(m.assigned, m.revoking) for mid, m in self.members.items()}
            self.target = uniform_assign(subs, subscribed, current)
        self.assignment_epoch = self.group_epoch
        self.topics_seen = subscribed

    def owned_elsewhere(self, member_id: str) -> dict:
        out: dict = {}
        for mid, m in self.members.items():
            if mid != member_id:
                out = _union(out, _union(m.assigned, m.revoking))
        return out

    def reconcile(self, m: ConsumerMember, now_ms: int) -> None:
        if m.revoking:
            return                                   # still waiting for the member to let go
        target = self.target.get(m.member_id, {})
        to_revoke = _minus(m.assigned, target)
        if to_revoke:
            m.assigned = _minus(m.assigned, to_revoke)
            m.revoking = to_revoke
            m.revoke_deadline_ms = now_ms + m.rebalance_timeout_ms
            return
        if m.member_epoch != self.assignment_epoch:
            m.previous_epoch, m.member_epoch = m.member_epoch, self.assignment_epoch
        grantable = _minus(target, self.owned_elsewhere(m.member_id))
        m.assigned = _union(m.assigned, grantable)


class ConsumerGroupCoordinatorState:
    """All KIP-848 groups of one coordinator.

    Timers (`tick` costs what is due, not the number of groups): each group with members has
    one entry in a deadline heap, at the earliest moment one of its members may have to go
    (session timeout, revocation deadline). A heartbeat only moves its member's deadline later,
    so it touches the heap only when that deadline is earlier than the group's entry (a new
    member, a shorter revocation deadline); when an entry comes due the group's members are
    checked and its next deadline is computed and pushed. Stale entries (a group deleted,
    replaced or rescheduled earlier) are skipped when popped. `changed` collects the groups a
    call may have changed, for the coordinator to persist and log (see `take_changed`)."""

    def __init__(self, session_timeout_ms: int = 45_000, heartbeat_interval_ms: int = 5_000,
                 max_size: int = 2**31 - 1):
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.max_size = max_size
        self.groups: dict[str, ConsumerGroup] = {}
        self.timers = DeadlineHeap()
        self.changed: set[str] = set()

    def heartbeat(self, group_id: str, member_id: str, member_epoch: int, *, instance_id=None,
                  rebalance_timeout_ms: int = -1, subscribed_names=None, subscribed_regex=None,
                  server_assignor=None, owned: dict | None = None, topics: dict,
                  client_id: str = "", client_host: str = "", now_ms: int) -> HeartbeatResult:
        if not group_id:
            return HeartbeatResult(ErrorCode.INVALID_REQUEST, message="group id is empty")
        if server_assignor is not None and server_assignor not in ASSIGNORS:
            return HeartbeatResult(ErrorCode.UNSUPPORTED_ASSIGNOR,
                                   message=f"server assignors: {', '.join(ASSIGNORS)}")
        g = self.groups.get(group_id)
        if member_epoch in (-1, -2):
            if g is None or member_id not in g.members:
                return HeartbeatResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id, member_epoch)
            self._remove(g, member_id, topics)
            return HeartbeatResult(ErrorCode.NONE, member_id, member_epoch)
        if member_epoch == 0:
            g, member_id, refused = self._join(g, group_id, member_id, instance_id,
                                               rebalance_timeout_ms, subscribed_names,
                                               subscribed_regex, server_assignor, topics,
                                               client_id, client_host, now_ms)
        else:
            refused = self._update(g, member_id, member_epoch, owned, rebalance_timeout_ms,
                                   subscribed_names, subscribed_regex, server_assignor)
        if refused is not None:
            return refused
        m = g.members[member_id]
        m.last_heartbeat_ms = now_ms
        if owned is not None:
            # partitions the member no longer reports are released
            m.revoking = _intersect(m.revoking, _norm(owned))
        if g.group_epoch == g.assignment_epoch and g.subscribed(topics) != g.topics_seen:
            g.bump()                                 # topics created, deleted or grown
        if g.group_epoch != g.assignment_epoch:
            g.compute_target(topics)
        g.reconcile(m, now_ms)
        self.changed.add(group_id)
        self.timers.schedule(g, member_deadline_ms(m, self.session_timeout_ms))
        current = _norm(m.assigned)
        send = None
        # a full heartbeat (owned partitions given) that does not match what we want the member
        # to own gets the assignment again, as Kafka's coordinator does: the answer that carried
        # it may have been lost (else the member would wait out its rebalance timeout)
        if current != m.last_sent or (owned is not None and _norm(owned) != current):
            send, m.last_sent = current, current
        return HeartbeatResult(ErrorCode.NONE, member_id, m.member_epoch, send)

    def _join(self, g: ConsumerGroup | None, group_id: str, member_id: str, instance_id,
              rebalance_timeout_ms: int, subscribed_names, subscribed_regex, server_assignor,
              topics: dict, client_id: str, client_host: str, now_ms: int):
        """Member epoch 0: (group, member id, None) or (_, _, the refusal)."""
        if g is None:
            g = self.groups[group_id] = ConsumerGroup(group_id)
            self.changed.add(group_id)
        if instance_id is not None:
            holder = next((m for m in g.members.values() if m.instance_id == instance_id), None)
            if holder is not None and holder.member_id != member_id:
                return g, member_id, HeartbeatResult(ErrorCode.UNRELEASED_INSTANCE_ID, member_id, 0)
        if member_id in g.members:              # a rejoin: drop what it had, start over
            self._remove(g, member_id, topics)
        elif len(g.members) >= self.max_size:
            return g, member_id, HeartbeatResult(ErrorCode.GROUP_MAX_SIZE_REACHED, member_id, 0)
        if subscribed_names is None and subscribed_regex is None:
            return g, member_id, HeartbeatResult(
                ErrorCode.INVALID_REQUEST, member_id, 0,
                message="a joining member must give its subscription")
        member_id = member_id or str(uuid.uuid4())
        g.members[member_id] = ConsumerMember(
            member_id, instance_id, client_id, client_host,
            rebalance_timeout_ms if rebalance_timeout_ms > 0 else 300_000,
            list(subscribed_names or []), subscribed_regex, server_assignor,
            last_heartbeat_ms=now_ms)
        g.bump()
        return g, member_id, None

    @staticmethod
    def _update(g: ConsumerGroup | None, member_id: str, member_epoch: int, owned,
                rebalance_timeout_ms: int, subscribed_names, subscribed_regex,
                server_assignor) -> HeartbeatResult | None:
        """A known member's heartbeat: fenced or stale epochs refused (the HeartbeatResult),
        else its subscription updated (None)."""
        if g is None or member_id not in g.members:
            return HeartbeatResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id, member_epoch)
        m = g.members[member_id]
        if member_epoch != m.member_epoch:
            lost_answer = (member_epoch == m.previous_epoch and owned is not None
                           and not _minus(_norm(owned), m.assigned))
            if not lost_answer:
                return HeartbeatResult(ErrorCode.FENCED_MEMBER_EPOCH, member_id, member_epoch)
            m.last_sent = None                   # resend the assignment it missed
        changed = False
        if subscribed_names is not None and list(subscribed_names) != m.subscribed_names:
            m.subscribed_names, changed = list(subscribed_names), True
        if subscribed_regex is not None and subscribed_regex != m.subscribed_regex:
            m.subscribed_regex, changed = subscribed_regex or None, True
        if server_assignor is not None and server_assignor != m.server_assignor:
            m.server_assignor, changed = server_assignor, True
        if rebalance_timeout_ms > 0:
            m.rebalance_timeout_ms = rebalance_timeout_ms
        if changed:
            g.bump()
        return None

    def _remove(self, g: ConsumerGroup, member_id: str, topics: dict) -> None:
        g.members.pop(member_id, None)
        g.target.pop(member_id, None)
        g.bump()
        g.compute_target(topics)
        self.changed.add(g.group_id)

    def restored(self, g: ConsumerGroup, now_ms: int) -> None:
        """Install a group rebuilt from its record (a coordinator failover) with its timers."""
        self.groups[g.group_id] = g
        self.changed.add(g.group_id)
        self.timers.schedule(g, self._next_deadline_ms(g))

    def take_changed(self) -> set[str]:
        """The ids of the groups changed since the last call (some may be gone since)."""
        changed, self.changed = self.changed, set()
        return changed

    def _next_deadline_ms(self, g: ConsumerGroup) -> float:
        return min((member_deadline_ms(m, self.session_timeout_ms) for m in g.members.values()),
                   default=INF)

    def tick(self, now_ms: int, topics: dict) -> list[tuple[str, str, str]]:
        """Remove members past their session or revocation deadline: [(group, member, why)].
        Only groups with a deadline due are looked at (see the class docstring)."""
        gone = []
        fired = self.timers.due(now_ms, self.groups)
        for g in fired:
            for mid, m in list(g.members.items()):
                if now_ms - m.last_heartbeat_ms > self.session_timeout_ms:
                    gone.append((g.group_id, mid, "session timeout"))
                elif m.revoking and now_ms > m.revoke_deadline_ms:
                    gone.append((g.group_id, mid, "did not revoke within its rebalance timeout"))
        for gid, mid, _ in gone:
            self._remove(self.groups[gid], mid, topics)
        for g in fired:
            self.timers.schedule(g, self._next_deadline_ms(g))
        return gone

    def can_commit(self, group_id: str, member_id: str, member_epoch: int) -> ErrorCode:
        """OffsetCommit v9+ against a consumer group: the member's current epoch only."""
        g = self.groups.get(group_id)
        if member_epoch < 0 and not member_id:
            return ErrorCode.UNKNOWN_MEMBER_ID if g is not None and g.members else ErrorCode.NONE
        if g is None or member_id not in g.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        m = g.members[member_id]
        if member_epoch > m.member_epoch:
            return ErrorCode.FENCED_MEMBER_EPOCH
        if member_epoch < m.member_epoch and member_epoch != m.previous_epoch:
            return ErrorCode.STALE_MEMBER_EPOCH
        return ErrorCode.NONE


# -- persistence (pure) -------------------------------------------------------------------------------

def _assignment_out(a: dict) -> list:
    return [[tid.bytes, sorted(ps)] for tid, ps in sorted(a.items(), key=lambda kv: str(kv[0]))]


def _assignment_in(v: list) -> dict:
    return _norm({uuid.UUID(bytes=bytes(t)): set(ps) for t, ps in v})


def consumer_group_record(g: ConsumerGroup) -> list:
    """What a new coordinator needs to carry the group on without fencing anyone: epochs, the
    target, and each member's epochs, subscription and current/revoking partitions."""
    members = [[m.member_id, m.instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                list(m.subscribed_names), m.subscribed_regex, m.server_assignor, m.member_epoch,
                m.previous_epoch, _assignment_out(m.assigned), _assignment_out(m.revoking)]
               for m in g.members.values()]
    target = [[mid, _assignment_out(a)] for mid, a in sorted(g.target.items())]
    seen = [[name, tid.bytes, n] for name, (tid, n) in sorted(g.topics_seen.items())]
    return [g.group_epoch, g.assignment_epoch, g.assignor, members, target, seen]


def restore_consumer_group(group_id: str, value: list, now_ms: int) -> ConsumerGroup:
    group_epoch, assignment_epoch, assignor, members, target, seen = value
    g = ConsumerGroup(group_id)
    g.group_epoch, g.assignment_epoch, g.assignor = group_epoch, assignment_epoch, assignor
    for (mid, instance, client_id, host, rebalance_ms, names, regex, server_assignor, epoch,
         previous, assigned, revoking) in members:
        m = ConsumerMember(mid, instance, client_id, host, rebalance_ms, list(names), regex,
                           server_assignor, epoch, previous, _assignment_in(assigned),
                           _assignment_in(revoking), last_heartbeat_ms=now_ms,
                           revoke_deadline_ms=now_ms + rebalance_ms)
        m.last_sent = _norm(m.assigned)
        g.members[mid] = m
    g.target = {mid: _assignment_in(a) for mid, a in target}
    g.topics_seen = {name: (uuid.UUID(bytes=bytes(tid)), n) for name, tid, n in seen}
    return g
