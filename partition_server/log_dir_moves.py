"""AlterReplicaLogDirs (KIP-113): move a hosted replica to another of this broker's log
directories while it keeps serving, as Kafka's ReplicaAlterLogDirsThread does.

States of one partition's move:

    (none) ──alter(dest ≠ current dir)──▶ COPYING: a future log `<topic>-<p>.<hex>-future` in
        the destination, filled from the current log in bounded steps (`run`); DescribeLogDirs
        lists it with isFuture and its lag behind the current log
    COPYING ──future's log end = current's──▶ swap, in one event-loop step (no append between
        the check and the swap): current dir renamed `.<hex>-delete`, future renamed to the
        partition's name, reopened and put in place; the old copy deleted in a thread
    COPYING ──alter to another dir, partition removed, a directory fails──▶ (none): future deleted

The current log keeps taking appends, truncations (a follower diverging) and retention while
the future copies: each step first makes the future a prefix of the current log again (cut back
when the current log was truncated below it or diverged in leader epoch, start moved when
retention or DeleteRecords moved the current start). The future's producer state (and its
aborted-transaction index, which is derived from the ABORT markers) is kept up as each step
appends, so the swap carries it across instead of replaying the whole new log in the event
loop; a future cut back (the current log diverged) starts its state afresh with it.

A stop mid-move leaves the current log in place and the future beside it; at start log_dirs.py
keeps the future (`resumable`) and, once the partition is hosted again, the copy resumes from
the future's log end (recovered like any log, its producer state replayed, both in a worker
thread), as Kafka's broker continues a `-future` log. A
future whose partition is no longer ours once the broker caught up is deleted
(`drop_unhosted_futures`). A stop between the swap's renames is finished at start (log_dirs.py).

`replica.alter.log.dirs.io.max.bytes.per.second` (Kafka's broker config, dynamic per broker and
cluster-wide, default unlimited) bounds the bytes copied per second over all moves: a token
bucket holding at most one second's worth; each step copies at most the credit left.

Codes (per partition, as Kafka's ReplicaManager.alterReplicaLogDirs): LOG_DIR_NOT_FOUND (not one
of our `log.dirs`), KAFKA_STORAGE_ERROR (destination offline, replica offline, or some directory
offline: no future log is created then), REPLICA_NOT_AVAILABLE (not hosted here: the directory is
remembered for when it is), NONE (moving, or already there).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import time
import uuid

import trio

from partition_server.log import PartitionLog
from partition_server.log.fsync import fsync_dir
from partition_server.log_dirs import DELETE_SUFFIX, FUTURE_SUFFIX, LogDir
from partition_server.txn import snapshot as producer_snapshot
from partition_server.txn.producer_state import ProducerStateManager, marker_of
from wire.errors import ErrorCode, KafkaError
from wire.records.batch import iter_batches

log = logging.getLogger(__name__)

COPY_STEP_BYTES = 1 << 20          # per partition per step: appends interleave with the copy
MIN_STEP_BYTES = 4096               # a throttled step copies at least this (one batch at least)


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclasses.dataclass(eq=False)
class Move:
    key: tuple[str, int]
    dest: LogDir
    future: PartitionLog
    # the future's producer state, fed by every batch copied (None: rebuilt at the swap)
    producers: ProducerStateManager | None = None


def _fresh_state(future: PartitionLog) -> ProducerStateManager:
    state = ProducerStateManager()
    state.on_abort = future.add_aborted_txn
    return state


class ReplicaMover:
    def __init__(self, replicas, log_dirs, files):
        self.replicas = replicas
        self.log_dirs = log_dirs
        self.files = files
        self.moves: dict[tuple[str, int], Move] = {}
        self.swapped = 0                                # moves finished (tests, metrics)
        self._wake = trio.Event()
        self._trash: list[str] = []                     # swapped-out copies to delete
        self.rate: float | None = None                  # bytes/s over all moves; None: unlimited
        self._tokens = 0.0
        self._tokens_at: float | None = None            # trio clock of the last refill
        self.copied = 0                                 # bytes copied (tests, metrics)

    def set_rate(self, rate: float | None) -> None:
        """replica.alter.log.dirs.io.max.bytes.per.second changed (broker.py, each image):
        the copy in progress takes it at its next step."""
        if rate != self.rate:
            log.info("replica.alter.log.dirs.io.max.bytes.per.second: %s",
                     "unlimited" if rate is None else f"{rate:.0f} bytes/s")
            self.rate = rate
            self._tokens = rate if rate is not None else 0.0
            self._tokens_at = None
            self._wake.set()

    # -- requests ---------------------------------------------------------------------------------

    def alter(self, key: tuple[str, int], path: str) -> ErrorCode:
        d = self.log_dirs.by_path(path)
        if d is None:
            return ErrorCode.LOG_DIR_NOT_FOUND
        if not d.online:
            return ErrorCode.KAFKA_STORAGE_ERROR
        self._resume(key)                   # an interrupted move first carries on (or ends)
        hosted = self.replicas.partitions.get(key)
        if hosted is None:
            self.log_dirs.preferred[key] = d            # used when it is created here
            return ErrorCode.REPLICA_NOT_AVAILABLE
        if hosted.offline:
            return ErrorCode.KAFKA_STORAGE_ERROR
        move = self.moves.get(key)
        if move is not None and move.dest is not d:
            self.cancel(key)                            # a new destination: start over
        if self.log_dirs.placement.get(key) is d or key in self.moves:
            return ErrorCode.NONE
        if len(self.log_dirs.online()) != len(self.log_dirs.dirs):
            return ErrorCode.KAFKA_STORAGE_ERROR        # Kafka: no future log while a dir is offline
        directory = os.path.join(d.path, f"{key[0]}-{key[1]}.{uuid.uuid4().hex}{FUTURE_SUFFIX}")
        try:
            future = PartitionLog(directory, hosted.log.config, _now_ms(), files=self.files)
            if hosted.log.log_start_offset > 0:
                future.truncate_fully_and_start_at(hosted.log.log_start_offset)
        except OSError as exc:
            self.replicas.storage_failed(None, exc, d)
            return ErrorCode.KAFKA_STORAGE_ERROR
        self.moves[key] = Move(key, d, future, _fresh_state(future))
        self.log_dirs.set_future(key, d)
        self._wake.set()
        log.info("moving %s-%d to %s", key[0], key[1], d.path)
        return ErrorCode.NONE

    # -- resuming after a restart -----------------------------------------------------------------

    def _take_resumable(self, key: tuple[str, int]):
        """(dir, future path, hosted) of an interrupted move that may resume now, else None."""
        entry = self.log_dirs.resumable.get(key)
        hosted = self.replicas.partitions.get(key)
        if entry is None or hosted is None or hosted.offline or key in self.moves:
            return None
        d, path = entry
        del self.log_dirs.resumable[key]
        if not d.online or self.log_dirs.placement.get(key) is d:
            self._discard(key, path)
            return None
        return d, path, hosted

    async def _resume_off_loop(self, key: tuple[str, int]) -> None:
        """`_resume` with the future opened (recovered) and its producer state replayed in a
        worker thread: nothing else touches the future until its Move is registered."""
        taken = self._take_resumable(key)
        if taken is None:
            return
        d, path, hosted = taken

        def open_future():
            future = PartitionLog(path, hosted.log.config, _now_ms(), files=self.files)
            return future, producer_snapshot.rebuild(future)
        try:
            future, state = await trio.to_thread.run_sync(open_future)
        except OSError as exc:
            self.log_dirs.drop_future(key)
            self.replicas.storage_failed(None, exc, d)
            return
        if key in self.moves:               # AlterReplicaLogDirs started another meanwhile
            future.close(sync=False)
            self._trash.append(path)
        elif self.replicas.partitions.get(key) is not hosted or hosted.offline:
            future.close()                  # not hosted any more: kept for the next look
            self.log_dirs.resumable[key] = (d, path)
        else:
            self._start_resumed(key, d, future, state)

    def _start_resumed(self, key, d: LogDir, future: PartitionLog, state) -> None:
        self.moves[key] = Move(key, d, future, state)
        self._wake.set()
        log.info("resuming the move of %s-%d to %s from offset %d", key[0], key[1], d.path,
                 future.log_end_offset)

    def _resume(self, key: tuple[str, int]) -> bool:
        """Carry on the interrupted move of `key` if it is hosted and online now: its future
        log, reopened (recovery truncates a torn tail), copies on from its log end (its
        producer state rebuilt at the swap). AlterReplicaLogDirs's path; the copy loop's is
        `_resume_off_loop`."""
        taken = self._take_resumable(key)
        if taken is None:
            return False
        d, path, hosted = taken
        try:
            future = PartitionLog(path, hosted.log.config, _now_ms(), files=self.files)
        except OSError as exc:
            self.log_dirs.drop_future(key)
            self.replicas.storage_failed(None, exc, d)
            return False
        self._start_resumed(key, d, future, None)
        return True

    def _discard(self, key, path: str) -> None:
        log.info("discarding future log %s", path)
        self.log_dirs.drop_future(key)
        self._trash.append(path)
        self._wake.set()

    def drop_unhosted_futures(self) -> None:
        """Once caught up with the metadata (broker._delete_stray_logs): interrupted moves of
        partitions no longer hosted here are deleted."""
        for key, (d, path) in list(self.log_dirs.resumable.items()):
            if key not in self.replicas.partitions:
                del self.log_dirs.resumable[key]
                self._discard(key, path)

    def cancel(self, key: tuple[str, int], keep: bool = False) -> None:
        """Drop a move and its future log (the partition went away, or goes elsewhere); `keep`:
        only close the future (the broker stops: the next start resumes the move)."""
        move = self.moves.pop(key, None)
        if move is None:
            return
        self.log_dirs.drop_future(key)
        try:
            if keep:
                move.future.close()
                move.future.mark_clean()
            else:
                move.future.delete()
        except OSError as exc:
            log.warning("closing or deleting future log %s: %s", move.future.directory, exc)

    def on_dir_failed(self, d: LogDir) -> None:
        """Moves into or out of a failed directory stop (their replicas are offline or the
        destination is gone)."""
        for key, move in list(self.moves.items()):
            hosted = self.replicas.partitions.get(key)
            if move.dest is d or hosted is None or hosted.offline:
                self.moves.pop(key, None)
                self.log_dirs.drop_future(key)
                try:
                    move.future.close(sync=False)
                except OSError:
                    pass

    def lag(self, key: tuple[str, int]) -> int:
        """How far the future log is behind the current one (DescribeLogDirs isFuture)."""
        move, hosted = self.moves.get(key), self.replicas.partitions.get(key)
        if move is None or hosted is None:
            return 0
        return max(0, hosted.log.log_end_offset - move.future.log_end_offset)

    # -- the copy ---------------------------------------------------------------------------------

    async def run(self) -> None:
        """Copy every moving partition a step at a time, swapping those caught up."""
        while True:
            for key in list(self.log_dirs.resumable):
                await self._resume_off_loop(key)
            if not self.moves and not self._trash:
                self._wake = trio.Event()
                # interrupted moves wait for their partition to be hosted: look again
                with trio.move_on_after(0.5 if self.log_dirs.resumable else float("inf")):
                    await self._wake.wait()
            for key in list(self.moves):
                move = self.moves.get(key)
                if move is not None:
                    await self._throttle()
                    self._step(move, self._step_bytes())
                await trio.sleep(0)
            while self._trash:
                await trio.to_thread.run_sync(shutil.rmtree, self._trash.pop(), True)
            await trio.sleep(0.01)

    # -- the throttle: replica.alter.log.dirs.io.max.bytes.per.second --------------------------

    def _refill(self) -> None:
        now = trio.current_time()
        if self._tokens_at is not None:
            self._tokens = min(self.rate, self._tokens + self.rate * (now - self._tokens_at))
        self._tokens_at = now

    async def _throttle(self) -> None:
        """Wait until there is credit for a step (never with no rate)."""
        while self.rate is not None:
            self._refill()
            if self._tokens >= min(MIN_STEP_BYTES, self.rate):
                return
            # at least 1 ms: a sleep too short to move the clock would spin
            await trio.sleep(max(0.001, (min(MIN_STEP_BYTES, self.rate) - self._tokens)
                                 / self.rate))

    def _step_bytes(self) -> int:
        if self.rate is None:
            return COPY_STEP_BYTES
        return int(max(MIN_STEP_BYTES, min(COPY_STEP_BYTES, self._tokens)))

    def _charge(self, nbytes: int) -> None:
        self.copied += nbytes
        if self.rate is not None:
            self._tokens -= nbytes

    def _step(self, move: Move, max_bytes: int = COPY_STEP_BYTES) -> None:
        hosted = self.replicas.partitions.get(move.key)
        if hosted is None or hosted.offline:
            self.cancel(move.key)
            return
        try:
            self.replicas.check_storage(log_dir=move.dest)
            if self._copy(hosted.log, move.future, max_bytes, move):
                self._swap(hosted, move)
        except OSError as exc:
            log.error("moving %s-%d to %s failed: %s", move.key[0], move.key[1],
                      move.dest.path, exc)
            self.replicas.storage_failed(None, exc, move.dest)
            self.cancel(move.key)
        except KafkaError as exc:           # a corrupt batch in the current log: stop the move
            log.error("moving %s-%d: %s; move abandoned", move.key[0], move.key[1], exc)
            self.cancel(move.key)

    def _copy(self, current: PartitionLog, future: PartitionLog,
              max_bytes: int = COPY_STEP_BYTES, move: Move | None = None) -> bool:
        """One step of at most `max_bytes` (one batch at least); True when the future holds
        everything the current log does. `move`: its producer state follows the copy."""
        if future.log_end_offset > future.log_start_offset:
            epoch, end = current.end_offset_for(future.latest_epoch)
            if epoch != future.latest_epoch or end < future.log_end_offset:
                # the current log was truncated (a diverged follower): copy again from its start
                future.truncate_fully_and_start_at(current.log_start_offset)
                if move is not None:
                    move.producers = _fresh_state(future)
        if current.log_start_offset > future.log_end_offset:
            future.truncate_fully_and_start_at(current.log_start_offset)
            if move is not None:
                move.producers = _fresh_state(future)
        elif current.log_start_offset > future.log_start_offset:
            future.delete_records_before(current.log_start_offset, _now_ms())
        if future.log_end_offset >= current.log_end_offset:
            return True
        data = current.read(future.log_end_offset, max_bytes, min_one=True).read_bytes()
        view, pos, keep = memoryview(data), 0, None
        for h in iter_batches(view):          # after compaction a batch may start earlier
            if keep is None and h.last_offset >= future.log_end_offset:
                keep = pos
            pos += h.size_in_bytes
        if keep is not None:
            future.append_as_follower(bytes(view[keep:pos]), _now_ms())
            self._charge(pos - keep)
            if move is not None and move.producers is not None:
                self._observe(move.producers, view, keep, pos)
        return future.log_end_offset >= current.log_end_offset

    @staticmethod
    def _observe(state: ProducerStateManager, view, start: int, end: int) -> None:
        """Feed the batches just copied to the future's producer state (as snapshot.rebuild
        replays a log; an ABORT marker adds the future's aborted-transaction index entry)."""
        for h in iter_batches(view[:end], start):
            if h.producer_id < 0:
                continue
            marker = marker_of(bytes(view[h.pos:h.pos + h.size_in_bytes])) \
                if h.is_control else None
            state.observe(h, marker)

    def _swap(self, hosted, move: Move) -> None:
        """Put the caught-up future log in the current one's place (no await: no append can
        come between the last copy and the swap)."""
        key, current, future = move.key, hosted.log, move.future
        future.close(sync=True)
        future.mark_clean()
        current.close(sync=False)
        trash = None
        if current.materialized:
            trash = f"{current.directory}.{uuid.uuid4().hex}{DELETE_SUFFIX}"
            os.rename(current.directory, trash)
        final = os.path.join(move.dest.path, f"{key[0]}-{key[1]}")
        os.rename(future.directory, final)
        fsync_dir(move.dest.path)
        new = PartitionLog(final, current.config, _now_ms(), files=self.files)
        cache = current.epoch_cache
        for epoch, start in zip(cache.epochs, cache.start_offsets):
            if epoch > new.latest_epoch:            # an epoch with no batch yet (a new leader's)
                new.assign_epoch_start(epoch, start)
        hosted.log = hosted.state.log = new
        hosted.cleaner = None
        if move.producers is not None:      # kept up during the copy: no replay here
            move.producers.on_abort = new.add_aborted_txn
            new.snapshot_offsets_at_open = None
            hosted.producers = move.producers
        else:
            hosted.producers = producer_snapshot.rebuild(new)
        self.moves.pop(key, None)
        self.log_dirs.drop_future(key)
        self.log_dirs.set_placement(key, move.dest)
        self.swapped += 1
        self.replicas.on_change(key)
        log.info("%s-%d now in %s", key[0], key[1], move.dest.path)
        if trash is not None:
            self._trash.append(trash)
