"""The Raft layer: the only module that imports pysyncobj (see DESIGN.md §5).

- Static membership of the controller voters; `journalFile` and `fullDumpFile` under the
  controller's metadata directory; election timeouts 200–400 ms, leader fallback 1 s,
  `appendEntriesUseBatch=False`; a shared `password` encrypts and authenticates the Raft port.
- Exactly one replicated method, `MetadataLog.apply(batch: bytes)`: a msgpack list of metadata
  records proposed atomically. pysyncobj numbers replicated methods by their sorted names, so a
  second one would silently break every journal: never add one.
- The applier never raises (an exception there would wedge every node), is deterministic, and
  keeps its own metadata offset: record n of the cluster's history has offset n everywhere.
- Replicated state is what `SyncObjConsumer` serialises: `next_offset`, `image`, a bounded `tail`
  of recent encoded records. Everything set before `SyncObjConsumer.__init__` (the listener, the
  lock) is local and not serialised.
- Durability: pysyncobj writes its journal without fsync. A committed entry survives a process
  kill (the page cache keeps it) and the loss of one node's disk (the other voters have it), but
  a power loss of a majority at once can lose the newest entries.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Callable

from pysyncobj import SyncObj, SyncObjConf, SyncObjConsumer, replicated
from pysyncobj.config import FAIL_REASON

from metadata_quorum.image import MetadataImage
from metadata_quorum.records import MetadataRecordError, decode_batch, encode_record

log = logging.getLogger(__name__)

MAX_TAIL = 50_000
FAIL_REASONS = {v: k for k, v in vars(FAIL_REASON).items() if not k.startswith("_")}


class MetadataLog(SyncObjConsumer):
    """Replicated metadata state; `apply` is the single replicated method."""

    def __init__(self):
        # Local, unreplicated attributes first (SyncObjConsumer records these as non-state).
        self._listener: Callable[[int, list, list], None] | None = None
        self._lock = threading.Lock()
        self.bad_batches_local = 0
        super().__init__()
        # Replicated state.
        self.next_offset = 0
        self.image = MetadataImage()
        self.tail: list[bytes] = []          # encoded records, offsets tail_start...
        self.tail_start = 0

    @replicated
    def apply(self, batch: bytes) -> int:
        """Append a committed batch; returns its first offset (-1 for an undecodable batch)."""
        try:
            records = decode_batch(batch)
        except MetadataRecordError as exc:
            # Deterministic on every node: the same bytes fail the same way everywhere.
            log.error("skipping undecodable metadata batch: %s", exc)
            self.bad_batches_local += 1
            return -1
        with self._lock:
            first = self.next_offset
            encoded = [encode_record(rec) for rec in records]
            image = self.image
            for i, rec in enumerate(records):
                image = image.apply(first + i, rec)
            self.image = image
            self.next_offset = first + len(records)
            self.tail.extend(encoded)
            if len(self.tail) > MAX_TAIL:
                drop = len(self.tail) - MAX_TAIL // 2
                del self.tail[:drop]
                self.tail_start += drop
            listener = self._listener
        if listener is not None:
            try:
                listener(first, records, encoded)
            except Exception:  # noqa: BLE001 - the applier must never raise
                log.exception("metadata listener failed")
        return first

    def subscribe(self, listener: Callable[[int, list, list], None]):
        """Install the listener; returns (image, next_offset, tail_start, tail) atomically."""
        with self._lock:
            self._listener = listener
            return self.image, self.next_offset, self.tail_start, list(self.tail)


class RaftQuorum:
    def __init__(self, node_id: int, raft_peers: dict[int, str], data_dir: str, password: str | None,
                 election_timeout_s: tuple[float, float] = (0.2, 0.4)):
        """`raft_peers`: {node_id: "host:port"} of every voter's Raft port, this node included."""
        os.makedirs(data_dir, exist_ok=True)
        self.node_id = node_id
        self.peers = dict(raft_peers)
        self.address_to_id = {addr: nid for nid, addr in raft_peers.items()}
        conf = SyncObjConf(
            journalFile=os.path.join(data_dir, "raft.journal"),
            fullDumpFile=os.path.join(data_dir, "raft.dump"),
            appendEntriesUseBatch=False,
            raftMinTimeout=election_timeout_s[0],
            raftMaxTimeout=election_timeout_s[1],
            appendEntriesPeriod=0.05,
            leaderFallbackTimeout=1.0,
            connectionTimeout=max(election_timeout_s[1], 0.5),
            connectionRetryTime=0.5,
            password=password,
            dynamicMembershipChange=False,
            logCompactionMinEntries=20_000,
            logCompactionMinTime=60,
        )
        self.log = MetadataLog()
        others = [addr for nid, addr in sorted(raft_peers.items()) if nid != node_id]
        self.obj = SyncObj(raft_peers[node_id], others, conf, consumers=[self.log])

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

    def status(self) -> dict:
        """Raft term, commit index and, on the leader, each voter's match index."""
        st = self.obj.getStatus()
        match = {}
        for key, value in st.items():
            if isinstance(key, str) and key.startswith("match_idx_server_"):
                match[self.address_to_id.get(key[len("match_idx_server_"):], -1)] = value
        return {"term": st.get("raft_term", 0), "commit_index": st.get("commit_idx", 0),
                "last_applied": st.get("last_applied", 0), "leader_id": self.leader_id,
                "match_index": match, "log_len": st.get("log_len", 0)}

    def destroy(self) -> None:
        self.obj.destroy()


def fail_reason(code: int) -> str:
    return FAIL_REASONS.get(code, str(code))
