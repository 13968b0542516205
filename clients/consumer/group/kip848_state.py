"""One member of a KIP-848 consumer group (`group.protocol=consumer`), as a pure state machine:
no I/O, no clock (callers pass `now_ms`), no callbacks. `kip848_member.py` sends the
heartbeats it builds and feeds it the answers; the consumer runs the reconciliations it hands
out (listeners, commits) in the application's task, as Kafka's consumer runs them inside poll.

States (Kafka's MemberState, trimmed to what a member without client-side assignors needs):

    UNSUBSCRIBED ──subscribe──▶ JOINING (epoch 0, full heartbeat: subscription, owned = [])
    JOINING / STABLE / ACKNOWLEDGING ──answer with an assignment ≠ owned──▶ RECONCILING
    RECONCILING ──reconciled(): revoke first, then assign──▶ ACKNOWLEDGING (owned sent at once)
    ACKNOWLEDGING ──answer, owned = target──▶ STABLE
    any member ──FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID──▶ FENCED: owned partitions are *lost*
        (someone else may own them already: no commit) ──lost_handed_over()──▶ JOINING, epoch 0
    any member ──leave()──▶ LEAVING (epoch -1, or -2 for a static member) ──answer──▶ UNSUBSCRIBED
    any ──fatal error (authorization, unsupported assignor, ...)──▶ FATAL (`error` says why)

The coordinator never hands a partition to two members: it tells a member its assignment
*without* the partitions it must give up (same epoch), waits for a heartbeat showing they are no
longer owned, and only then bumps the member's epoch and adds partitions that were freed. So a
reconciliation here is simply "owned → the assignment from the latest answer": revoke what left
it, then take what joined it, then report the new owned set on the next heartbeat (at once).

Heartbeat fields are sent only when they changed (KIP-848: null = unchanged), except that after
a failed request everything is sent again — a lost answer may have carried a new epoch, and the
coordinator accepts "previous epoch + owned ⊆ assigned" as that case only when it sees `owned`.

Assignments arrive by topic id; reconciliation needs names (from metadata). Ids not yet known
stay pending (`Reconciliation.unresolved`): the rest is reconciled now and the caller refreshes
metadata and reconciles again.
"""

from __future__ import annotations

import dataclasses
import enum

from wire.errors import ErrorCode

TP = tuple[str, int]

LEAVE_EPOCH = -1
LEAVE_STATIC_EPOCH = -2

# answers after which the member must rejoin with epoch 0, its partitions lost (KIP-848)
FENCING = {ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID}
# the coordinator moved or is loading: find it again, retry after a backoff
COORDINATOR_RETRY = {ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                     ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}
# transient answers: retry after a backoff with everything resent
RETRY = {ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NETWORK_EXCEPTION,
         ErrorCode.UNKNOWN_SERVER_ERROR}


class MemberState(enum.Enum):
    UNSUBSCRIBED = "unsubscribed"
    JOINING = "joining"
    RECONCILING = "reconciling"
    ACKNOWLEDGING = "acknowledging"
    STABLE = "stable"
    FENCED = "fenced"
    LEAVING = "leaving"
    FATAL = "fatal"


@dataclasses.dataclass(frozen=True)
class HeartbeatFields:
    """ConsumerGroupHeartbeat request fields; None means "unchanged since the last heartbeat"."""
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    topic_partitions: dict | None = None      # {topic_id: sorted partitions}


@dataclasses.dataclass(frozen=True)
class Reconciliation:
    """What the consumer must do, in this order: revoke, then assign; then `reconciled(self)`."""
    member_epoch: int
    revoke: tuple[TP, ...]
    assign: tuple[TP, ...]
    owned: dict                              # {topic_id: frozenset} once done
    partitions: tuple[TP, ...]               # the same, by name: the consumer's assignment
    unresolved: frozenset                    # topic ids with no name yet (metadata refresh)


def _norm(a: dict) -> dict:
    return {t: frozenset(ps) for t, ps in a.items() if ps}


def _minus(a: dict, b: dict) -> dict:
    return _norm({t: set(ps) - set(b.get(t, ())) for t, ps in a.items()})


