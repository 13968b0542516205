"""The Raft layer: the only module that imports pysyncobj (see ARCHITECTURE.md).

- Membership starts as the configured voters and changes one server at a time through
  pysyncobj's dynamic membership (`dynamicMembershipChange`; metadata_quorum/controller/
  voter_control.py says what it guarantees and what it does not). A *joining* controller (not
  among the configured voters, empty directory) knows the current voters but stays out of
  elections until a leader reaches it, i.e. until it has been added: campaigning alone would
  only raise its term, and the first leader heartbeat it then rejects would cost the quorum an
  election. The journal (`raft.log`, quorum/journal.py) and `fullDumpFile` under the
  controller's metadata directory; election timeouts 400–800 ms with heartbeats every 130 ms
  (every 50 ms, heartbeats were a third of an idle controller's cost; 100 → 130 ms took 14 %
  off its Raft thread), leader fallback 1 s, `appendEntriesUseBatch=False`.
- The Raft port: bound to exactly this node's configured address (`bindAddress`; pysyncobj
  would otherwise listen on 0.0.0.0), encrypted and authenticated by the shared `password`
  (never None: without one pysyncobj unpickles whatever arrives). quorum/raft_port.py logs the
  peers it drops for failing authentication and bounds unauthenticated connections.
- Exactly one replicated method, `MetadataLog.apply(batch: bytes)`: a msgpack list of metadata
  records (an operation too large for one entry spans several: records.encode_entries). pysyncobj numbers replicated methods by their sorted names, so a
  second one would silently break every journal: never add one.
- The applier never raises (an exception there would wedge every node), is deterministic, and
  keeps its own metadata offset: record n of the cluster's history has offset n everywhere.
- Entries are fenced (records.fence_entry): the active controller pipelines commands
  (metadata_quorum/pipeline.py), so an entry is applied only if its writer (the activation id
  committed when that controller became active) is still the current one and the metadata
  offset is the one it was computed for; otherwise it is skipped (FENCED), the same way on every
  node. pysyncobj forwards a deposed leader's queued commands to the next leader, which appends
  them after its own: without the fence they would apply on a state they were not computed on.
- Replicated state is what `SyncObjConsumer` serialises: `next_offset`, `image`, a bounded `tail`
  of recent encoded records. Everything set before `SyncObjConsumer.__init__` (the listener, the
  lock) is local and not serialised.
- Durability (quorum/journal.py, quorum/durable_port.py, quorum/syncer.py): our own fsynced
  journal replaces pysyncobj's unsynced one. The fsyncs run on a thread of their own (group
  commit: one covers whatever was written when it started; pysyncobj's thread goes on
  receiving, appending and sending meanwhile, and the next entries gather for the next one).
  Acks and votes wait at the Raft port until the writes before them are synced; the leader's
  AppendEntries leave at the end of the tick that wrote them (followers write while it
  writes), and the leader counts itself toward a commit only up to its journal's durable index:
  while pysyncobj counts (start of a tick) the match indexes it reads are capped at that index,
  so an entry beyond it has only the leader's own vote, never a majority (with one voter, the
  journal is synced on the tick instead). So no entry counts toward a commit before it is on
  the disk of each node counting it. Term and vote are fsynced before pysyncobj sends anything
  reflecting them; snapshots are fsynced with their directory before the entries they replace
  are dropped. A controller whose directory was wiped gets a new directory id and is kept out
  of votes and commit counts until a leader re-admits it.
- A follower truncates only at a conflict (quorum/append_guard.py): pysyncobj cut a follower's
  log back to a stale AppendEntries' prevLogIdx, committed entries included.
- Committed entries are applied at most APPLY_BUDGET_S per tick (DurableSyncObj): pysyncobj
  applied a restart's whole backlog in one tick, deaf to heartbeats and votes meanwhile.
- Elections go through pre-vote first (quorum/pre_vote.py, KIP-996), and a follower past its
  election deadline reads what arrived before deciding (quorum/elections.py): a follower merely
  held up (loaded machine, GIL) no longer deposes a healthy leader.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Callable, NamedTuple

from pysyncobj import SyncObj, SyncObjConf, SyncObjConsumer, replicated
from pysyncobj.config import FAIL_REASON
from pysyncobj.syncobj import _COMMAND_TYPE

from metadata_quorum.image import MetadataImage
from metadata_quorum.quorum import journal as durable_journal
from metadata_quorum.quorum import snapshot_writer
from metadata_quorum.quorum.append_guard import AppendGuard
from metadata_quorum.quorum.durable_port import DirectoryGuard, durable_transport
from metadata_quorum.quorum.journal import DurableJournal
from metadata_quorum.quorum.elections import ElectionGuards
from metadata_quorum.quorum.raft_port import DropLog, bind_outgoing_raft, checked_transport
from metadata_quorum.records import (ACTIVATE, MAX_RECORD_BYTES, MetadataRecordError, decode_record,
                                     unfence_entry)

log = logging.getLogger(__name__)

MAX_TAIL = 50_000
UNDECODABLE = -1            # apply's result for an entry it could not decode
FENCED = -2                 # ... for an entry whose writer or expected offset no longer holds
JOIN_ELECTION_TIMEOUT_S = 10 ** 6     # a joining node never campaigns before a leader adds it
HEARTBEAT_S = 0.13          # the leader's AppendEntries period (see RaftQuorum.__init__)
APPLY_BUDGET_S = 0.05       # committed entries applied per tick at most (DurableSyncObj)
FAIL_REASONS = {v: k for k, v in vars(FAIL_REASON).items() if not k.startswith("_")}


class Committed(NamedTuple):
    """A committed entry: its records (encoded) from offset `first`, and the image after it."""
    first: int
    encoded: list
    image: MetadataImage


class Reset(NamedTuple):
    """The whole state was replaced: pysyncobj loaded its dump at start-up (on its first tick,
    after the service subscribed) or installed a leader's snapshot. Listeners start over."""
    image: MetadataImage
    next_offset: int
    tail_start: int
    tail: list


