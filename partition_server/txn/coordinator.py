"""The transaction coordinator's edge (trio): ownership, persistence in `__transaction_state`,
markers, timeouts, failover. Decisions are in the pure `state.py`.

- transactional.id → partition of `__transaction_state` by Kafka's rule (`abs(java hashCode) %
  partitions`, as groups); that partition's leader coordinates it. Other brokers answer
  NOT_COORDINATOR; while a newly led partition is replayed, COORDINATOR_LOAD_IN_PROGRESS.
- Each state change is a record — key `[0, transactional_id]`, value `TransactionMetadata.to_record`
  (msgpack) — appended with acks=all semantics *before* the new state is installed, so a new
  coordinator rebuilds every transaction by replaying the compacted partition.
- EndTxn logs PrepareCommit/PrepareAbort and answers; a background task then writes the markers
  (`markers.py`, retried until every partition has one) and logs CompleteCommit/CompleteAbort
  (appended, not awaited: `_log_complete`). Meanwhile requests of the transactional id wait
  for the markers (bounded), then answer CONCURRENT_TRANSACTIONS (clients retry).
- Failover: a coordinator that loads a partition resumes every PrepareCommit/PrepareAbort
  (and PrepareEpochFence: aborted) transaction — the decision was logged, only markers may be
  missing; Ongoing ones go on and abort at their timeout like any other.
- Timeouts: an Ongoing transaction older than its `transaction.timeout.ms` is aborted with a
  bumped epoch (the producer is fenced), checked every
  `transaction.abort.timed.out.transaction.cleanup.interval.ms`.
- The coordinator epoch sent with markers is the leader epoch of the `__transaction_state`
  partition.
- Expiration: a transactional id idle (Empty/Complete*) for `transactional.id.expiration.ms` gets
  a tombstone and is forgotten; partitions forget producers idle for `producer.id.expiration.ms`
  (the snapshot loop below, which also writes producer-state snapshots).

Collaborators, given at construction (so it is built and tested without a broker): the broker
config, the replica manager (its `__transaction_state` partitions; producer-state snapshots),
the purgatory (commit waits), the current metadata image (a callable: the broker replaces it),
the call to the active controller (creating the topic), the producer id allocator, the group
coordinator (transactional offsets) and connections to other brokers (markers).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Awaitable, Callable

import msgpack
import trio

from common.keyed_locks import KeyedLocks
from partition_server.coordinator_append import coordinator_error, wait_committed
from partition_server.coordinator_load import CoordinatorLoads
from partition_server.group.coordinator import java_string_hash
from partition_server.replication.partition import Role
from partition_server.txn import state as S
from partition_server.txn.batches import Verifications
from partition_server.txn.markers import MarkerSender
from partition_server.txn.offsets import TxnOffsetStore
from partition_server.txn.timeouts import ABORT, TxnTable, timeout_actions
from wire.errors import ErrorCode
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS
from wire.records.batch import build_batch

if TYPE_CHECKING:
    from metadata_quorum.image import MetadataImage
    from partition_server.config import BrokerConfig
    from partition_server.group.coordinator import GroupCoordinator
    from partition_server.peers import PeerConnections
    from partition_server.purgatory import Purgatory
    from partition_server.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

TXN_TOPIC = "__transaction_state"
TXN_KEY = 0


def now_ms() -> int:
    return int(time.time() * 1000)


def partition_for(transactional_id: str, partitions: int) -> int:
    return (java_string_hash(transactional_id) & 0x7FFFFFFF) % partitions


# Answers that end a client's transaction for good (librdkafka raises them as fatal or as
# needing an epoch bump): rare, and each one is worth a line that says what we held.
_REFUSALS_TO_LOG = frozenset((ErrorCode.INVALID_TXN_STATE, ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                              ErrorCode.PRODUCER_FENCED))


def _log_refusal(api: str, tid: str, pid: int, epoch: int, err: ErrorCode,
                 meta: S.TransactionMetadata | None) -> None:
    held = "nothing" if meta is None else (
        f"{meta.state.name} producer {meta.producer_id} epoch {meta.producer_epoch} "
        f"(last {meta.last_producer_id}/{meta.last_producer_epoch})")
    log.info("%s of %s by producer %d epoch %d refused %s: the coordinator holds %s",
             api, tid, pid, epoch, err.name, held)


def _replayed(key: bytes, value: bytes | None, found: dict) -> None:
    """A `__transaction_state` record read by a replay: the last one of an id wins."""
    try:
        k = msgpack.unpackb(key)
        if k[0] == TXN_KEY:
            found[k[1]] = None if value is None else msgpack.unpackb(value)
    except (ValueError, TypeError, IndexError, msgpack.UnpackException):
        log.warning("skipping an unreadable %s record", TXN_TOPIC)


def _record_batch(meta: S.TransactionMetadata, ts: int) -> bytes:
    """The `__transaction_state` record of `meta` (key [0, id], msgpack value)."""
    return build_batch([(msgpack.packb([TXN_KEY, meta.transactional_id]),
                         msgpack.packb(meta.to_record()), [], ts)])


class TransactionCoordinator:
    def __init__(self, config: BrokerConfig, replicas: ReplicaManager, purgatory: Purgatory,
                 image: Callable[[], MetadataImage], call_controller: Callable[..., Awaitable],
                 allocate_producer_id: Callable[[], Awaitable[int | None]],
                 groups: GroupCoordinator, peers: PeerConnections):
        self.config = cfg = config
        self.replicas = replicas
        self.purgatory = purgatory
        self._image = image
        self._call_controller = call_controller         # ControllerClient.call_active
        self._allocate_producer_id = allocate_producer_id
        self.max_timeout_ms = cfg["transaction.max.timeout.ms"]
        self.check_interval_ms = cfg["transaction.abort.timed.out.transaction.cleanup.interval.ms"]
        # tid → metadata; it also files when each may need the timeout check (timeouts.py)
        self.txns: TxnTable = TxnTable(cfg["transactional.id.expiration.ms"])
        self.loaded: dict[int, int] = {}          # partition → coordinator epoch it was loaded in
        self.locks = KeyedLocks()                   # per transactional id, while in use
        self.completing: dict[str, trio.Event] = {}   # set when the markers task ends
        self.offsets = TxnOffsetStore(groups, replicas, purgatory)
        self.markers = MarkerSender(config.node_id, replicas, purgatory, image, self.offsets,
                                    peers)
        # KIP-890 verifications this broker asks of other coordinators, batched per broker
        self.verifications = Verifications(peers.sibling("verify"))
        self._nursery: trio.Nursery | None = None
        self.loads = CoordinatorLoads(TXN_TOPIC, replicas)        # replays under way
        self._creating = False

    # -- ownership --------------------------------------------------------------------------------

    def num_partitions(self) -> int:
        topic = self._image().topics.get(TXN_TOPIC)
        return len(topic.partitions) if topic else \
            self.config["transaction.state.log.num.partitions"]

    def partition_of(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.num_partitions())

    def owns(self, transactional_id: str) -> ErrorCode:
        if TXN_TOPIC not in self._image().topics:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        p = self.partition_of(transactional_id)
        hosted = self.replicas.get(TXN_TOPIC, p)
        if hosted is None or hosted.state.role is not Role.LEADER:
            return ErrorCode.NOT_COORDINATOR
        if self.loaded.get(p) != hosted.state.leader_epoch:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return ErrorCode.NONE

    def coordinator_epoch(self, transactional_id: str) -> int:
        return self.loaded.get(self.partition_of(transactional_id), -1)

    async def find(self, key: str):
        """(error, node_id, host, port) of the coordinator for transactional id `key`."""
        image = self._image()
        if TXN_TOPIC not in image.topics:
            await self._create_topic()
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1
        p = image.partition(TXN_TOPIC, self.partition_of(key))
        b = image.brokers.get(p.leader) if p else None
        if b is None or b.fenced:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1
        return ErrorCode.NONE, b.broker_id, b.host, b.port

    async def _create_topic(self) -> None:
        if self._creating:
            return
        self._creating = True
        try:
            cfg = self.config
            live = sum(1 for b in self._image().brokers.values() if not b.fenced)
            rf = max(1, min(cfg["transaction.state.log.replication.factor"], live))
            cls = REQUESTS[ApiKey.CREATE_TOPICS]
            req = cls(topics=[cls.CreatableTopic(
                name=TXN_TOPIC, num_partitions=cfg["transaction.state.log.num.partitions"],
                replication_factor=rf, configs=[
                    cls.CreatableTopicConfig(name="cleanup.policy", value="compact"),
                    cls.CreatableTopicConfig(name="segment.bytes",
                                             value=str(cfg["transaction.state.log.segment.bytes"])),
                    cls.CreatableTopicConfig(name="min.insync.replicas",
                                             value=str(min(rf, cfg["transaction.state.log.min.isr"])))])],
                timeout_ms=10000)
            try:
                await self._call_controller(req, timeout_s=10, version=7,
                                            error_of=lambda r: r.topics[0].error_code)
            except Exception as exc:  # noqa: BLE001 - the client asks again
                log.info("creating %s failed: %s", TXN_TOPIC, exc)
        finally:
            self._creating = False

    # -- loading (failover) -----------------------------------------------------------------------

    def on_image(self) -> None:
        """Load the transactions of partitions newly led, or led in a new epoch (the epoch is
        the coordinator epoch of its markers), in slices (coordinator_load.py; answering
        COORDINATOR_LOAD_IN_PROGRESS meanwhile); forget those of partitions no longer led."""
        for pid, hosted in self.loads.partitions(self._image()):
            if hosted is None:
                if pid in self.loaded:
                    self._unload(pid)
                continue
            epoch = hosted.state.leader_epoch
            if self.loaded.get(pid) != epoch and not self.loads.loading(pid, hosted, epoch):
                self._unload(pid)
                found: dict[str, list | None] = {}
                self.loads.start(pid, hosted, lambda k, v, found=found: _replayed(k, v, found),
                                 lambda replay, found=found: self._install(replay, found))

    def _install(self, replay, found: dict) -> None:
        """A replay reached the log's end: its transactions become the coordinator's, and those
        it left prepared are completed."""
        pid = replay.pid
        for tid, value in found.items():
            if value is None:
                continue
            try:
                self.txns[tid] = S.TransactionMetadata.from_record(tid, value)
            except (ValueError, TypeError, KeyError):
                log.warning("skipping an unreadable transaction record for %s", tid)
        self.loaded[pid] = replay.epoch
        resumed = 0
        for tid, meta in list(self.txns.items()):
            if self.partition_of(tid) != pid:
                continue
            if meta.state in (S.TxnState.PREPARE_COMMIT, S.TxnState.PREPARE_ABORT):
                self._start_completion(tid)
                resumed += 1
            elif meta.state is S.TxnState.PREPARE_EPOCH_FENCE:
                self._spawn(self._abort, tid, False)
                resumed += 1
        log.info("loaded %d transactional ids from %s-%d (epoch %d), %d to complete",
                 sum(1 for t in self.txns if self.partition_of(t) == pid), TXN_TOPIC, pid,
                 replay.epoch, resumed)

    def _unload(self, pid: int) -> None:
        self.loaded.pop(pid, None)
        for tid in list(self.txns):
            if self.partition_of(tid) == pid:
                del self.txns[tid]

    # -- persistence ------------------------------------------------------------------------------

    def _lock(self, tid: str):
        """`async with`: the id's requests one at a time."""
        return self.locks.hold(tid)

    async def _persist(self, meta: S.TransactionMetadata, timeout_s: float = 10.0) -> ErrorCode:
        """Log `meta` (acks=all) and install it; NOT_COORDINATOR if we lost the partition."""
        tid = meta.transactional_id
        p = self.partition_of(tid)
        epoch = self.loaded.get(p)
        ts = now_ms()
        err = await self._append_and_wait(p, _record_batch(meta, ts), ts, timeout_s)
        if err != ErrorCode.NONE:
            return err
        if self.loaded.get(p) != epoch:
            return ErrorCode.NOT_COORDINATOR          # lost (and maybe regained) meanwhile
        self.txns[tid] = meta
        return ErrorCode.NONE

    def _log_complete(self, meta: S.TransactionMetadata) -> ErrorCode:
        """CompleteCommit/CompleteAbort: appended and installed without waiting for the high
        watermark, so the next request of this id (usually the producer's next
        AddPartitionsToTxn, already waiting for the markers) goes ahead one replication round
        sooner — its own record follows in the log, often in the same follower fetch (Kafka
        waits for this append too). Safe because the outcome was decided by the durable
        Prepare* record: an answer given from this state (a retried EndTxn) says what that
        record says, and every later change of the id is a record appended after this one and
        awaited (acks=all), which commits both. If it is lost in a failover, the next
        coordinator finds Prepare* and writes the markers again (a partition ignores a marker
        of a transaction it has already closed)."""
        tid = meta.transactional_id
        p = self.partition_of(tid)
        ts = now_ms()
        res = self.replicas.append_as_coordinator(TXN_TOPIC, p, _record_batch(meta, ts), ts)
        if res.error != ErrorCode.NONE:
            return coordinator_error(res.error)
        # wake the followers' long polls (in a broker the append's on_change does it too)
        self.purgatory.notify((TXN_TOPIC, p))
        self.txns[tid] = meta
        return ErrorCode.NONE

    async def _append_and_wait(self, p: int, batch: bytes, ts: int, timeout_s: float) -> ErrorCode:
        res = self.replicas.append_as_coordinator(TXN_TOPIC, p, batch, ts)
        if res.error != ErrorCode.NONE:
            return coordinator_error(res.error)
        return await wait_committed(self.replicas, self.purgatory, TXN_TOPIC, p,
                                    res.last_offset, timeout_s)

    # -- client APIs ------------------------------------------------------------------------------

    async def init_producer_id(self, tid: str, timeout_ms: int, expected_pid: int,
                               expected_epoch: int) -> tuple[ErrorCode, int, int]:
        err = self.owns(tid)
        if err == ErrorCode.NONE:
            err = S.validate_timeout(timeout_ms, self.max_timeout_ms)
        if err != ErrorCode.NONE:
            return err, -1, -1
        await self._wait_completion(tid)
        async with self._lock(tid):
            err = self.owns(tid)                 # the waits above may have outlived it
            if err != ErrorCode.NONE:
                return err, -1, -1
            fresh = None
            for _ in range(2):
                result = S.init_producer_id(self.txns.get(tid), tid, timeout_ms, expected_pid,
                                            expected_epoch, fresh, now_ms())
                if not result.needs_new_producer_id:
                    break
                fresh = await self._allocate_producer_id()
                if fresh is None:
                    return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, -1
            if result.abort_first:
                err = await self._fence_and_abort(tid)
                return (err if err != ErrorCode.NONE else ErrorCode.CONCURRENT_TRANSACTIONS), -1, -1
            if result.error != ErrorCode.NONE:
                return result.error, -1, -1
            if result.metadata is not self.txns.get(tid):
                err = await self._persist(result.metadata)
                if err != ErrorCode.NONE:
                    return err, -1, -1
            return ErrorCode.NONE, result.metadata.producer_id, result.metadata.producer_epoch

    async def add_partitions(self, tid: str, pid: int, epoch: int, partitions) -> ErrorCode:
        err = self.owns(tid)
        if err != ErrorCode.NONE:
            return err
        await self._wait_completion(tid)
        async with self._lock(tid):
            err = self.owns(tid)                 # the waits above may have outlived it
            if err != ErrorCode.NONE:
                return err
            meta = self.txns.get(tid)
            err, new = S.add_partitions(meta, pid, epoch, partitions, now_ms())
            if err == ErrorCode.NONE and new is not None:
                err = await self._persist(new)
            elif err in _REFUSALS_TO_LOG:
                _log_refusal("AddPartitionsToTxn", tid, pid, epoch, err, meta)
            return err

    def verify(self, tid: str, pid: int, epoch: int, partitions) -> dict:
        err = self.owns(tid)
        if err != ErrorCode.NONE:
            return {tp: err for tp in partitions}
        return S.verify_partitions(self.txns.get(tid), pid, epoch, partitions)

    async def end_txn(self, tid: str, pid: int, epoch: int, commit: bool,
                      bump: bool = False) -> tuple[ErrorCode, int, int]:
        """EndTxn → (error, producer id, epoch the producer continues with). `bump`: EndTxn v5
        (KIP-890 part 2), the epoch goes up with every transaction."""
        err = self.owns(tid)
        if err != ErrorCode.NONE:
            return err, -1, -1
        async with self._lock(tid):
            fresh = None
            for _ in range(2):
                err = self.owns(tid)             # the lock and an id allocation wait
                if err != ErrorCode.NONE:
                    return err, -1, -1
                result = S.end_txn(self.txns.get(tid), pid, epoch, commit, now_ms(), bump, fresh)
                if not result.needs_new_producer_id:
                    break
                fresh = await self._allocate_producer_id()
                if fresh is None:
                    return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, -1
            if result.error in _REFUSALS_TO_LOG:
                _log_refusal("EndTxn(commit)" if commit else "EndTxn(abort)", tid, pid, epoch,
                             result.error, self.txns.get(tid))
            if result.error != ErrorCode.NONE:
                return result.error, -1, -1
            if result.metadata is not None:
                err = await self._persist(result.metadata)
                if err != ErrorCode.NONE:
                    return err, -1, -1
            meta = self.txns.get(tid)
            next_pid, next_epoch = meta.producer_after_end() if bump else (pid, epoch)
        if result.metadata is not None:
            self._start_completion(tid)
        return ErrorCode.NONE, next_pid, next_epoch

    async def abort(self, tid: str) -> ErrorCode:
        """An operator aborts a hanging transaction (`raftka transactions abort`)."""
        err = self.owns(tid)
        if err != ErrorCode.NONE:
            return err
        meta = self.txns.get(tid)
        if meta is None:
            return ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
        if meta.state is not S.TxnState.ONGOING:
            return ErrorCode.INVALID_TXN_STATE
        return await self._abort(tid, True)

    async def _abort(self, tid: str, needs_lock: bool) -> ErrorCode:
        if needs_lock:
            async with self._lock(tid):
                return await self._fence_and_abort(tid)
        return await self._fence_and_abort(tid)

    async def _fence_and_abort(self, tid: str) -> ErrorCode:
        """Ongoing (or PrepareEpochFence after a failover) → PrepareAbort with a bumped epoch;
        markers follow in the background. Caller holds the lock or is the only writer."""
        meta = self.txns.get(tid)
        if meta is None:
            return ErrorCode.NONE
        now = now_ms()
        if meta.state is S.TxnState.ONGOING:
            new = S.fence_and_abort(meta, now)
        elif meta.state is S.TxnState.PREPARE_EPOCH_FENCE:
            new = meta.transition(S.TxnState.PREPARE_ABORT, now,
                                  producer_epoch=min(meta.producer_epoch + 1, S.MAX_EPOCH + 1),
                                  last_producer_epoch=meta.producer_epoch)
        else:
            return ErrorCode.NONE
        err = await self._persist(new)
        if err == ErrorCode.NONE:
            log.info("transaction %s (producer %d): aborting under epoch %d", tid,
                     new.producer_id, new.producer_epoch)
            self._start_completion(tid)
        return err

    # -- completion: markers ----------------------------------------------------------------------

    def _spawn(self, fn, *args) -> None:
        if self._nursery is not None:
            self._nursery.start_soon(fn, *args)

    def _start_completion(self, tid: str) -> None:
        if tid not in self.completing and self._nursery is not None:
            self.completing[tid] = trio.Event()
            self._spawn(self._complete, tid)

    async def _wait_completion(self, tid: str, timeout_s: float = 2.0) -> None:
        """Let a request that would get CONCURRENT_TRANSACTIONS wait (bounded) for the previous
        transaction's markers instead: clients back off ~100 ms on that error, which would cap
        a producer at a few transactions per second."""
        event = self.completing.get(tid)
        if event is not None:
            with trio.move_on_after(timeout_s):
                await event.wait()

    async def _complete(self, tid: str) -> None:
        """Write the markers of a PrepareCommit/PrepareAbort transaction, then log Complete*."""
        try:
            delay = 0.05
            while True:
                meta = self.txns.get(tid)
                if meta is None or meta.state not in (S.TxnState.PREPARE_COMMIT,
                                                      S.TxnState.PREPARE_ABORT):
                    return
                if self.owns(tid) != ErrorCode.NONE:
                    return                         # the next coordinator resumes it
                commit = meta.state is S.TxnState.PREPARE_COMMIT
                left = await self.markers.write_markers(
                    meta.producer_id, meta.producer_epoch, commit, self.coordinator_epoch(tid),
                    meta.partitions)
                if not left:
                    async with self._lock(tid):
                        current = self.txns.get(tid)
                        if current is not meta:
                            continue
                        err = self._log_complete(S.complete(meta, now_ms()))
                    if err == ErrorCode.NONE:
                        return
                else:
                    log.info("transaction %s: markers pending for %s", tid, sorted(left))
                await trio.sleep(delay)
                delay = min(delay * 2, 1.0)
        finally:
            event = self.completing.pop(tid, None)
            if event is not None:
                event.set()

    # -- timeouts ---------------------------------------------------------------------------------

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self.loads.run)
            for tid, meta in list(self.txns.items()):     # loaded before we could spawn
                if meta.state in (S.TxnState.PREPARE_COMMIT, S.TxnState.PREPARE_ABORT):
                    self._start_completion(tid)
            nursery.start_soon(self._timeout_loop)
            nursery.start_soon(self._snapshot_loop)

    async def _snapshot_loop(self) -> None:
        """Producer-state snapshots of every hosted partition that changed (txn/snapshot.py);
        they bound how much log a restart replays. Lives here as the broker's txn machinery.
        Each partition is visited once per SNAPSHOT_INTERVAL_S, a slice per second (a sweep,
        partition_server/housekeeping.py), so no single tick walks every partition."""
        from partition_server.housekeeping import Sweep
        from partition_server.txn.snapshot import SNAPSHOT_INTERVAL_S, maybe_snapshot
        last: dict = {}
        expiration_ms = self.config["producer.id.expiration.ms"]
        replicas = self.replicas
        sweep = Sweep(lambda: replicas.partitions, SNAPSHOT_INTERVAL_S, 1.0)
        while True:
            await trio.sleep(1.0)
            now = now_ms()
            for key in sweep.next_slice():
                hosted = replicas.get(*key)
                if hosted is None:
                    continue
                gone = hosted.producers.expire_producers(now, expiration_ms)
                if gone:
                    log.info("%s-%d: %d idle producer(s) expired", hosted.topic, hosted.partition,
                             len(gone))
                    last.pop((hosted.topic, hosted.partition), None)
                try:
                    maybe_snapshot(hosted, last)
                except OSError as exc:
                    log.warning("producer snapshot of %s-%d failed: %s", hosted.topic,
                                hosted.partition, exc)

    async def _timeout_loop(self) -> None:
        """Each check looks only at the transactions that are due (timeouts.py), not at every
        transactional id: O(due) per tick."""
        expiration_ms = self.config["transactional.id.expiration.ms"]
        owned = lambda tid: self.owns(tid) == ErrorCode.NONE        # noqa: E731
        while True:
            await trio.sleep(self.check_interval_ms / 1000)
            now = now_ms()
            for action, tid in timeout_actions(self.txns.due(now), now, expiration_ms, owned):
                if action == ABORT:
                    log.info("transaction %s timed out after %d ms: aborting", tid,
                             now - self.txns[tid].txn_start_ms)
                    self._spawn(self._abort, tid, True)
                else:
                    self._spawn(self._expire, tid, expiration_ms)

    async def _expire(self, tid: str, expiration_ms: int) -> None:
        """transactional.id.expiration.ms: an idle transactional id is forgotten (a tombstone
        in `__transaction_state`); its next InitProducerId starts afresh with a new id."""
        async with self._lock(tid):
            meta = self.txns.get(tid)
            if meta is None or meta.state not in S.IDLE or \
                    now_ms() - meta.last_update_ms <= expiration_ms:
                return
            err = await self._persist_tombstone(tid)
            if err == ErrorCode.NONE:
                log.info("transactional id %s expired", tid)

    async def _persist_tombstone(self, tid: str, timeout_s: float = 10.0) -> ErrorCode:
        p = self.partition_of(tid)
        epoch = self.loaded.get(p)
        ts = now_ms()
        batch = build_batch([(msgpack.packb([TXN_KEY, tid]), None, [], ts)])
        err = await self._append_and_wait(p, batch, ts, timeout_s)
        if err == ErrorCode.NONE and self.loaded.get(p) == epoch:
            self.txns.pop(tid, None)
        return err

    # -- listing (DescribeTransactions / ListTransactions) ----------------------------------------

    def owned_transactions(self) -> list[S.TransactionMetadata]:
        return [m for tid, m in sorted(self.txns.items()) if self.owns(tid) == ErrorCode.NONE]
