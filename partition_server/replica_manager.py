"""The partitions this broker hosts: their logs and replication states, and the produce/fetch
decisions on them. No sockets and no clock: callers pass `now_ms` and do the waiting
(acks=all purgatory, fetch long-poll) in `broker.py`.

Error codes returned (per partition), and when:
- UNKNOWN_TOPIC_OR_PARTITION: the partition is not in the metadata image.
- NOT_LEADER_OR_FOLLOWER: a produce/consumer fetch/list offsets on a broker that is not its leader,
  or a follower fetch on a broker that is not its leader.
- FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH: the client's current leader epoch is older / newer
  than ours.
- NOT_ENOUGH_REPLICAS: acks=all with fewer in-sync replicas than `min.insync.replicas`.
- OFFSET_OUT_OF_RANGE: fetch outside [log start offset, log end offset].
- CORRUPT_MESSAGE / INVALID_RECORD / MESSAGE_TOO_LARGE: what the log's validation says.
- KAFKA_STORAGE_ERROR: the log directory failed (I/O error); the replica goes offline.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import errno
import logging
import os
from typing import Iterable

from partition_server.log import LogCleaner, PartitionLog
from partition_server.log.config import NEVER, LogConfig, LogConfigError
from partition_server.replication.partition import PartitionState, Role
from partition_server.txn import snapshot as producer_snapshot
from partition_server.txn.producer_state import ProducerStateManager
from wire.errors import DecodeError, ErrorCode, KafkaError
from wire.records.batch import iter_batches

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


@dataclasses.dataclass
class HostedPartition:
    topic: str
    partition: int
    topic_id: object
    log: PartitionLog
    state: PartitionState
    min_insync_replicas: int = 1
    offline: bool = False
    producers: ProducerStateManager = dataclasses.field(default_factory=ProducerStateManager)
    cleaner: LogCleaner | None = None   # created by the broker for compacted topics

    def rebuild_producer_state(self) -> None:
        """The newest producer-state snapshot plus the idempotent/transactional batches after it
        (restart, new leader)."""
        self.producers = producer_snapshot.rebuild(self.log)

    def truncated(self) -> None:
        """The log lost its tail (a diverged or out-of-range follower): the high watermark and
        the producer state must describe the shorter log. When state of batches past the new end
        existed, the state is reloaded from the newest snapshot below it plus the batches after
        (Kafka's truncateAndReload). Trimming the dedup window in place forgot a producer whose
        last five batches were all cut although earlier ones remained (its retry then got
        UNKNOWN_PRODUCER_ID), and the out-of-range path did not trim at all: a window naming
        batches no longer in the log answers their retry as a duplicate at offsets that now
        hold other records."""
        end = self.log.log_end_offset
        self.state.truncated_to(end)
        if self.producers.reaches(end):
            self.rebuild_producer_state()

    def last_stable_offset(self) -> int:
        return self.producers.last_stable_offset(self.state.high_watermark)


@dataclasses.dataclass
class ProduceResult:
    error: ErrorCode = ErrorCode.NONE
    base_offset: int = -1
    last_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    message: str | None = None
    record_errors: list = dataclasses.field(default_factory=list)  # KIP-467 [(index, message)]


@dataclasses.dataclass
class FetchResult:
    error: ErrorCode = ErrorCode.NONE
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: list = dataclasses.field(default_factory=list)   # bytes or FileRange chunks
    size: int = 0
    diverging_epoch: tuple[int, int] | None = None
    aborted_transactions: list | None = None                   # read_committed: [(pid, first)]
    leader: tuple[int, int] = (-1, -1)                         # (leader_id, leader_epoch)


def check_leader_epoch(state: PartitionState, current_leader_epoch: int) -> ErrorCode:
    """KIP-320: a client's epoch older than ours is fenced; newer means our metadata is behind."""
    if current_leader_epoch == -1 or current_leader_epoch == state.leader_epoch:
        return ErrorCode.NONE
    if current_leader_epoch < state.leader_epoch:
        return ErrorCode.FENCED_LEADER_EPOCH
    return ErrorCode.UNKNOWN_LEADER_EPOCH


class ReplicaManager:
    def __init__(self, broker_id: int, log_opener):
        """`log_opener(topic, partition, topic_config) -> PartitionLog` owns directories."""
        self.broker_id = broker_id
        self._open_log = log_opener
        self.partitions: dict[TopicPartition, HostedPartition] = {}
        # The broker's log directories (log_dirs.py; None: one unnamed directory, in tests). An
        # I/O error takes that directory's replicas offline and `on_log_dir_failure(dir)` (the
        # broker) tells the controller, which moves their leadership and ISR membership away.
        self.log_dirs = None
        self._all_failed = False            # without `log_dirs`: the one directory failed
        self.on_log_dir_failure = None
        self.storage_fault_file = None       # fault-injection shim, see `check_storage`
        self.dir_moves = None                # AlterReplicaLogDirs (log_dir_moves.py), set by the broker
        # `on_change((topic, partition))`: a log grew or its start moved (the broker wakes the
        # fetch purgatory and the fetch sessions holding the partition). Callers of the append
        # paths may notify as well; a duplicate wake is harmless.
        self.on_change = lambda key: None
        # High watermarks as last checkpointed (partition_server/log/offset_checkpoint.py):
        # a partition opened after a restart starts from here instead of 0. Entries of
        # partitions not hosted (yet) are kept so an early checkpoint doesn't erase them.
        self.high_watermarks: dict[TopicPartition, int] = {}
        # Indexes for the periodic jobs (broker.py), so an idle broker's timers touch only what
        # can need work, not every hosted partition: partitions led here (ISR checks), logs
        # with a finite flush.ms, compacted logs; partitions where a follower outside the ISR
        # fetched or an AlterPartition must be sent again (checked on the next ISR tick).
        self.led: set[TopicPartition] = set()
        # partitions being reassigned: True where this replica is a new one (copying in)
        self.moving: dict[TopicPartition, bool] = {}
        self.moving_version = 0
        self.timed_flush: set[TopicPartition] = set()
        self.compacted: set[TopicPartition] = set()
        self.isr_candidates: set[TopicPartition] = set()
        self.isr_urgent: set[TopicPartition] = set()     # acks=all refused: see isr_loop
        self.produce_waiting: dict[TopicPartition, int] = {}    # acks=all waits, per partition
        self.isr_shrinks = self.isr_expands = 0   # ISR changes this leader made (metrics)
        # topic → [bytes in, messages in, bytes out to consumers] (BytesInPerSec,
        # MessagesInPerSec, BytesOutPerSec as counters; partition_server/broker_metrics.py)
        self.topic_traffic: dict[str, list[int]] = {}
        self._hw_dirty: set[TopicPartition] = set()   # high watermarks not checkpointed yet
        # sets other periodic jobs drain (the lag monitor): partitions whose high watermark,
        # role or hosting changed since they last looked
        self.watchers: list[set[TopicPartition]] = []
        # inside `batched_epoch_sync`: new leader epochs are written unsynced, synced at its end
        self._defer_epoch_sync = False
        self._epochs_unsynced = False
        # logs opened ahead by `preopen` (threads), taken by `apply_partition`
        self._preopened: dict[TopicPartition, tuple[PartitionLog, object]] = {}
        self._log_configs: dict[frozenset, LogConfig] = {}     # see _log_config

    @property
    def log_dir_failed(self) -> bool:
        """Every log directory failed (with one directory: it did)."""
        if self.log_dirs is None:
            return self._all_failed
        return not self.log_dirs.online()

    @log_dir_failed.setter
    def log_dir_failed(self, failed: bool) -> None:     # without `log_dirs` only (tests)
        self._all_failed = failed

    def dir_of(self, directory: str):
        """The LogDir holding a partition log's `directory` (None without `log_dirs`)."""
        return None if self.log_dirs is None else self.log_dirs.of_log(directory)

    def _dir_offline(self, directory: str) -> bool:
        d = self.dir_of(directory)
        return self._all_failed if d is None else not d.online

    def check_storage(self, hosted: "HostedPartition | None" = None, log_dir=None) -> None:
        """Raise the error a full disk gives while the fault-injection file (a name, only when
        `raftka.storage.fault.file` is configured) exists in the log directory concerned
        (`hosted`'s, else `log_dir`, else the first): tests make one directory "fill up"."""
        if self.storage_fault_file is None:
            return
        d = self.dir_of(hosted.log.directory) if hosted is not None else log_dir
        base = d.path if d is not None else self.log_dirs.first.path if self.log_dirs else ""
        path = os.path.join(base, self.storage_fault_file)
        if os.path.exists(path):
            raise OSError(errno.ENOSPC, "No space left on device (injected)", path)

    def storage_failed(self, hosted: "HostedPartition | None", exc: OSError, log_dir=None) -> None:
        """An I/O error on `hosted`'s log (or on `log_dir`, a LogDir): that directory goes
        offline with every replica in it (Kafka's LogDirFailureChannel)."""
        if hosted is not None:
            hosted.offline = True
            self.on_change((hosted.topic, hosted.partition))
            log_dir = self.dir_of(hosted.log.directory)
        if log_dir is None and self.log_dirs is not None:
            log_dir = self.log_dirs.first
        if log_dir is None:
            if self._all_failed:
                return
            self._all_failed = True
        elif not self.log_dirs.fail(log_dir, exc):
            return
        log.error("log directory failed (%s): its replicas go offline", exc)
        for other in self.partitions.values():
            if log_dir is None or self.dir_of(other.log.directory) is log_dir:
                other.offline = True
                self.on_change((other.topic, other.partition))
        if self.dir_moves is not None:
            self.dir_moves.on_dir_failed(log_dir)
        if self.on_log_dir_failure is not None:
            self.on_log_dir_failure(log_dir)

    def get(self, topic: str, partition: int) -> HostedPartition | None:
        return self.partitions.get((topic, partition))

    # -- leadership from the metadata image -----------------------------------------------------

    def apply_partition(self, topic: str, topic_id, partition: int, replicas: list[int],
                        isr: list[int], leader: int, leader_epoch: int, partition_epoch: int,
                        topic_config: dict, min_insync_replicas: int, now_ms: int,
                        replication_factor: int | None = None, adding_replicas=()) -> Role:
        """Make the local replica match one partition record of the image; returns its role.
        During a reassignment `replication_factor` is smaller than `replicas` (PartitionState
        .replication_factor) and the leader forgets what it knew of `adding_replicas`
        (PartitionState.restart_followers)."""
        key = (topic, partition)
        hosted = self.partitions.get(key)
        if self.broker_id not in replicas:
            if hosted is not None:
                self.remove_partition(topic, partition, delete=True)
            return Role.NONE
        if hosted is None:
            plog, producers = self._preopened.pop(key, (None, None))
            if plog is None:
                plog = self._open_log(topic, partition, topic_config)
                producers = producer_snapshot.rebuild(plog)
            # After a restart the high watermark starts from the checkpoint (never above what
            # was committed; clamped to the log end) and catches up once the ISR has fetched.
            hosted = HostedPartition(topic, partition, topic_id, plog,
                                     PartitionState(topic, partition, self.broker_id, plog,
                                                    self.high_watermarks.get(key, 0)), producers=producers)
            hosted.offline = self._dir_offline(plog.directory)
            self.partitions[key] = hosted
            hosted.state.on_high_watermark_change = lambda: self._hw_changed(key)
            self._hw_dirty.add(key)
            if plog.config.flush_ms != NEVER:
                self.timed_flush.add(key)
            if "compact" in plog.config.cleanup_policy:
                self.compacted.add(key)
        else:
            self._reconfigure(key, hosted, topic_config)
        hosted.min_insync_replicas = min_insync_replicas
        # the controller judges the ELR by the same figure (replication_control.min_insync)
        rf = len(replicas) if replication_factor is None else replication_factor
        hosted.state.min_insync_replicas = max(1, min(min_insync_replicas, rf))
        if leader == self.broker_id:
            if hosted.state.become_leader(leader_epoch, partition_epoch, replicas, isr, now_ms):
                hosted.log.assign_epoch_start(leader_epoch, hosted.log.log_end_offset,
                                              fsync=not self._defer_epoch_sync)
                # (a lazily created log writes its epochs with its first record, unsynced)
                self._epochs_unsynced |= self._defer_epoch_sync and hosted.log.materialized
            if adding_replicas:
                hosted.state.restart_followers(adding_replicas, now_ms)
        else:
            hosted.state.become_follower(leader, leader_epoch, partition_epoch, replicas, isr)
        if hosted.state.role is Role.LEADER:
            self.led.add(key)
        else:
            self.led.discard(key)
        self._note_move(key, (self.broker_id in adding_replicas) if adding_replicas else None)
        for watcher in self.watchers:
            watcher.add(key)
        return hosted.state.role

    def _reconfigure(self, key: TopicPartition, hosted: HostedPartition, topic_config) -> None:
        """A hosted log takes its topic's current config (an AlterConfigs of retention.ms,
        cleanup.policy, max.message.bytes…) at once, as Kafka's LogManager.updateTopicConfig
        does; before, an open log kept the config it was opened with until a restart."""
        try:
            new = self._log_config(topic_config)
        except LogConfigError as exc:       # the controller validates; never fail an apply
            log.warning("%s-%d keeps its log config: %s", key[0], key[1], exc)
            return
        if new == hosted.log.config:
            return
        hosted.log.config = new
        (self.timed_flush.add if new.flush_ms != NEVER else self.timed_flush.discard)(key)
        (self.compacted.add if "compact" in new.cleanup_policy else self.compacted.discard)(key)

    def _log_config(self, topic_config: dict) -> LogConfig:
        """LogConfig.from_kafka once per distinct topic config, not once per partition: a
        broker applying 30,000 partitions' leaderships spent over half of it there (its
        partitions share a few configs; LogConfig is immutable)."""
        key = frozenset(topic_config.items())       # the image's config values: strings
        cfg = self._log_configs.get(key)
        if cfg is None:
            cfg = LogConfig.from_kafka(topic_config)
            if len(self._log_configs) >= 1024:      # topics with configs of their own
                self._log_configs.clear()
            self._log_configs[key] = cfg
        return cfg

    def _note_move(self, key: TopicPartition, adding_here: bool | None) -> None:
        """Keep `moving` ({partition being reassigned: this replica is a new one}) current;
        None: not moving. The reassignment throttle tier reads it (replication/throttle.py)."""
        if self.moving.get(key) != adding_here:
            if adding_here is None:
                del self.moving[key]
            else:
                self.moving[key] = adding_here
            self.moving_version += 1

    def _hw_changed(self, key: TopicPartition) -> None:
        self._hw_dirty.add(key)
        for watcher in self.watchers:
            watcher.add(key)

    @contextlib.contextmanager
    def batched_epoch_sync(self):
        """Apply many partitions, then make their new leader-epoch checkpoints durable with one
        file-system sync instead of two fsyncs each (10,000 leaderships after a start: ~15 s
        of fsyncs). The caller must not serve the partitions before the block ends."""
        self._defer_epoch_sync = True
        try:
            yield
        finally:
            self._defer_epoch_sync = False
            if self._epochs_unsynced:
                self._epochs_unsynced = False
                os.sync()

    def preopen(self, wanted: list[tuple[str, int, dict]], threads: int) -> None:
        """Open the logs of partitions about to be hosted and rebuild their producer state, in
        `threads` threads (Kafka's num.recovery.threads.per.data.dir), for `apply_partition` to
        take. Blocking: the broker calls it off its event loop, which then keeps heartbeating
        and serving while thousands of logs open (or recover) at start. A log that fails to
        open is left to `apply_partition`, which opens it again and reports the error."""
        def open_one(item):
            topic, partition, config = item
            try:
                plog = self._open_log(topic, partition, config)
                self._preopened[(topic, partition)] = (plog, producer_snapshot.rebuild(plog))
            except (OSError, KafkaError) as exc:
                log.warning("opening %s-%d ahead: %s", topic, partition, exc)
        if threads <= 1:
            for item in wanted:
                open_one(item)
            return
        with concurrent.futures.ThreadPoolExecutor(threads, "log-open") as pool:
            list(pool.map(open_one, wanted))

    def discard_preopened(self) -> list[PartitionLog]:
        """Close (unsynced, unmarked) logs opened ahead that no partition took: its record
        changed meanwhile, or the broker stops mid-start. Returns them."""
        left, self._preopened = self._preopened, {}
        closed = []
        for plog, _ in left.values():
            try:
                plog.close(sync=False)
                closed.append(plog)
            except OSError:
                pass
        return closed

    def close_all(self) -> None:
        """Stop hosting everything: close every log, sync the file system once, then mark
        each log clean (so a restart trusts them without a scan)."""
        closed = [self.remove_partition(*key, delete=False, sync=False)
                  for key in list(self.partitions)] + self.discard_preopened()
        os.sync()
        for plog in closed:
            if plog is not None:
                try:
                    plog.mark_clean()
                except OSError as exc:
                    log.warning("marking %s clean: %s", plog.directory, exc)

    def remove_partition(self, topic: str, partition: int, delete: bool, sync: bool = True):
        """Stop hosting a partition; returns its log when it was closed (not deleted), which
        `sync=False` leaves for the caller to sync and mark clean."""
        hosted = self.partitions.pop((topic, partition), None)
        if hosted is None:
            return None
        if self.dir_moves is not None:      # closed (the broker stops): resumed at next start
            self.dir_moves.cancel((topic, partition), keep=not delete)
        if delete and self.log_dirs is not None:
            self.log_dirs.forget(topic, partition)
        for index in (self.led, self.timed_flush, self.compacted, self.isr_candidates):
            index.discard((topic, partition))
        self._note_move((topic, partition), None)
        hosted.state.stop_replica()
        self._hw_dirty.add((topic, partition))
        for watcher in self.watchers:
            watcher.add((topic, partition))
        if delete:
            self.high_watermarks.pop((topic, partition), None)
        else:
            self.high_watermarks[(topic, partition)] = hosted.state.high_watermark
        try:
            if delete:
                hosted.log.delete()
            else:
                if not hosted.offline:
                    producer_snapshot.maybe_snapshot(hosted, {}, closing=True, fsync=sync)
                hosted.log.close(sync=sync)
                return None if hosted.offline else hosted.log
        except OSError as exc:
            log.warning("closing %s-%d: %s", topic, partition, exc)
        return None

    def hosted_keys(self) -> Iterable[TopicPartition]:
        return list(self.partitions)

    def high_watermarks_to_checkpoint(self, only_if_changed: bool = False
                                      ) -> dict[TopicPartition, int] | None:
        """Every known high watermark, or None when the log directory failed (nothing may be
        written there any more) or, with `only_if_changed`, when none changed since the last
        call: an idle broker neither walks its partitions nor rewrites the file."""
        if self.log_dir_failed or (only_if_changed and not self._hw_dirty):
            return None
        dirty, self._hw_dirty = self._hw_dirty, set()
        for key in dirty if only_if_changed else self.partitions:
            hosted = self.partitions.get(key)
            if hosted is not None:
                self.high_watermarks[key] = hosted.state.high_watermark
        return dict(self.high_watermarks)

    # -- produce ---------------------------------------------------------------------------------

    def append_records(self, topic: str, partition: int, records, acks: int,
                       now_ms: int) -> ProduceResult:
        hosted = self.partitions.get((topic, partition))
        if hosted is None:
            return ProduceResult(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        state = hosted.state
        if hosted.offline:
            return ProduceResult(ErrorCode.KAFKA_STORAGE_ERROR)
        if state.role is not Role.LEADER:
            if records:         # remembered: this broker may lead in a moment (admit)
                hosted.producers.admit(_idempotent_headers(records), now_ms,
                                       ErrorCode.NOT_LEADER_OR_FOLLOWER)
            return ProduceResult(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if records is None or len(records) == 0:
            return ProduceResult(ErrorCode.INVALID_RECORD, message="empty record set")
        headers = _idempotent_headers(records)
        short = acks == -1 and state.in_sync_count() < hosted.min_insync_replicas
        if short:                       # (an accepted one that waits is in produce_waiting)
            self.isr_urgent.add((topic, partition))
        verdict = hosted.producers.admit(headers, now_ms,
                                         ErrorCode.NOT_ENOUGH_REPLICAS if short else None)
        if verdict.duplicate_of is not None:
            dup = verdict.duplicate_of           # a retry of an appended batch: same answer
            return ProduceResult(ErrorCode.NONE, dup.first_offset, dup.last_offset, -1,
                                 hosted.log.log_start_offset)
        if verdict.error != ErrorCode.NONE:
            return ProduceResult(verdict.error, log_start_offset=hosted.log.log_start_offset)
        try:
            self.check_storage(hosted)
            info = hosted.log.append_as_leader(records, state.leader_epoch, now_ms)
        except KafkaError as exc:
            return ProduceResult(ErrorCode(exc.code), message=str(exc),
                                 log_start_offset=hosted.log.log_start_offset,
                                 record_errors=getattr(exc, "record_errors", []))
        except OSError as exc:
            log.error("append to %s-%d failed: %s; replica goes offline", topic, partition, exc)
            self.storage_failed(hosted, exc)
            return ProduceResult(ErrorCode.KAFKA_STORAGE_ERROR)
        state.after_local_append()
        self.on_change((topic, partition))
        traffic = self.topic_traffic.get(topic) or self._new_traffic(topic)
        traffic[0] += len(records)
        traffic[1] += info.last_offset - info.first_offset + 1
        first = info.first_offset
        for h, last_seq in headers:
            count = h.last_offset_delta + 1
            hosted.producers.update(h.producer_id, h.producer_epoch, h.base_sequence, last_seq,
                                    first, first + count - 1, max(h.max_timestamp, now_ms))
            if h.is_transactional:
                hosted.producers.begin_txn(h.producer_id, first)
            first += count
        return ProduceResult(ErrorCode.NONE, info.first_offset, info.last_offset,
                             getattr(info, "log_append_time", -1), hosted.log.log_start_offset)

    def append_as_coordinator(self, topic: str, partition: int, batch: bytes, now_ms: int,
                              control_type: int | None = None,
                              coordinator_epoch: int = -1) -> ProduceResult:
        """One batch from a coordinator on this leader: a transaction marker (`control_type` 0
        ABORT / 1 COMMIT) or a transactional offset commit. No sequence checks (these batches
        carry none); control batches are allowed (Kafka's AppendOrigin.COORDINATOR)."""
        hosted = self.partitions.get((topic, partition))
        if hosted is None or hosted.state.role is not Role.LEADER:
            return ProduceResult(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if hosted.offline:
            return ProduceResult(ErrorCode.KAFKA_STORAGE_ERROR)
        try:
            self.check_storage(hosted)
            info = hosted.log.append_as_leader(batch, hosted.state.leader_epoch, now_ms,
                                               origin="coordinator")
        except KafkaError as exc:
            return ProduceResult(ErrorCode(exc.code), message=str(exc))
        except OSError as exc:
            self.storage_failed(hosted, exc)
            return ProduceResult(ErrorCode.KAFKA_STORAGE_ERROR)
        hosted.state.after_local_append()
        self.on_change((topic, partition))
        h = next(iter_batches(memoryview(batch)))
        if h.producer_id >= 0:
            if control_type is not None:
                hosted.producers.end_txn(h.producer_id, h.producer_epoch, control_type == 1,
                                         info.first_offset, coordinator_epoch, now_ms)
            elif h.is_transactional:
                hosted.producers.begin_txn(h.producer_id, info.first_offset)
        return ProduceResult(ErrorCode.NONE, info.first_offset, info.last_offset, -1,
                             hosted.log.log_start_offset)

    def produce_completion(self, topic: str, partition: int, last_offset: int) -> ErrorCode | None:
        """For an acks=all append waiting in purgatory: None while waiting, else its outcome."""
        hosted = self.partitions.get((topic, partition))
        if hosted is None or hosted.state.role is not Role.LEADER:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if hosted.state.high_watermark > last_offset:
            if hosted.state.in_sync_count() < hosted.min_insync_replicas:
                return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
            return ErrorCode.NONE
        return None

    # -- fetch -----------------------------------------------------------------------------------

    def _new_traffic(self, topic: str) -> list[int]:
        traffic = self.topic_traffic[topic] = [0, 0, 0]
        return traffic

    def read(self, topic: str, partition: int, fetch_offset: int, max_bytes: int,
             current_leader_epoch: int, replica_id: int, last_fetched_epoch: int,
             now_ms: int, min_one: bool, isolation_level: int = 0,
             fetch_clock=None) -> FetchResult:
        hosted = self.partitions.get((topic, partition))
        if hosted is None:
            return FetchResult(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        state = hosted.state
        if hosted.offline:
            return FetchResult(ErrorCode.KAFKA_STORAGE_ERROR)
        if state.role is not Role.LEADER:
            return FetchResult(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                               leader=(state.leader_id, state.leader_epoch))
        err = check_leader_epoch(state, current_leader_epoch)
        if err is not ErrorCode.NONE:
            return FetchResult(err, leader=(state.leader_id, state.leader_epoch))
        plog = hosted.log
        is_follower = replica_id >= 0
        # the usual case needs no epoch lookup: the follower's last batch is of our latest
        # epoch and it is not past our end (what `_diverging_epoch` would find too)
        if is_follower and last_fetched_epoch >= 0 and not (
                last_fetched_epoch == plog.latest_epoch and fetch_offset <= plog.log_end_offset):
            diverging = self._diverging_epoch(plog, fetch_offset, last_fetched_epoch)
            if diverging is not None:
                return FetchResult(ErrorCode.NONE, state.high_watermark, state.high_watermark,
                                   plog.log_start_offset, diverging_epoch=diverging)
        if is_follower:
            state.update_follower_fetch(replica_id, fetch_offset, now_ms, fetch_clock)
            if replica_id not in state.isr:
                self.isr_candidates.add((topic, partition))     # it may be able to join
        if fetch_offset < plog.log_start_offset or fetch_offset > plog.log_end_offset:
            return FetchResult(ErrorCode.OFFSET_OUT_OF_RANGE, state.high_watermark,
                               state.high_watermark, plog.log_start_offset)
        lso = hosted.last_stable_offset()
        # read_committed consumers stop at the last stable offset (first open transaction)
        max_offset = None if is_follower else lso if isolation_level == 1 else state.high_watermark
        data = plog.read(fetch_offset, max_bytes, max_offset=max_offset, min_one=min_one)
        if data.size and not is_follower:           # BytesOutPerSec: consumers only, as Kafka
            (self.topic_traffic.get(topic) or self._new_traffic(topic))[2] += data.size
        aborted = None
        if isolation_level == 1 and not is_follower:
            end = data.next_offset if data.size else fetch_offset
            aborted = [(t.producer_id, t.first_offset)
                       for t in plog.collect_aborted_txns(fetch_offset, end)] if data.size else []
        return FetchResult(ErrorCode.NONE, state.high_watermark, lso,
                           plog.log_start_offset, list(data.ranges), data.size,
                           aborted_transactions=aborted)

    @staticmethod
    def _diverging_epoch(plog, fetch_offset: int, last_fetched_epoch: int):
        """KIP-595-style divergence check: None when the follower's log is a prefix of ours."""
        epoch, end_offset = plog.end_offset_for(last_fetched_epoch)
        if epoch != last_fetched_epoch or end_offset < fetch_offset:
            return (epoch, end_offset)
        return None


def _idempotent_headers(records) -> list:
    """(header, last sequence) of each batch carrying a producer id, in order."""
    out = []
    try:
        for h in iter_batches(memoryview(records)):
            if h.producer_id >= 0 and h.base_sequence >= 0:
                out.append((h, (h.base_sequence + h.last_offset_delta) % 2**31))
    except DecodeError:
        return []                # the log's validation reports the corruption
    return out
