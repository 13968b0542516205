"""Controller quorum membership: AddRaftVoter / RemoveRaftVoter (KIP-853) on pysyncobj.

Pure decisions; metadata_quorum/voter_handlers.py runs them against Raft.

States of the voter set, as the metadata log records them (VotersRecord):

    STABLE ──plan_add / plan_remove──▶ PENDING ──resolve──▶ STABLE (new set: done,
                                                                    old set: aborted)

1. PENDING is committed *before* pysyncobj's membership entry is proposed, so every voter (the
   one being removed included) knows a change is under way, and a newly active controller can
   finish it: pysyncobj applies a membership entry when it is appended, so the new leader's own
   membership says whether the change took effect (`resolve`).
2. One change at a time: pysyncobj means to refuse a second change while one is uncommitted, but
   its `__changeClusterIDx` is never set (0.3.17), so nothing stops two overlapping
   single-server changes, which can form two majorities. PENDING is the guard here; a second
   request gets REQUEST_TIMED_OUT, as Kafka answers while a voter change is in flight.
3. pysyncobj has no learners (Raft's non-voting catch-up phase, KIP-853's observer stage): a new
   voter counts toward the majority from the moment its entry is appended, with an empty log.
   So an add is refused unless the voters reachable now are a majority of the *new* set on their
   own; then commits never wait for the newcomer while it catches up (from the leader's log, or
   its snapshot when the log was compacted). Replacing a dead voter is therefore remove, then add.
   Growing a one-voter quorum cannot avoid the wait and is allowed: its commits wait for the
   second voter to catch up.
4. A removal must leave a reachable majority of the remaining voters, and never the empty set.
"""

from __future__ import annotations

import dataclasses

from metadata_quorum import records as r
from metadata_quorum.image import Voter
from wire.errors import ErrorCode


class VoterRefused(Exception):
    def __init__(self, error: ErrorCode, message: str, unreachable: bool = False):
        super().__init__(message)
        self.error = error
        self.message = message
        # refused for want of reachable voters: worth a second look a moment later (a new
        # leader's links to followers that never talked to each other reconnect first)
        self.unreachable = unreachable


@dataclasses.dataclass(frozen=True)
class Plan:
    kind: str                   # "add" | "remove"
    voter: Voter
    pending: r.VotersRecord     # committed before the membership entry
    done: r.VotersRecord        # the new set
    aborted: r.VotersRecord     # the old set


def majority(size: int) -> int:
    return size // 2 + 1


def _record(voters: dict[int, Voter], change: tuple = ()) -> r.VotersRecord:
    return r.VotersRecord(tuple(tuple(v) for _, v in sorted(voters.items())), change)


def _check_idle(change: tuple) -> None:
    if change:
        what = "adding" if change[0] == "add" else "removing"
        raise VoterRefused(ErrorCode.REQUEST_TIMED_OUT,
                           f"a voter change is in progress ({what} controller {change[1]}): "
                           "one change at a time, retry when it completes")


def plan_add(voters: dict[int, Voter], change: tuple, new: Voter, reachable: set[int]) -> Plan:
    """Raises VoterRefused with Kafka's error code; `reachable`: voters the leader hears now."""
    _check_idle(change)
    host, _, port = new.raft_address.rpartition(":")
    if new.node_id < 0 or not new.host or not 0 < new.port < 65536 or not host \
            or not port.isdigit() or not 0 < int(port) < 65536:
        raise VoterRefused(ErrorCode.INVALID_REQUEST,
                           "a new voter needs a node id >= 0, a CONTROLLER listener and a RAFT "
                           "listener (its raftka.controller.raft.peers address), each host:port")
    if new.node_id in voters:
        raise VoterRefused(ErrorCode.DUPLICATE_VOTER, f"controller {new.node_id} is already a voter")
    for v in voters.values():
        if v.raft_address == new.raft_address or (v.host, v.port) == (new.host, new.port):
            raise VoterRefused(ErrorCode.DUPLICATE_VOTER,
                               f"voter {v.node_id} already uses {v.raft_address} or "
                               f"{v.host}:{v.port}")
    live = len(reachable & set(voters))
    need = majority(len(voters) + 1)
    # growing a one-voter quorum is the exception: no set without the newcomer can be a
    # majority of two, so commits wait until it has caught up (the only way to grow it)
    if live < need and not (len(voters) == 1 and live == 1):
        raise VoterRefused(ErrorCode.INVALID_REQUEST,
                           f"only {live} of {len(voters)} voters are reachable; with controller "
                           f"{new.node_id} (an empty log until it catches up) commits would need "
                           f"{need}: remove the unreachable voter(s) first", unreachable=True)
    after = dict(voters)
    after[new.node_id] = new
    return Plan("add", new, _record(voters, ("add",) + tuple(new)), _record(after),
                _record(voters))


def plan_remove(voters: dict[int, Voter], change: tuple, node_id: int,
                reachable: set[int]) -> Plan:
    _check_idle(change)
    if node_id not in voters:
        raise VoterRefused(ErrorCode.VOTER_NOT_FOUND, f"controller {node_id} is not a voter")
    if len(voters) == 1:
        raise VoterRefused(ErrorCode.INVALID_REQUEST,
                           f"controller {node_id} is the last voter: the quorum cannot be empty")
    after = {k: v for k, v in voters.items() if k != node_id}
    live = len(reachable & set(after))
    if live < majority(len(after)):
        raise VoterRefused(ErrorCode.INVALID_REQUEST,
                           f"removing controller {node_id} leaves {len(after)} voters of which "
                           f"only {live} are reachable, below a majority "
                           f"({majority(len(after))}): the quorum could not commit",
                           unreachable=True)
    return Plan("remove", voters[node_id], _record(voters, ("remove", node_id)), _record(after),
                _record(voters))


def pending_plan(voters: dict[int, Voter], change: tuple) -> Plan | None:
    """The Plan of the change recorded as in flight (for `resolve`), None if there is none."""
    if not change:
        return None
    if change[0] == "add":
        new = Voter(*change[1:5])
        after = dict(voters)
        after[new.node_id] = new
        return Plan("add", new, _record(voters, change), _record(after), _record(voters))
    gone = voters.get(change[1]) or Voter(change[1], "", "", 0)
    after = {k: v for k, v in voters.items() if k != change[1]}
    return Plan("remove", gone, _record(voters, change), _record(after), _record(voters))


def resolve(plan: Plan, raft_members: set[str]) -> tuple[r.VotersRecord, bool]:
    """The record that ends `plan`, and whether it took effect, given the active controller's
    Raft membership (addresses; pysyncobj applies a membership entry once appended, and the
    leader's entries are all committed before it resolves, so its view is the committed one)."""
    present = plan.voter.raft_address in raft_members
    took_effect = present if plan.kind == "add" else not present
    return (plan.done if took_effect else plan.aborted), took_effect
