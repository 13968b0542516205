"""The Raft port's durability rules: nothing leaves before the journal is on disk, and a peer whose
disk was wiped is a new member, not the voter it replaced (KIP-853's directory id).

Held sends. While the journal has entries (or a truncation) not yet fsynced, every message this
node sends is held, in order, and sent after the next `flush_held` (one fsync for all of them):
a follower's ack then means "on my disk". The exception is the leader's AppendEntries: it leaves
at once, so followers write while the leader writes (two fsyncs in parallel, not in a row); the
leader counts its own log toward a commit only at the start of a tick, right after `flush_held`
synced it (RaftQuorum), so every count is of entries on disk.

Directory ids. Each controller's metadata directory gets a random id when it is created
(journal.py); every Raft message carries the sender's. Each controller pins a peer's id, durably,
the first time it hears from that address. A peer that later shows another id lost its disk: it
forgot its log, its term and its vote, so
- its votes are dropped and its vote requests are seen as coming from a log behind everyone's
  (its term still counts, as in Raft): it cannot help elect a leader missing entries it had
  acknowledged, nor vote twice in a term it forgot, nor lead;
- the leader keeps replicating to it (it catches up, as a learner would), but its acks never
  count toward a commit (success is turned into a plain "no", which moves nothing);
- once it has every committed entry, the leader proposes its re-admission as a Raft entry (a
  no-op pysyncobj skips when applying, carrying address and new id); every controller pins the
  new id when that entry is committed. The commit was counted without the stranger, so a
  majority of recognized voters holds everything committed (a stale leader cannot commit it),
  and the stranger had all of it: from then on it is an ordinary voter that may lag. A controller
  that learns the entry only through a snapshot keeps ignoring the stranger until a later
  leader's re-admission reaches it (safe: it costs availability only).
Pins are learned first-hand (trust on first use) and through the log: a leader writes each
peer's id as an entry once per term (the same entry as a re-admission), and every controller
pins what is committed. What this cannot see: a peer wiped before any leader heard from it and
wrote its id (a cluster's first seconds), or before a controller that learns the log only
through a snapshot heard it (the entries a snapshot replaced are not replayed).
"""

from __future__ import annotations

import json
import logging
import time
from typing import Callable

log = logging.getLogger(__name__)

DIRECTORY_KEY = "raftka_directory_id"
LOG_EVERY_S = 10.0
READMIT_MARK = b"raftka-readmit:"
NO_OP = b"\x01"                   # pysyncobj's _COMMAND_TYPE.NO_OP