class MetadataLog(SyncObjConsumer):
    """Replicated metadata state; `apply` is the single replicated method."""

    def __init__(self):
        # Local, unreplicated attributes first (SyncObjConsumer records these as non-state).
        self._listener: Callable[[Committed | Reset], None] | None = None
        self._lock = threading.Lock()
        self.bad_batches_local = 0
        self.fenced_local = 0
        self.snapshot_offset_local = 0      # next_offset of the last snapshot loaded here
        super().__init__()
        # Replicated state.
        self.next_offset = 0
        self.image = MetadataImage()
        self.tail: list[bytes] = []          # encoded records, offsets tail_start...
        self.tail_start = 0
        self.writer = b""                   # the active controller's activation id (records.py)

    @replicated
    def apply(self, batch: bytes) -> int:
        """Append a committed batch; returns its first offset, UNDECODABLE or FENCED (skipped:
        written on a state that is not this one, records.fence_entry)."""
        try:
            fence, encoded = unfence_entry(batch)
            if fence is not None and fence[1] != ACTIVATE \
                    and (fence[0] != self.writer or fence[1] != self.next_offset):
                # deterministic too: writer and next_offset are replicated state. Checked before
                # the records are decoded: a deposed controller's pipeline can leave hundreds of
                # such entries (a restart replays them all on pysyncobj's thread)
                log.info("skipping a metadata entry written for offset %d by an earlier active "
                         "controller (now at %d): its premise did not commit", fence[1],
                         self.next_offset)
                self.fenced_local += 1
                return FENCED
            records = [decode_record(item) for item in encoded]
        except MetadataRecordError as exc:
            # Deterministic on every node: the same bytes fail the same way everywhere.
            log.error("skipping undecodable metadata batch: %s", exc)
            self.bad_batches_local += 1
            return UNDECODABLE
        if fence is not None:
            self.writer = fence[0]          # an activation (the only fenced entry left here)
        with self._lock:
            first = self.next_offset
            self.image = self.image.apply_all(first, records)
            self.next_offset = first + len(records)
            self.tail.extend(encoded)
            if len(self.tail) > MAX_TAIL:
                drop = len(self.tail) - MAX_TAIL // 2
                del self.tail[:drop]
                self.tail_start += drop
            event = Committed(first, encoded, self.image)
        self._notify(event)
        return first

    def _deserialize(self, data):
        """pysyncobj replaces the replicated state (dump load, snapshot install) without
        replaying entries: tell the listener, which would otherwise keep serving the old state
        and see the next entry as a gap (the restart failure of issue 17)."""
        with self._lock:
            super()._deserialize(data)
            self.snapshot_offset_local = self.next_offset
            event = Reset(self.image, self.next_offset, self.tail_start, list(self.tail))
        log.info("metadata state loaded from a Raft snapshot: next offset %d", event.next_offset)
        self._notify(event)

    def _notify(self, event) -> None:
        listener = self._listener
        if listener is not None:
            try:
                listener(event)
            except Exception:  # noqa: BLE001 - the applier must never raise
                log.exception("metadata listener failed")

    def subscribe(self, listener: Callable[[Committed | Reset], None]) -> Reset:
        """Install the listener; returns the current state atomically with it."""
        with self._lock:
            self._listener = listener
            return Reset(self.image, self.next_offset, self.tail_start, list(self.tail))