class ConsumerGroupMemberState:
    def __init__(self, group_id: str, *, instance_id: str | None = None,
                 rebalance_timeout_ms: int = 300_000, server_assignor: str | None = None,
                 retry_backoff_ms: int = 100):
        self.group_id = group_id
        self.instance_id = instance_id
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.server_assignor = server_assignor
        self.retry_backoff_ms = retry_backoff_ms
        self.state = MemberState.UNSUBSCRIBED
        self.member_id = ""
        self.member_epoch = 0
        self.heartbeat_interval_ms = 0           # the coordinator's, from its first answer
        self.subscribed_names: tuple[str, ...] | None = None
        self.subscribed_regex: str | None = None
        self.owned: dict = {}                    # {topic_id: frozenset(partitions)}
        self.target: dict | None = None          # the latest assignment the coordinator sent
        self.names: dict = {}                    # topic id -> name, for what we own
        self.error: tuple[int, str | None] | None = None     # (code, message) once FATAL
        self.coordinator_lost = False            # the driver should rediscover the coordinator
        self.in_flight = False
        self._leave_in_flight = False
        self._next_heartbeat_ms = 0
        self._sent: dict = {}                    # field -> value the coordinator has seen

    # -- what the application does -----------------------------------------------------------

    def subscribe(self, names=None, regex: str | None = None) -> None:
        """Set the subscription (topic names, or a regex); sent on the next heartbeat, at once."""
        if (names is None) == (regex is None):
            raise ValueError("subscribe to topic names or to a regex")
        self.subscribed_names = tuple(sorted(set(names))) if names is not None else None
        self.subscribed_regex = regex
        if self.state is MemberState.UNSUBSCRIBED:
            self._join()
        elif self.state is not MemberState.FATAL and self._subscription_changed():
            self._next_heartbeat_ms = 0

    def leave(self) -> bool:
        """Leave the group (close, unsubscribe, poll interval exceeded). Owned partitions are the
        caller's to revoke first. True when a leave heartbeat must be sent."""
        self.owned, self.target = {}, None
        if self.state in (MemberState.UNSUBSCRIBED, MemberState.FATAL) or not self.member_id:
            self._reset(MemberState.UNSUBSCRIBED if self.state is not MemberState.FATAL
                        else MemberState.FATAL)
            return False
        self.state = MemberState.LEAVING
        self._next_heartbeat_ms = 0
        return True

    def fail(self, code: int, message: str | None = None) -> None:
        """A fatal error found outside an answer (e.g. the broker lacks the API)."""
        self.in_flight = False
        self.state = MemberState.FATAL
        self.error = (code, message)

    @property
    def active(self) -> bool:
        """A member with an epoch: its commits carry it, its partitions are its own."""
        return self.member_epoch > 0 and self.state in (
            MemberState.STABLE, MemberState.RECONCILING, MemberState.ACKNOWLEDGING)

    @property
    def lost(self) -> list[TP]:
        """FENCED: partitions the consumer must drop (on_partitions_lost) before rejoining."""
        return self._tps(self.owned) if self.state is MemberState.FENCED else []

    def lost_handed_over(self) -> None:
        if self.state is MemberState.FENCED:
            self.owned = {}
            self._join(keep_member_id=True)

    # -- heartbeats ------------------------------------------------------------------------------

    def time_to_heartbeat_ms(self, now_ms: int) -> int | None:
        """ms until the next heartbeat is due (0: now); None when none is (unsubscribed, fenced
        and waiting for the consumer, fatal, or one in flight)."""
        if self.in_flight or self.state in (MemberState.UNSUBSCRIBED, MemberState.FATAL,
                                            MemberState.FENCED):
            return None
        return max(0, self._next_heartbeat_ms - now_ms)

    def heartbeat_request(self, now_ms: int) -> HeartbeatFields | None:
        """The next heartbeat to send, if one is due; the caller must then report its outcome
        with `on_response` or `on_failure`."""
        wait = self.time_to_heartbeat_ms(now_ms)
        if wait is None or wait > 0:
            return None
        self.in_flight = True
        self._leave_in_flight = self.state is MemberState.LEAVING
        if self.state is MemberState.LEAVING:
            epoch = LEAVE_STATIC_EPOCH if self.instance_id is not None else LEAVE_EPOCH
            return HeartbeatFields(self.member_id, epoch, instance_id=self.instance_id)
        full = self.member_epoch == 0 or not self._sent
        # names and regex are both always known here, so "switch from a regex to names" is
        # sent as names + "" (no regex), and the reverse as [] + the regex
        fields = {
            "instance_id": self.instance_id,
            "rebalance_timeout_ms": self.rebalance_timeout_ms,
            "subscribed_topic_names": self.subscribed_names or (),
            "subscribed_topic_regex": self.subscribed_regex or "",
            "server_assignor": self.server_assignor,
            "topic_partitions": {t: tuple(sorted(ps)) for t, ps in sorted(
                self.owned.items(), key=lambda kv: str(kv[0]))},
        }
        if full:
            self._sent = {}
        send = {k: v for k, v in fields.items() if full or self._sent.get(k, object()) != v}
        self._sent.update(send)
        if full and not send["subscribed_topic_regex"]:
            del send["subscribed_topic_regex"]      # null: a broker speaking only v0 is fine
        if "rebalance_timeout_ms" not in send:
            send["rebalance_timeout_ms"] = -1
        return HeartbeatFields(self.member_id, self.member_epoch, **{
            k: v for k, v in send.items() if v is not None})

    def on_failure(self, now_ms: int, coordinator: bool = False) -> None:
        """The heartbeat got no answer (connection, timeout) or a retriable error."""
        self.in_flight = False
        self._sent = {}                          # resend everything: the answer may be lost
        self.coordinator_lost |= coordinator
        if self.state is MemberState.LEAVING and self._leave_in_flight:
            # best effort, as Kafka: the session timeout removes us if this never arrives
            self._reset(MemberState.UNSUBSCRIBED)
            return
        self._next_heartbeat_ms = now_ms + self.retry_backoff_ms

    def on_response(self, now_ms: int, error_code: int, error_message: str | None = None,
                    member_id: str | None = None, member_epoch: int = -1,
                    heartbeat_interval_ms: int = 0, assignment: dict | None = None) -> None:
        """A ConsumerGroupHeartbeat answer; `assignment` {topic_id: partitions} or None."""
        self.in_flight = False
        if self.state is MemberState.LEAVING:
            if self._leave_in_flight:            # else: a heartbeat sent before leave()
                self._reset(MemberState.UNSUBSCRIBED)
            return
        if self.state in (MemberState.UNSUBSCRIBED, MemberState.FENCED, MemberState.FATAL):
            return                               # an answer overtaken by leave/fencing
        if error_code:
            self._on_error(now_ms, error_code, error_message)
            return
        if member_id:
            self.member_id = member_id
        self.member_epoch = member_epoch
        if heartbeat_interval_ms > 0:
            self.heartbeat_interval_ms = heartbeat_interval_ms
        self._next_heartbeat_ms = now_ms + self.heartbeat_interval_ms
        if assignment is not None:
            new = _norm(assignment)
            if self.target is not None and new != self.target and new == self.owned:
                # a target we already match (it took back partitions we had been given but
                # had not taken yet): the coordinator still counts them as ours until a
                # heartbeat lists what we own, so list it now - else it waits for a revocation
                # that already happened until our rebalance timeout removes us
                self._sent.pop("topic_partitions", None)
                self._next_heartbeat_ms = now_ms
                self.target = new
                self.state = MemberState.ACKNOWLEDGING
                return
            self.target = new
        if self.target is not None and self.target != self.owned:
            self.state = MemberState.RECONCILING
        elif self.state is not MemberState.JOINING or self.target is not None:
            self.state = MemberState.STABLE

    def _on_error(self, now_ms: int, code: int, message: str | None) -> None:
        if code in FENCING:
            self._sent = {}
            self.target = None
            if self.owned:
                self.state = MemberState.FENCED      # the consumer hands the partitions over
            else:
                self._join(keep_member_id=True)
            return
        if code in COORDINATOR_RETRY or code in RETRY:
            self.on_failure(now_ms, coordinator=code in COORDINATOR_RETRY)
            return
        self.fail(code, message)

    # -- reconciliation (the consumer runs it) ---------------------------------------------------

    def reconciliation(self, names: dict) -> Reconciliation | None:
        """The pending reconciliation, given metadata's {topic_id: name}; None when none is."""
        if self.state is not MemberState.RECONCILING or self.target is None:
            return None
        known = {**names, **self.names}
        resolved = {t: ps for t, ps in self.target.items() if t in known}
        revoke = _minus(self.owned, self.target)
        assign = _minus(resolved, self.owned)
        if not revoke and not assign:
            return None                          # at most names still missing: `unresolved`
        for t in resolved:
            self.names.setdefault(t, known[t])
        return Reconciliation(self.member_epoch, tuple(self._tps(revoke)), tuple(self._tps(assign)),
                              _norm(resolved), tuple(self._tps(resolved)),
                              frozenset(set(self.target) - set(resolved)))

    def reconciled(self, rec: Reconciliation) -> None:
        """The consumer revoked and assigned: report the new owned set on a heartbeat now."""
        if self.state is not MemberState.RECONCILING:
            return                               # fenced or left meanwhile: nothing to ack
        changed = rec.owned != self.owned
        self.owned = dict(rec.owned)
        self.names = {t: n for t, n in self.names.items() if t in self.owned or
                      t in (self.target or {})}
        self.state = (MemberState.RECONCILING if self.target != self.owned
                      else MemberState.ACKNOWLEDGING)
        if changed:
            self._next_heartbeat_ms = 0          # acknowledge at once: others wait for it
            # always list what we own in the ack, even when it equals what we last listed
            # (given p, took it, gave it back): the coordinator counts p as ours until told
            self._sent.pop("topic_partitions", None)

    def unresolved(self, names: dict) -> set:
        """Topic ids of the target that neither metadata nor we can name yet."""
        if self.state is not MemberState.RECONCILING or self.target is None:
            return set()
        return {t for t in self.target if t not in names and t not in self.names}

    @property
    def assigned(self) -> list[TP]:
        return self._tps(self.owned)

    # -- helpers ---------------------------------------------------------------------------------

    def _tps(self, a: dict) -> list[TP]:
        return sorted((self.names[t], p) for t, ps in a.items() for p in ps)

    def _subscription_changed(self) -> bool:
        return (self._sent.get("subscribed_topic_names") != (self.subscribed_names or ())
                or self._sent.get("subscribed_topic_regex") != (self.subscribed_regex or ""))

    def _join(self, keep_member_id: bool = False) -> None:
        self._reset(MemberState.JOINING, keep_member_id)

    def _reset(self, state: MemberState, keep_member_id: bool = False) -> None:
        self.state = state
        if not keep_member_id:
            self.member_id = ""
        self.member_epoch = 0
        self.owned, self.target = {}, None
        self._sent = {}
        self._next_heartbeat_ms = 0
