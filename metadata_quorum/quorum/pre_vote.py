"""Pre-vote (Raft thesis §9.6, Kafka's KIP-996) in front of pysyncobj's elections.

pysyncobj has none: a follower whose election deadline passes raises its term and asks for
votes at once, and the leader, seeing the higher term, steps down. A follower merely held up
(its process descheduled on a loaded machine, its Raft thread waiting for the GIL while the
event loop applied a 30,000-partition change; pysyncobj also drops a Raft connection silent for
0.8 s, so the heartbeats sent meanwhile are lost) therefore deposed a healthy leader, and the
cluster paid an activation for nothing.

With pre-vote a follower whose deadline passed first asks the others whether they *would* vote
for it at the next term, without raising its own. A voter says yes only if it has not heard from
a leader within the minimum election timeout (it is not the leader itself) and the asker's log
is at least as up to date as its own. Only with a majority of yeses does pysyncobj's election
run. A leader that is really gone is replaced as before (its followers stop hearing from it, so
they grant), one round trip later; a held-up follower gets no majority while the leader
heartbeats the others, and rejoins at the next heartbeat it reads.

Pre-vote only ever delays an election, never grants one Raft would not: a real vote is still
needed, under pysyncobj's rules, so safety is pysyncobj's. A controller of an older version
ignores the new messages (pysyncobj drops unknown types): its elections run as before, and a
newer node's pre-vote needs a majority of newer nodes, or an older node's election, to proceed.

This module is the decision logic only; quorum/elections.py (a mixin of raft.py's
DurableSyncObj) and quorum/durable_port.py carry the messages on pysyncobj's thread.
"""

from __future__ import annotations

PRE_VOTE = "raftka_pre_vote"
PRE_VOTE_RESPONSE = "raftka_pre_vote_response"


def log_up_to_date(candidate: tuple[int, int], own: tuple[int, int]) -> bool:
    """Raft's vote rule on (last log term, last log index)."""
    return candidate >= own


def should_grant(*, is_leader: bool, heard_from_leader_s: float | None, min_timeout_s: float,
                 proposed_term: int, current_term: int, candidate_log: tuple[int, int],
                 own_log: tuple[int, int]) -> bool:
    """Whether this voter would vote for a candidate at `proposed_term` now.
    `heard_from_leader_s`: seconds since the last AppendEntries from a leader at this voter's
    term or a later one (None: none since it started)."""
    if is_leader:
        return False            # alive and answering: no one needs replacing
    if heard_from_leader_s is not None and heard_from_leader_s < min_timeout_s:
        return False
    if proposed_term < current_term:
        return False
    return log_up_to_date(candidate_log, own_log)


class PreVoteRound:
    """One node's pre-vote rounds: started when its election deadline passes, won with a
    majority of the voters (itself included)."""

    def __init__(self):
        self.term: int | None = None        # the term asked for
        self.granted: set = set()
        self.needed = 0
        self.won_term: int | None = None

    def start(self, current_term: int, voters: int) -> dict:
        """A new round for term `current_term + 1` among `voters` nodes (this one included);
        returns the message for the others."""
        self.term = current_term + 1
        self.granted = set()
        self.needed = voters // 2           # other yeses for a majority: it grants itself
        self.won_term = self.term if self.needed <= 0 else None
        return {"type": PRE_VOTE, "term": self.term}

    def on_response(self, voter, term: int, granted: bool) -> bool:
        """True the moment this answer completes a majority for the current round."""
        if not granted or term != self.term or self.won_term == term:
            return False
        self.granted.add(voter)
        if len(self.granted) >= self.needed:
            self.won_term = term
            return True
        return False

    def may_elect(self, current_term: int) -> bool:
        """Whether pysyncobj's election (to `current_term + 1`) may run now; consumes the win."""
        if self.won_term is not None and self.won_term == current_term + 1:
            self.won_term = None
            self.term = None
            return True
        return False
