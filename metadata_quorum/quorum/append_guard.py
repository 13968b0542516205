"""Raft's append rule on a follower, in front of pysyncobj's.

Raft (Figure 2 of the paper): a follower deletes entries only at a conflict — an entry at the
same index with another term — and keeps whatever follows entries that match. pysyncobj instead
drops everything after an AppendEntries' prevLogIdx and appends what the message carries. A
stale AppendEntries (the leader resends from an older next index: it read two "reset" answers to
one gap, or a reconnection) then cuts a follower's log back, committed and applied entries
included ("truncating already-applied log entries … state machine may have diverged", seen at
cluster start-up in about half of the live runs). The journal keeps that suffix on disk
(journal.py), but pysyncobj's own view of the log is shorter until the leader resends it: an
election in that window sees this follower's log as shorter than it is, and it may vote for a
candidate missing entries it had acknowledged — entries the leader may have counted toward a
commit.

`AppendGuard.admit` rewrites such a message before pysyncobj reads it, so that pysyncobj's
truncation only ever removes entries Raft would remove:
- entries the message carries that the follower already holds (same index, same term) are
  dropped from it and its prevLogIdx/prevLogTerm moved to the last of them;
- when every entry it carries is already held, prevLogIdx moves on over the follower's further
  entries known to match the leader's log: those at or below the follower's commit index
  (committed, so in every later leader's log) and those this leader's earlier AppendEntries
  confirmed (a leader never rewrites its own log within its term). Further entries of unknown
  standing (an old term's uncommitted tail) are left to pysyncobj, which drops them as before.
A message whose prevLogIdx does not match, that conflicts, or that comes from an older term is
passed on unchanged: pysyncobj's own handling of those is Raft's. The follower's answer then
says it holds everything up to the moved prevLogIdx, which is true.
"""

from __future__ import annotations

from typing import Callable


class AppendGuard:
    def __init__(self, journal, raft_state: Callable[[], tuple[bool, int, int]]):
        self.journal = journal              # (command, index, term) entries, pysyncobj's view
        self.raft_state = raft_state        # () -> (is_leader, term, commit_index)
        # the furthest index a leader's AppendEntries showed to match its log, and its term
        self.matched_term = -1
        self.matched_index = 0
        self.rewritten = 0                  # messages changed (for tests and the curious)

    def _term_at(self, index: int) -> int | None:
        journal = self.journal
        if not len(journal):
            return None
        pos = index - journal[0][1]
        if 0 <= pos < len(journal):
            return journal[pos][2]
        return None

    def admit(self, message):
        if not isinstance(message, dict) or message.get("type") != "append_entries" or \
                "prevLogIdx" not in message or "transmission" in message:
            return message
        _, current_term, commit = self.raft_state()
        term = message.get("term", -1)
        prev, entries = message["prevLogIdx"], message.get("entries") or []
        if term < current_term or self._term_at(prev) != message.get("prevLogTerm"):
            return message                  # pysyncobj ignores it / answers "reset": Raft's
        if term != self.matched_term:
            self.matched_term, self.matched_index = term, 0
        last = self.journal[-1][1]
        held = 0
        for entry in entries:
            index, entry_term = entry[1], entry[2]
            if index > last:
                break
            if self._term_at(index) != entry_term:
                self._confirm(prev + held)  # the conflict's own truncation is Raft's
                return message
            held += 1
        end = prev + len(entries)           # the last index the message shows to match
        if held < len(entries):             # new entries after some we hold
            new_prev = prev + held
        else:
            new_prev = min(last, max(end, commit, self.matched_index))
        self._confirm(max(end, new_prev))
        if new_prev == prev:
            return message
        self.rewritten += 1
        return dict(message, prevLogIdx=new_prev, prevLogTerm=self._term_at(new_prev),
                    entries=entries[held:])

    def _confirm(self, index: int) -> None:
        self.matched_index = max(self.matched_index, index)
