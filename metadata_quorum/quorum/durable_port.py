"""The Raft port's durability rules: nothing leaves before the journal is on disk, and a peer whose
disk was wiped is a new member, not the voter it replaced (KIP-853's directory id).

Held sends. While the journal has writes (entries, a truncation) not yet fsynced, every message
this node sends is held, in order, with the number of the journal's last write then, and sent by
the first `flush_held` after a sync covering that write ended (the journal's sync thread, group
commit): a follower's ack then means "on my disk". Consecutive acks to one leader released
together go as the last one (pysyncobj moves a follower's next index back to each ack it reads,
so a run of stale acks made the leader resend entries already in flight). The exception is the
leader's AppendEntries: they leave at the end of the tick that wrote them, before its own
sync ends, so followers write while the leader writes (syncs in parallel, not in a row); the
leader counts its own log toward a commit only up to the journal's durable index (RaftQuorum).
AppendEntries of one tick to one follower go as one message: pysyncobj sends one per proposal,
and each cost a pickle, an encryption and an ack.

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

from metadata_quorum.quorum.pre_vote import PRE_VOTE, PRE_VOTE_RESPONSE

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
        if kind in ("response_vote", PRE_VOTE_RESPONSE):
            self.dropped += 1
            self._warn(address, directory, "its votes are dropped")
            return None
        if kind in ("request_vote", PRE_VOTE):
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


MAX_MERGED_BYTES = 1 << 20            # AppendEntries merged up to this many bytes of entries


def merge_append_entries(first: dict, second: dict) -> dict | None:
    """One AppendEntries carrying `first`'s entries and then `second`'s (None if they do not
    join: another term, a gap, a snapshot transfer, or too large)."""
    plain = ("entries" in first and "entries" in second and "prevLogIdx" in first
             and "prevLogIdx" in second and "transmission" not in first
             and "transmission" not in second)
    if not plain or first["term"] != second["term"]:
        return None
    head = first["entries"]
    end = head[-1][1] if head else first["prevLogIdx"]
    if second["prevLogIdx"] != end:
        return None
    entries = list(head) + list(second["entries"])
    if sum(len(e[0]) for e in entries) > MAX_MERGED_BYTES:
        return None
    return dict(second, entries=entries, prevLogIdx=first["prevLogIdx"],
                prevLogTerm=first["prevLogTerm"])


def is_plain_ack(message: dict) -> bool:
    return (message.get("type") == "next_node_idx" and "next_node_idx" in message
            and bool(message.get("success")) and not message.get("reset"))


def coalesce_acks(batch: list) -> list:
    """`batch` of (node, message) in order, without the acks a later ack to the same node
    supersedes (nothing else to that node between them, and a next index no higher)."""
    out, later = [], {}                 # node -> next index of the ack kept after this point
    for node, message in reversed(batch):
        if is_plain_ack(message):
            if node in later and message["next_node_idx"] <= later[node]:
                continue
            later[node] = message["next_node_idx"]
        else:
            later.pop(node, None)
        out.append((node, message))
    out.reverse()
    return out


def take_durable(held: list | None, durable_seq: int) -> list:
    """Remove from `held` ((write seq, node, message), in order) the messages whose writes are
    all durable, and return them (node, message) with superseded acks left out."""
    if not held:
        return []
    ready = 0
    while ready < len(held) and held[ready][0] <= durable_seq:
        ready += 1
    batch = [(node, message) for _, node, message in held[:ready]]
    del held[:ready]
    return coalesce_acks(batch)


def queue_append(queued: list, message: dict) -> None:
    """One more AppendEntries for a node this tick: merged into the last one queued where
    that is possible, so the tick sends one message per node."""
    merged = merge_append_entries(queued[-1], message) if queued else None
    if merged is not None:
        queued[-1] = merged
    else:
        queued.append(message)


def durable_transport(base: type, journal, guard: DirectoryGuard, append_guard=None) -> type:
    """`base` (a pysyncobj TCPTransport class) holding sends until the journal writes before
    them are synced, merging a tick's AppendEntries, and stamping/filtering directory ids;
    `append_guard` (append_guard.AppendGuard) keeps a stale AppendEntries from cutting back
    entries this follower holds."""

    class DurableTransport(base):
        def send(self, node, message):
            guard.stamp(message)
            if message.get("type") == "append_entries":
                # out at the end of this tick (flush_held), merged with the tick's others
                appends = self.__dict__.setdefault("_raftka_appends", {})
                queue_append(appends.setdefault(node, []), message)
                return True     # pysyncobj reads connection loss from its own node set
            held = self.__dict__.setdefault("_raftka_held", [])
            if journal.needs_sync or held:
                held.append((journal.written_seq, node, message))
                return True
            self._send_appends(node)            # what the leader sent before goes first
            return super().send(node, message)

        def _send_appends(self, only=None) -> None:
            appends = self.__dict__.get("_raftka_appends")
            if not appends:
                return
            nodes = list(appends) if only is None else [only] if only in appends else []
            for node in nodes:
                for message in appends.pop(node):
                    super().send(node, message)

        def flush_held(self, block: bool = False) -> None:
            """Take in the journal syncs that ended, hand the next one over (`block`: sync on
            this thread instead), send this tick's AppendEntries, then every held message whose
            writes are now durable, in order."""
            journal.collect_synced()
            if block:
                journal.sync()
            else:
                journal.start_sync()
            guard.apply_committed()
            self._send_appends()
            for node, message in take_durable(self.__dict__.get("_raftka_held"),
                                              journal.durable_seq):
                super().send(node, message)

        def _onMessageReceived(self, node, message):
            message = guard.admit(getattr(node, "address", None), message)
            if message is not None and append_guard is not None:
                message = append_guard.admit(message)
            if message is None:
                return
            hook = getattr(self.__dict__.get("_syncObj"), "raftka_on_message", None)
            if hook is not None and hook(node, message):
                return                                  # pre-vote (quorum/pre_vote.py)
            if not is_plain_ack(message):
                super()._onMessageReceived(node, message)
                return
            # pysyncobj sets a follower's next index to every ack it reads, even one older than
            # what it already sent: the leader then resends entries in flight (and the follower
            # drops and re-adds them). A success moves it forward only, as in etcd's Raft.
            next_index = getattr(self.__dict__.get("_syncObj"), "_SyncObj__raftNextIndex", {})
            before = next_index.get(node)
            super()._onMessageReceived(node, message)
            after = next_index.get(node)
            if before is not None and after is not None and after < before:
                next_index[node] = before

    return DurableTransport
