"""What decides that a Raft follower calls an election, in front of pysyncobj's tick: a mixin
of quorum/raft.py's DurableSyncObj (it reads pysyncobj's private state, as that class does).

- `_read_before_electing`: a follower past its deadline reads what arrived first;
- `_pre_vote_first`: then asks for pre-votes (quorum/pre_vote.py) before pysyncobj raises its
  term;
- `raftka_on_message`: the Raft port hands it every admitted message (quorum/durable_port.py):
  it notes a leader's AppendEntries and answers and counts pre-votes.
"""

from __future__ import annotations

from pysyncobj.monotonic import monotonic as raft_clock   # pysyncobj's deadlines' clock
from pysyncobj.syncobj import _RAFT_STATE

from metadata_quorum.quorum.pre_vote import PRE_VOTE, PRE_VOTE_RESPONSE, PreVoteRound, should_grant


class ElectionGuards:
    def _init_elections(self) -> None:
        """Called before SyncObj.__init__: attributes set later would be pickled into
        pysyncobj's snapshots as replicated state."""
        self._raftka_pre_vote = PreVoteRound()
        self._raftka_leader_contact: float | None = None    # raft_clock() of its last append

    def _read_before_electing(self) -> None:
        """pysyncobj checks a follower's election deadline at the start of a tick and reads
        its sockets only at the end. A follower held up past its deadline (its process
        descheduled on a loaded machine, its Raft thread waiting for the GIL) therefore called
        an election while the leader's heartbeats sat unread in its socket, and deposed a
        healthy leader. Reading what arrived first covers hold-ups shorter than the Raft
        connection timeout (connectionTimeout, 0.8 s); pysyncobj drops a connection silent for
        longer, on both ends, and those heartbeats are lost: longer hold-ups are left to
        pre-vote (`_pre_vote_first`)."""
        if self._SyncObj__raftState != _RAFT_STATE.LEADER and \
                self._SyncObj__raftElectionDeadline < raft_clock():
            self._poller.poll(0)

    def _pre_vote_first(self) -> None:
        """A follower whose election deadline passed asks for pre-votes (quorum/pre_vote.py)
        and pushes its deadline on instead of letting pysyncobj raise its term now; once a
        majority would vote for it, the deadline is 0 and pysyncobj's election runs. A round
        without a majority is asked again after half the minimum election timeout, so a
        leader that is really gone costs at most that much more."""
        if self._SyncObj__raftState == _RAFT_STATE.LEADER or \
                self._SyncObj__raftElectionDeadline >= raft_clock():
            return
        others = self._SyncObj__otherNodes
        if not others or self._SyncObj__transferInProgress or \
                not self._SyncObj__connectedToAnyone():
            return      # alone; the leader handed over (TimeoutNow): at once; unconnected: waits
        term = self._SyncObj__raftCurrentTerm
        if self._raftka_pre_vote.may_elect(term):
            return
        message = self._raftka_pre_vote.start(term, len(others) + 1)
        message.update(last_log_term=self._SyncObj__getCurrentLogTerm(),
                       last_log_index=self._SyncObj__getCurrentLogIndex())
        self._SyncObj__raftElectionDeadline = raft_clock() + \
            self._SyncObj__conf.raftMinTimeout / 2
        transport = self._SyncObj__transport
        for node in others:
            transport.send(node, message)

    def _poll_wait(self, tick_s: float) -> float:
        """How long pysyncobj's poll at the end of this tick may wait: see `follower_poll_s`."""
        following = self._SyncObj__raftState == _RAFT_STATE.FOLLOWER and \
            self._SyncObj__raftLeader is not None
        return follower_poll_s(tick_s, self._SyncObj__raftElectionDeadline - raft_clock(),
                               following)

    def raftka_on_message(self, node, message: dict) -> bool:
        """Called by the Raft port for every admitted message, on pysyncobj's thread: notes a
        leader's AppendEntries, answers and counts pre-votes (True: consumed here)."""
        kind = message.get("type")
        if kind == "append_entries":
            if message.get("term", -1) >= self._SyncObj__raftCurrentTerm:
                self._raftka_leader_contact = raft_clock()
            return False
        if kind == PRE_VOTE:
            contact = self._raftka_leader_contact
            grant = should_grant(
                is_leader=self._SyncObj__raftState == _RAFT_STATE.LEADER,
                heard_from_leader_s=None if contact is None else raft_clock() - contact,
                min_timeout_s=self._SyncObj__conf.raftMinTimeout,
                proposed_term=message.get("term", -1),
                current_term=self._SyncObj__raftCurrentTerm,
                candidate_log=(message.get("last_log_term", -1), message.get("last_log_index", -1)),
                own_log=(self._SyncObj__getCurrentLogTerm(), self._SyncObj__getCurrentLogIndex()))
            self._SyncObj__transport.send(node, {"type": PRE_VOTE_RESPONSE,
                                                 "term": message.get("term"), "granted": grant})
            return True
        if kind == PRE_VOTE_RESPONSE:
            # a voter counts once by its address, whichever connection its answer came on
            voter = getattr(node, "address", node)
            if self._SyncObj__raftState != _RAFT_STATE.LEADER and self._raftka_pre_vote.on_response(
                    voter, message.get("term"), bool(message.get("granted"))):
                self._SyncObj__raftElectionDeadline = 0         # the election, at the next tick
            return True
        return False


MAX_FOLLOWER_POLL_S = 1.0
DEADLINE_SLACK_S = 0.002        # wake just past the deadline, so the tick's `<` check sees it


def follower_poll_s(tick_s: float, to_deadline_s: float, following: bool) -> float:
    """A follower with a leader sleeps until its election deadline, not one tick period.

    Its tick has work only when a message arrived (which ends the poll at once) or its deadline
    passed. Polling one heartbeat period at a time woke it about as often again as the
    leader's heartbeats did, for nothing: half of an idle follower's wake-ups (strace: 149 → 74
    polls in 10 s; issue #23, the idle quorum is part of every per-record cost). Waking at the
    deadline also notices a dead leader up to a tick sooner (bench/README.md, "Where a
    transaction's CPU goes"). Candidates, leaders and followers without a leader keep the
    tick: their ticks do work (votes, heartbeats, reconnections). A deadline less than a tick
    away keeps the tick too, as before; the wait is never longer than MAX_FOLLOWER_POLL_S."""
    if not following or to_deadline_s <= tick_s:
        return tick_s
    return min(to_deadline_s + DEADLINE_SLACK_S, MAX_FOLLOWER_POLL_S)