class DirectoryGuard:
    """Decides which messages from a peer count, by the directory id they carry."""

    def __init__(self, journal, raft_state: Callable[[], tuple[bool, int, int]],
                 propose_noop: Callable[[bytes], None] = lambda payload: None,
                 clock=time.monotonic):
        self.journal = journal                  # DurableJournal: own id and pins, durably
        self.raft_state = raft_state            # () -> (is_leader, term, commit_index)
        # appends a no-op entry carrying `payload` (pysyncobj skips no-ops when applying)
        self.propose_noop = propose_noop
        self.pins = journal.peer_directories()
        self.proposed: dict[str, tuple[str, int]] = {}      # address -> (id, term)
        self.pending: list[tuple[int, int, bytes]] = []     # re-admissions: (index, term, command)
        self.dropped = 0
        self._clock = clock
        self._last_log: dict[str, float] = {}
        for command, idx, term in journal:
            self.entry_added(command, idx, term)
        journal.on_add = self.entry_added

    @property
    def directory_id(self) -> str:
        return self.journal.directory_id

    def stamp(self, message):
        if isinstance(message, dict):
            message[DIRECTORY_KEY] = self.journal.directory_id
        return message

    def admit(self, address: str | None, message):
        """The message as pysyncobj should see it, or None to drop it."""
        if address is None or not isinstance(message, dict):
            return message
        directory = str(message.get(DIRECTORY_KEY, ""))    # "": a controller without ids
        pinned = self.pins.get(address)
        if pinned is None:
            self.pin(address, directory)
            pinned = directory
        if pinned == directory:
            self._maybe_announce(address, directory)
            return message
        kind = message.get("type")
        if kind == "response_vote":
            self.dropped += 1
            self._warn(address, directory, "its votes are dropped")
            return None
        if kind == "request_vote":
            # seen as a candidate whose log is behind everyone's: its term still moves the
            # quorum on (dropping it would leave it campaigning at a term no leader reaches,
            # ignoring every leader's lower-term AppendEntries), but no vote is granted
            self._warn(address, directory, "no vote is granted to it")
            return dict(message, last_log_term=-1, last_log_index=-1)
        if kind == "next_node_idx" and message.get("success"):
            self._maybe_readmit(address, directory, message["next_node_idx"] - 1)
            # the leader keeps sending from where it got to; only its match index stays put
            return dict(message, success=False, reset=False)
        return message

    def pin(self, address: str, directory: str) -> None:
        self.journal.pin_peer_directory(address, directory)
        self.pins[address] = directory

    def _maybe_announce(self, address: str, directory: str) -> None:
        """A leader writes each peer's id into the log once per term: followers do not talk to
        each other, so without it a follower would first hear a peer's id when it campaigns —
        after a wipe, the new id (and it would take a wiped peer for the one it replaced)."""
        is_leader, term, _ = self.raft_state()
        if is_leader and self.proposed.get(address) != (directory, term):
            self.proposed[address] = (directory, term)
            self.propose_noop(READMIT_MARK + json.dumps([address, directory]).encode())

    def _maybe_readmit(self, address: str, directory: str, match_index: int) -> None:
        """A stranger that has every committed entry: propose its re-admission, once per term."""
        is_leader, term, commit = self.raft_state()
        if not is_leader or match_index < commit or self.proposed.get(address) == (directory, term):
            return
        self.proposed[address] = (directory, term)
        log.warning("Raft: proposing to re-admit the controller at %s (new directory id %s): it has "
                    "every committed entry (%d)", address, directory, commit)
        self.propose_noop(READMIT_MARK + json.dumps([address, directory]).encode())

    # -- re-admissions travel in the Raft log ----------------------------------------------

    def entry_added(self, command: bytes, idx: int, term: int) -> None:
        if command[:1] == NO_OP and command[1:1 + len(READMIT_MARK)] == READMIT_MARK:
            self.pending.append((idx, term, command))

    def apply_committed(self) -> None:
        """Pin the ids of re-admissions now committed (on pysyncobj's thread, each tick).
        Their commit was counted without the stranger, whose acks are neutered until then: a
        majority of recognized voters holds everything committed, and the stranger had all of
        it when proposed, so from now on it is an ordinary voter that may lag."""
        if not self.pending:
            return
        commit = self.raft_state()[2]
        first = self.journal[0][1] if len(self.journal) else 0
        keep = []
        for idx, term, command in self.pending:
            if idx > commit:
                keep.append((idx, term, command))
                continue
            pos = idx - first
            if 0 <= pos < len(self.journal) and self.journal[pos] == (command, idx, term):
                address, directory = json.loads(command[1 + len(READMIT_MARK):])
                if directory == self.journal.directory_id:
                    continue                        # this controller itself
                before = self.pins.get(address)
                if before != directory:
                    self.pin(address, directory)
                    if before is not None:
                        log.warning("Raft: the controller at %s rejoined with a new metadata "
                                    "directory (id %s, was %s): it caught up and counts as a "
                                    "voter again", address, directory, before)
        self.pending = keep

    def _warn(self, address: str, directory: str, what: str) -> None:
        now = self._clock()
        if now - self._last_log.get(address, -LOG_EVERY_S) < LOG_EVERY_S:
            return
        self._last_log[address] = now
        log.warning("Raft: the controller at %s has a new metadata directory (id %s, was %s): "
                    "its disk was wiped or replaced, so it forgot its log and votes; %s until a "
                    "leader re-admits it once it caught up", address, directory,
                    self.pins.get(address), what)


def durable_transport(base: type, journal, guard: DirectoryGuard, append_guard=None) -> type:
    """`base` (a pysyncobj TCPTransport class) holding sends until the journal is synced and
    stamping/filtering directory ids; `append_guard` (append_guard.AppendGuard) keeps a stale
    AppendEntries from cutting back entries this follower holds."""

    class DurableTransport(base):
        def send(self, node, message):
            guard.stamp(message)
            held = self.__dict__.setdefault("_raftka_held", [])
            if message.get("type") == "append_entries":
                # the leader writes its disk while followers write theirs (as Kafka and etcd
                # do): it counts itself toward a commit only after the tick's first sync
                return super().send(node, message)
            if journal.needs_sync or held:
                held.append((node, message))
                return True     # pysyncobj reads connection loss from its own node set
            return super().send(node, message)

        def flush_held(self):
            """fsync the journal once, then send what waited for it, in order."""
            journal.sync()
            guard.apply_committed()
            held = self.__dict__.get("_raftka_held")
            if held:
                self._raftka_held = []
                for node, message in held:
                    super().send(node, message)

        def _onMessageReceived(self, node, message):
            message = guard.admit(getattr(node, "address", None), message)
            if message is not None and append_guard is not None:
                message = append_guard.admit(message)
            if message is not None:
                super()._onMessageReceived(node, message)

    return DurableTransport