class DurableMatchIndex(dict):
    """pysyncobj's per-follower match index; while `cap` is set (pysyncobj's commit count at the
    start of a tick) it reads no higher than the highest index on a majority of disks.
    pysyncobj counts the leader itself for every index it holds, synced or not: capped, an
    index beyond the cap gets that one vote only, short of a majority, and one within it is on
    a majority of disks — the leader's or not: two followers that synced commit an entry whose
    leader is still syncing it. Outside the count the true values are read (an ack compared
    against a capped value would move the next index back)."""

    cap: int | None = None

    def set_cap(self, voters: set, own_durable: int) -> None:
        """The cap for a count among the leader and `voters` (its other voting nodes, whose
        acks are sent only once durable: quorum/durable_port.py)."""
        indexes = sorted([own_durable] + [dict.get(self, node, 0) for node in voters],
                         reverse=True)
        self.cap = indexes[len(indexes) // 2]     # the majority-th highest

    def __getitem__(self, node):
        value = dict.__getitem__(self, node)
        cap = self.cap
        return value if cap is None or value <= cap else cap

    def get(self, node, default=None):
        return self[node] if node in self else default


class DurableSyncObj(ElectionGuards, SyncObj):
    """pysyncobj's SyncObj with the journal's durability rules on its tick: at the start, syncs
    that ended are taken in, the messages waiting for them sent, and the leader's count capped
    at its durable index; at the end (after the tick's appends), the next sync is handed over
    and the tick's AppendEntries leave."""

    def __init__(self, *args, **kwargs):
        # attributes set before SyncObj.__init__ are local: pysyncobj pickles every attribute
        # added after it into its snapshots as replicated state
        self._raftka_end = self._tick_end
        self.raftka_log: MetadataLog | None = None      # RaftQuorum sets these two
        self.raftka_compact_records = 0
        self._raftka_serialized = self._raftka_compact_from = None
        self._init_elections()
        super().__init__(*args, **kwargs)
        self.addOnTickCallback(self._raftka_end)

    def _onTick(self, timeToWait=0.0):
        matches = self._SyncObj__raftMatchIndex
        if not isinstance(matches, DurableMatchIndex):
            # replaced here, on pysyncobj's own thread, which alone reads it
            matches = self._SyncObj__raftMatchIndex = DurableMatchIndex(matches)
        # one voter counts only itself: nothing can be capped to below a majority, so sync
        alone = not self._SyncObj__otherNodes
        self.flush_durable(block=alone)
        journal = self._SyncObj__raftLog
        if isinstance(journal, DurableJournal):
            matches.set_cap(self._SyncObj__otherNodes, journal.durable_index())
        self._read_before_electing()
        self._pre_vote_first()
        super()._onTick(self._poll_wait(timeToWait))
        self._compact_by_records()

    def _compact_by_records(self) -> None:
        """pysyncobj compacts past a number of Raft entries or after a time. An entry holds up
        to hundreds of records, so at 30,000 partitions its entry count alone (20,000) is
        never reached, and a cluster restarted within a minute of its last snapshot replays
        everything since at the next start: each quick restart added ~100,000 records to the
        replay (bench/README.md, "A full restart's brokers register at once"). So a
        compaction also starts once `raftka_compact_records` records were applied since the
        last one (`RaftQuorum` sets the limit and the log)."""
        mlog, limit = self.raftka_log, self.raftka_compact_records
        if mlog is None or not limit or self._SyncObj__needLoadDumpFile:
            return                      # (counting starts once the snapshot on disk is loaded)
        serialized = self._SyncObj__lastSerializedEntry
        if self._raftka_compact_from is None:
            self._raftka_serialized, self._raftka_compact_from = serialized, \
                mlog.snapshot_offset_local
        elif serialized != self._raftka_serialized:         # a compaction finished
            self._raftka_serialized, self._raftka_compact_from = serialized, mlog.next_offset
        if mlog.next_offset - self._raftka_compact_from >= limit:
            self._raftka_compact_from = mlog.next_offset
            self.forceLogCompaction()

    def _tick_end(self) -> None:
        matches = self._SyncObj__raftMatchIndex
        if isinstance(matches, DurableMatchIndex):
            matches.cap = None
        self.flush_durable()

    def addOnTickCallback(self, callback):
        """Callbacks run before `_tick_end`, which must come last: what they send or append
        leaves in this tick, not after pysyncobj's next poll."""
        end = self.__dict__.get("_raftka_end")
        with self._SyncObj__onTickCallbacksLock:
            callbacks = self._SyncObj__onTickCallbacks
            if callbacks and callbacks[-1] is end and callback is not end:
                callbacks.insert(len(callbacks) - 1, callback)
            else:
                callbacks.append(callback)

    def _SyncObj__applyLogEntries(self):
        """pysyncobj applies every committed entry in one tick. After a restart that is the
        whole journal since the snapshot — at 30,000 partitions hundreds of entries of hundreds
        of records, seconds of work — during which this node neither heartbeats, nor answers
        AppendEntries or votes: after a full restart the active controller changed eleven
        times in 12 s (bench/README.md, "A full restart's brokers register at once"). Here a
        tick applies entries one at a time for at most APPLY_BUDGET_S, and while some wait the
        next tick comes at once (`wake`), after the messages that came meanwhile."""
        commit = self._SyncObj__raftCommitIndex
        if commit - self._SyncObj__raftLastApplied <= 1:
            return super()._SyncObj__applyLogEntries()
        deadline = time.monotonic() + APPLY_BUDGET_S
        send = False
        try:
            while self._SyncObj__raftLastApplied < commit:
                before = self._SyncObj__raftLastApplied
                self._SyncObj__raftCommitIndex = before + 1
                send = super()._SyncObj__applyLogEntries() or send
                if self._SyncObj__raftLastApplied == before or time.monotonic() >= deadline:
                    break               # (an entry pysyncobj would not apply: as it does)
        finally:
            self._SyncObj__raftCommitIndex = commit
        if self._SyncObj__raftLastApplied < commit:
            self.wake()
        return send

    def _SyncObj__loadDumpFile(self, clearJournal):
        """pysyncobj's dump load, with the journal first aligned to the dump it reads
        (DurableJournal.align_to_snapshot says why); a snapshot installed from the leader
        (`clearJournal`) replaces the journal anyway."""
        serializer = self.__dict__.get("_SyncObj__serializer")
        journal = self.__dict__.get("_SyncObj__raftLog")
        if clearJournal or serializer is None or not isinstance(journal, DurableJournal):
            return super()._SyncObj__loadDumpFile(clearJournal)
        read = serializer.deserialize

        def deserialize():
            data = read()
            journal.align_to_snapshot(data[2], data[1])
            return data
        serializer.deserialize = deserialize
        try:
            return super()._SyncObj__loadDumpFile(clearJournal)
        finally:
            del serializer.deserialize

    def flush_durable(self, block: bool = False) -> None:
        transport = self.__dict__.get("_SyncObj__transport")
        if transport is not None:
            transport.flush_held(block)

    def wake(self) -> None:
        """Make pysyncobj's poll return now (from any thread): a journal sync ended."""
        notifier = self.__dict__.get("_SyncObj__pipeNotifier")
        if notifier is not None:
            notifier.notify()


def raft_timing(election_timeout_s: tuple[float, float]) -> dict:
    """pysyncobj's timing settings for election timeouts `election_timeout_s` (min, max)."""
    heartbeat_s = min(HEARTBEAT_S, election_timeout_s[0] / 3.05)   # min > 3 periods
    return dict(
        raftMinTimeout=election_timeout_s[0],
        raftMaxTimeout=election_timeout_s[1],
        # pysyncobj requires the minimum election timeout to exceed three periods: 130 ms is
        # the largest under 400 / 3. Against 100 ms: a fifth fewer heartbeats and 14 % less CPU
        # for an idle quorum's Raft threads (3.05 → 2.63 % of one core, issue #23), while a
        # follower's tolerance for a stalled leader moves by at most the 30 ms between heartbeats
        appendEntriesPeriod=heartbeat_s,
        # the tick (pysyncobj's poll timeout) matches the heartbeat period: messages and
        # proposals wake the poll anyway, so a 50 ms tick (the default) only added idle
        # wake-ups, a visible share of an idle cluster's CPU (issue #23). A shorter tick would
        # also stretch the heartbeats: the poll restarts at each follower's answer, so a leader
        # ticking every 100 ms saw a 130 ms period pass only every other tick. A follower with
        # a leader polls until its election deadline instead (elections.follower_poll_s)
        autoTickPeriod=heartbeat_s,
        leaderFallbackTimeout=1.0,
        connectionTimeout=max(election_timeout_s[1], 0.5),
        connectionRetryTime=0.5,
    )


class RaftQuorum:
    def __init__(self, node_id: int, raft_peers: dict[int, str], data_dir: str, password: str,
                 election_timeout_s: tuple[float, float] = (0.4, 0.8),
                 compaction_min_entries: int = 20_000, compaction_min_time_s: float = 60,
                 compaction_min_records: int = 100_000, joining: bool = False,
                 fsync: bool = True, sync_record: bool = False,
                 disk: durable_journal.Disk | None = None):
        """`raft_peers`: {node_id: "host:port"} of every voter's Raft port, this node included
        (a joining node: the current voters and itself). `fsync=False` only for benchmarks;
        `sync_record` (tests) writes each synced journal length to `raft.log.synced`; `disk`
        (tests) replaces the real one (metadata_quorum/testing_disk.py)."""
        if not password:
            raise ValueError("the Raft port needs a password: without one pysyncobj unpickles "
                             "whatever a peer sends")
        os.makedirs(data_dir, exist_ok=True)
        # pysyncobj creates its journal at once: a marker, written once a leader reached this
        # node, tells a joining node restarted before it was added from one that is a voter
        self._joined_marker = os.path.join(data_dir, "raft.joined")
        self._election_timeout_s = election_timeout_s
        self.waiting_to_join = joining and not os.path.exists(self._joined_marker)
        if self.waiting_to_join:
            election_timeout_s = (JOIN_ELECTION_TIMEOUT_S, 2 * JOIN_ELECTION_TIMEOUT_S)
        self.node_id = node_id
        self.peers = dict(raft_peers)
        self.address_to_id = {addr: nid for nid, addr in raft_peers.items()}
        durable_journal.install()
        snapshot_writer.install()           # snapshots written by a thread, never a fork
        self.journal = durable_journal.DurableJournal(
            os.path.join(data_dir, "raft.log"),
            disk or (durable_journal.Disk() if fsync else durable_journal.NoSyncDisk()),
            on_synced=record_synced_length if sync_record else None)
        durable_journal.import_pysyncobj_journal(os.path.join(data_dir, "raft.journal"),
                                                 self.journal)
        conf = SyncObjConf(
            journalFile=self.journal,
            fullDumpFile=os.path.join(data_dir, "raft.dump"),
            appendEntriesUseBatch=False,
            **raft_timing(election_timeout_s),
            password=password,
            # exactly the configured address: never every interface
            bindAddress=raft_peers[node_id],
            dynamicMembershipChange=True,
            # wakes the service's leadership loop at once instead of it polling (quorum/raft
            # is the only place that knows pysyncobj; the callback runs on its thread)
            onStateChanged=lambda old, new: self._state_changed(),
            logCompactionMinEntries=compaction_min_entries,
            logCompactionMinTime=compaction_min_time_s,
            # entries stay far below this (records.MAX_ENTRY_BYTES), so pysyncobj never takes its
            # piecewise path for one large entry, which garbles entries (see records.py)
            appendEntriesBatchSizeBytes=4 * MAX_RECORD_BYTES,
        )
        self.conf = conf
        self.log = MetadataLog()
        self.on_state_change: Callable[[], None] | None = None
        others = [addr for nid, addr in sorted(raft_peers.items()) if nid != node_id]
        self.drops = DropLog()
        bind_outgoing_raft(raft_peers[node_id].rpartition(":")[0].strip("[]"))
        self.directories = DirectoryGuard(self.journal, self._raft_state, self._propose_noop)
        self.append_guard = AppendGuard(self.journal, self._raft_state)
        transport = durable_transport(checked_transport(self.drops), self.journal,
                                      self.directories, self.append_guard)
        self.obj = DurableSyncObj(raft_peers[node_id], others, conf, consumers=[self.log],
                                  transportClass=transport)
        self.journal.on_sync_done = self.obj.wake
        self.obj.raftka_log = self.log          # compaction by records (DurableSyncObj)
        self.obj.raftka_compact_records = compaction_min_records

    def _propose_noop(self, payload: bytes) -> None:
        # pysyncobj's own no-op command type (what a new leader appends): skipped on apply
        self.obj._applyCommand(payload, None, _COMMAND_TYPE.NO_OP)

    def _raft_state(self) -> tuple[bool, int, int]:
        obj = self.__dict__.get("obj")
        if obj is None:
            return False, 0, 0
        return obj._isLeader(), obj._getTerm(), obj.__dict__.get("_SyncObj__raftCommitIndex", 0)

    def _state_changed(self) -> None:
        callback = self.on_state_change
        if callback is not None:
            try:
                callback()
            except Exception:  # noqa: BLE001 - never raise into pysyncobj's thread
                log.exception("Raft state-change callback failed")

    def propose(self, batch: bytes, callback: Callable[[object, int], None]) -> None:
        """Replicate `batch`; `callback(first_offset, error)` runs on pysyncobj's thread."""
        self.log.apply(batch, callback=callback)

    @property
    def is_leader(self) -> bool:
        return self.obj._isLeader()

    @property
    def leader_id(self) -> int:
        leader = self.obj._getLeader()
        if leader is None:
            return -1
        return self.address_to_id.get(getattr(leader, "address", str(leader)), -1)

    def applied_index(self) -> int:
        """The Raft index this node has applied up to (read from any thread)."""
        return self.obj.__dict__.get("_SyncObj__raftLastApplied", 0)

    def status(self) -> dict:
        """Raft term, commit index and, on the leader, each voter's match index."""
        st = self.obj.getStatus()
        match = {}
        for key, value in st.items():
            if isinstance(key, str) and key.startswith("match_idx_server_"):
                match[self.address_to_id.get(key[len("match_idx_server_"):], -1)] = value
        return {"term": st.get("raft_term", 0), "commit_index": st.get("commit_idx", 0),
                "last_applied": st.get("last_applied", 0), "leader_id": self.leader_id,
                "match_index": match, "log_len": st.get("log_len", 0),
                "directory_id": self.journal.directory_id,
                "voter_directories": self.voter_directories()}

    def voter_directories(self) -> dict[int, str]:
        """The directory id this controller counts each voter by (KIP-853): its own, and each
        peer's pin. A wiped peer shows its old id here until its re-admission is committed
        and applied on this controller, so an operator (or a test) can see when it votes again."""
        pins = dict(self.directories.pins)          # pysyncobj's thread adds pins: copy once
        out = {self.node_id: self.journal.directory_id}
        for address, directory in pins.items():
            nid = self.address_to_id.get(address)
            if nid is not None and nid != self.node_id and directory:
                out[nid] = directory
        return out

    # -- membership (pysyncobj's dynamic membership) ------------------------------------------

    @property
    def self_address(self) -> str:
        return self.peers[self.node_id]

    def learn_addresses(self, address_to_id: dict[str, int]) -> None:
        """Voters added since start-up (from the metadata image's VotersRecord)."""
        self.address_to_id = {**self.address_to_id, **address_to_id}

    def members(self) -> dict[str, bool]:
        """This node's Raft membership as pysyncobj applies it: address → connected (self: True)."""
        prefix = "partner_node_status_server_"
        for _ in range(10):
            try:
                # pysyncobj's thread may change the member set while getStatus iterates it
                st = self.obj.getStatus()
                break
            except RuntimeError:
                continue
        else:
            st = self.obj.getStatus()
        out = {key[len(prefix):]: value == 2 for key, value in st.items()
               if isinstance(key, str) and key.startswith(prefix)}
        out[self.self_address] = True
        return out

    def change_membership(self, kind: str, address: str, callback) -> None:
        """Propose adding/removing `address`; `callback(result, error)` on pysyncobj's thread.

        Proposed from pysyncobj's own thread, and only if this node leads at that moment, and
        handed to the leader's queue processing at once: a membership command queued here and
        picked up after a lost election would be forwarded to the next leader, which may have
        just resolved the change as not taken (voter_handlers.resolve_pending)."""
        def propose():
            if not self.obj._isLeader():
                callback(None, FAIL_REASON.NOT_LEADER)
                return
            if kind == "add":
                self.obj.addNodeToCluster(address, callback=callback)
            else:
                self.obj.removeNodeFromCluster(address, callback=callback)
            self.obj._checkCommandsToApply()
        self._on_raft_thread(propose)

    def transfer_leadership(self) -> None:
        """Hand leadership to the most caught-up connected voter (best effort: pysyncobj
        refuses when none is fully caught up; the caller retries)."""
        self._on_raft_thread(lambda: self.obj.transferLeadership(None, callback=None))

    def _on_raft_thread(self, fn: Callable[[], None]) -> None:
        """Run `fn` once on pysyncobj's thread (its state is not safe to touch from ours)."""
        ran = []

        def once():
            if not ran:
                ran.append(True)
                try:
                    fn()
                except Exception:  # noqa: BLE001 - never raise into pysyncobj's thread
                    log.exception("Raft-thread call failed")
                # removing ourselves here would deadlock on pysyncobj's callback lock
                threading.Thread(target=self.obj.removeOnTickCallback, args=(once,),
                                 daemon=True).start()
        self.obj.addOnTickCallback(once)

    def maybe_joined(self) -> None:
        """A joining node that a leader now reaches takes part in elections from now on."""
        if self.waiting_to_join and self.obj._getLeader() is not None:
            self.waiting_to_join = False
            self.conf.raftMinTimeout, self.conf.raftMaxTimeout = self._election_timeout_s
            with open(self._joined_marker, "w") as f:
                f.write("a leader has reached this controller: it takes part in elections\n")
            log.info("joined the controller quorum (leader %s)", self.obj._getLeader())

    def destroy(self) -> None:
        self.obj.destroy()


def record_synced_length(path: str, length: int) -> None:
    """Tests' power-loss record: the journal's length on disk after its latest fsync (written
    after the fsync returned, to the page cache, which a SIGKILL keeps), with the journal
    file's inode: a rewrite replaces the file (durably) before its record is written, so a
    SIGKILL in between leaves a record of the file it replaced, which the inode tells."""
    fd = os.open(path + ".synced", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, b"%20d %20d\n" % (length, os.stat(path).st_ino), 0)
    finally:
        os.close(fd)


def fail_reason(code: int) -> str:
    return FAIL_REASONS.get(code, str(code))
