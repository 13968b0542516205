"""The active controller's command pipeline (KRaft's QuorumController does the same): a command's
records are computed against a *speculative* image — the committed image plus every record
proposed and not committed yet — and proposed at once; the next command starts without waiting.
Answers still go out only after their records commit (service.py waits on each Proposal).

States of the pipeline and what moves it:

    inactive --activate()--> activating (one activation entry in flight) --entry ok--> active
    active --propose()--> active with proposals in flight --every entry ok--> active, idle
    active --renounce() (a failed or fenced entry or a commit timeout of this activation, a
          Raft snapshot installed)--> inactive: every proposal in flight fails, the speculative
          image is dropped (back to the committed one)
    active --deactivate() (leadership lost)--> inactive: no new proposals; those in flight
          end as Raft reports them (committed: a success, truthfully), or fail when the next
          activation entry commits without Raft having reported them

Each entry is fenced (records.fence_entry) with this activation's id and the metadata offset it
expects to start at: entries committed after a failure, or forwarded by pysyncobj to the next
leader, apply only where their premise holds, so the committed state always equals replaying
the committed records, whatever fails. A failure renounces rather than carrying on: what is
still in flight may yet commit, so the next command would not know which state it runs on;
the next activation entry is appended after all of it, and its commit settles the state.

Pure: no I/O, no clocks. The caller proposes the entries through Raft and reports each entry's
outcome back (`entry_done`), in log order, and every committed state (`committed_upto`).
"""

from __future__ import annotations

import os
from typing import Callable

from metadata_quorum import records as r
from metadata_quorum.image import MetadataImage


class NotProposable(Exception):
    """The pipeline is not active (never activated, or renounced since)."""


class Proposal:
    """One command's entries (several for a metadata transaction), answered together."""

    def __init__(self, entries: list[bytes], end_offset: int, records: list, activates: bool,
                 activation: bytes | None = None):
        self.entries = entries
        self.end_offset = end_offset          # the metadata offset after its last record
        self.records = records                # as replayed (decoded), Begin/End included
        self.activates = activates
        self.activation = activation          # the activation it was written under
        self.acked = 0                        # entries committed so far
        self.done = False
        self.error: str | None = None         # why it failed (None: committed, or in flight)
        # failed, but its entries may still commit (a timeout, a leader change after the
        # append, or a failure of another proposal before it): the client must hear "unknown"
        # (REQUEST_TIMED_OUT), not a definite error it would retry into "already exists"
        self.in_doubt = False
        self.on_finish: list[Callable[[], None]] = []
        self.started = 0.0                    # the caller's own (service.py: commit times)
        self.elected = (0, 0)

    def _finish(self, error: str | None, in_doubt: bool = False) -> None:
        self.done, self.error, self.in_doubt = True, error, error is not None and in_doubt
        for callback in self.on_finish:
            callback()


class CommandPipeline:
    def __init__(self, image: MetadataImage | None = None, next_offset: int = 0,
                 new_activation: Callable[[], bytes] = lambda: os.urandom(8)):
        self.committed = image if image is not None else MetadataImage()
        self.next_offset = next_offset        # the committed state's next metadata offset
        self.speculative = self.committed
        self.speculative_next = next_offset
        self.inflight: list[Proposal] = []
        self.activation: bytes | None = None
        self.active = False                   # the activation entry committed
        self._new_activation = new_activation

    # -- writes ---------------------------------------------------------------------------------

    def activate(self, records: list) -> Proposal:
        """The entry that makes this controller the writer (its expected offset is
        records.ACTIVATE: it applies after whatever came before it). Proposals of an earlier
        activation still in flight stay there: Raft may yet report them committed (a success
        then, not a NOT_CONTROLLER a retry would turn into "already exists"); those it has not
        reported when this entry commits never will be, and fail then."""
        self.active = False
        self.activation = self._new_activation()
        return self._propose(records, activate=True)

    def deactivate(self) -> None:
        """Leadership lost: no new proposals; those in flight wait for Raft's word."""
        self.active = False

    def propose(self, records: list) -> Proposal:
        """Fenced entries for `records` (RecordTooLarge if one record is over the limit), the
        speculative image moved past them."""
        if not self.active:
            raise NotProposable("not the active controller")
        return self._propose(records, activate=False)

    def _propose(self, records: list, activate: bool) -> Proposal:
        entries, decoded = [], []
        offset, image = self.speculative_next, self.speculative
        for items, recs in r.entry_items(records):
            batch = r.msgpack.packb(items, use_bin_type=True)
            entries.append(r.fence_entry(batch, self.activation,
                                         r.ACTIVATE if activate else offset))
            # replayed as the objects, not decoded again from the bytes (that doubled the
            # cost): replay reads records the same either way (tests/test_pipeline.py checks
            # every entry applies on a committed state equal to the speculative one it assumed)
            image = image.apply_all(offset, recs)
            offset += len(recs)
            decoded += recs
        proposal = Proposal(entries, offset, decoded, activate, self.activation)
        self.speculative, self.speculative_next = image, offset
        self.inflight.append(proposal)
        return proposal

    def last_pending(self) -> Proposal | None:
        """What a record-less answer read from the speculative image waits for (KRaft too):
        the state it saw is committed once the last proposal in flight is."""
        return self.inflight[-1] if self.inflight else None

    # -- outcomes -------------------------------------------------------------------------------

    def committed_upto(self, image: MetadataImage, next_offset: int) -> None:
        """A committed state (any entry's, ours or not)."""
        self.committed, self.next_offset = image, next_offset
        if not self.inflight:
            self.speculative, self.speculative_next = image, next_offset

    def entry_done(self, proposal: Proposal, error: str | None,
                   in_doubt: bool = False) -> list[Proposal]:
        """One entry of `proposal` committed (error None) or failed (`in_doubt`: it may still
        commit): returns the proposals that finished because of it (on a failure, see `fail`)."""
        if proposal.done:
            return []
        if error is not None:
            return self.fail(proposal, error, in_doubt)
        proposal.acked += 1
        if proposal.acked < len(proposal.entries):
            return []
        finished = [proposal]
        self.inflight.remove(proposal)
        if proposal.activates and proposal.activation == self.activation:
            self.active = True
            # Raft reported everything before this entry: what it did not, it never will
            stale = [p for p in self.inflight if p.activation != self.activation]
            self.inflight = [p for p in self.inflight if p.activation == self.activation]
            for p in stale:
                p._finish("superseded by a new activation")
            finished += stale
        if not self.inflight:
            # everything proposed is committed: the committed image is the state from here
            # (the activation's offsets were a guess: entries before it may have applied)
            self.speculative, self.speculative_next = self.committed, self.next_offset
        proposal._finish(None)
        return finished

    def fail(self, proposal: Proposal, reason: str, in_doubt: bool = False) -> list[Proposal]:
        """`proposal` failed (an entry refused or truncated, or its commit timed out): every
        proposal in flight of the same activation fails too (each was computed on the ones
        before it). If that is the current activation, the pipeline renounces.

        Which outcomes are certain: `proposal`'s is as `in_doubt` says, and so is every later
        one's (fenced on its offset, a later entry applies only if this one did); an earlier
        one may still commit, so it is in doubt."""
        if proposal.activation != self.activation:
            failed = [p for p in self.inflight if p.activation == proposal.activation]
            self.inflight = [p for p in self.inflight if p.activation != proposal.activation]
        else:
            failed, self.inflight = self.inflight, []
            self._drop_speculative()
        # certain only for `proposal` and the later ones of its activation
        ours = [p for p in failed if p.activation == proposal.activation]
        later = set(map(id, ours[ours.index(proposal):])) if proposal in ours else set()
        for p in failed:
            p._finish(reason, in_doubt=in_doubt if id(p) in later else True)
        if not proposal.done:
            proposal._finish(reason, in_doubt)
        return failed

    def renounce(self, reason: str) -> list[Proposal]:
        """Drop the speculative state: every proposal in flight fails with `reason`, in doubt
        (its entries may still commit)."""
        failed, self.inflight = self.inflight, []
        self._drop_speculative()
        for proposal in failed:
            proposal._finish(reason, in_doubt=True)
        return failed

    def _drop_speculative(self) -> None:
        self.active = False
        self.speculative, self.speculative_next = self.committed, self.next_offset
