"""Replaying a coordinator's partition when this broker comes to lead it, in slices.

The group coordinator rebuilds its groups and committed offsets from `__consumer_offsets`, the
transaction coordinator its transactions from `__transaction_state`, by reading the partition
from its start. Both did it in one go, inside the metadata update that made this broker the
leader. An offsets partition holds every commit since its last compaction (a group committing
1,000 partitions every 5 s writes 720,000 records an hour): 2,000,000 records held the broker's
event loop for 2.6 s (measured), so it answered nothing and sent no heartbeat meanwhile, and
an hour or two more of commits would outlast the broker's session timeout and fence the broker
that had just taken over. Kafka loads on a scheduler thread and answers
COORDINATOR_LOAD_IN_PROGRESS meanwhile.

Here a `Replay` reads `SLICE_BYTES` of the log per step. The first step runs at once (a small
partition, the usual case, is loaded before the update returns, as before); the rest run in a
task of `CoordinatorLoads`, one step per turn of the event loop. The records go to the
coordinator's own accumulator, which it installs in one synchronous step at the end
(`finish`), so nothing half-loaded is ever served; until then the coordinator answers
COORDINATOR_LOAD_IN_PROGRESS. A replay stops (and installs nothing) when the coordinator cancels
it or when this broker no longer leads the partition with the same replica; the coordinator's
next `on_image` starts another if it still wants one.
"""

from __future__ import annotations

import logging
from typing import Callable

import trio

from partition_server.replication.partition import Role
from wire.errors import DecodeError, KafkaError
from wire.records.batch import decode_batch, iter_batches

log = logging.getLogger(__name__)

SLICE_BYTES = 256 * 1024      # ~3,000 offset commits: a few ms of decoding per step


class Replay:
    """One partition's log read from its start: `on_record(key, value)` for each record of a
    data batch (control batches are skipped), `SLICE_BYTES` at a time."""

    __slots__ = ("pid", "hosted", "epoch", "offset", "records", "cancelled", "failed",
                 "_on_record")

    def __init__(self, pid: int, hosted, on_record: Callable[[bytes, bytes | None], None]):
        self.pid = pid
        self.hosted = hosted
        self.epoch = hosted.state.leader_epoch      # the leader epoch the replay is for
        self.offset = hosted.log.log_start_offset
        self.records = 0
        self.cancelled = False
        self.failed: str | None = None
        self._on_record = on_record

    def step(self, max_bytes: int) -> bool:
        """Read and apply up to `max_bytes` of whole batches; True once at the log's end."""
        plog = self.hosted.log
        # a compacted topic's start only moves by DeleteRecords: what went is gone for a fresh
        # replay too
        self.offset = max(self.offset, plog.log_start_offset)
        if self.offset >= plog.log_end_offset:
            return True
        data = plog.read(self.offset, max_bytes).read_bytes()
        if not data:
            return True
        on_record = self._on_record
        for h in iter_batches(data):
            self.offset = h.next_offset
            if h.is_control:
                continue                 # transaction markers carry no coordinator state
            try:
                records = decode_batch(h.bytes()).records
            except DecodeError as exc:
                log.warning("skipping an unreadable batch at offset %d of partition %d: %s",
                            h.base_offset, self.pid, exc)
                continue
            for rec in records:
                on_record(rec.key, rec.value)
            self.records += len(records)
        return self.offset >= plog.log_end_offset

    def still_ours(self, replicas, topic: str) -> bool:
        hosted = self.hosted
        return (not self.cancelled and replicas.get(topic, self.pid) is hosted
                and hosted.state.role is Role.LEADER)


class CoordinatorLoads:
    """The replays under way for one coordinator's topic, at most one per partition."""

    def __init__(self, topic: str, replicas, slice_bytes: int = SLICE_BYTES):
        self.topic = topic
        self.replicas = replicas
        self.slice_bytes = slice_bytes
        self.running: dict[int, Replay] = {}
        self._nursery: trio.Nursery | None = None
        self._queued: list = []          # replays started before `run` (at the broker's start)

    def partitions(self, image):
        """(partition, this broker's replica if it leads it, else None) for every partition of
        the topic in `image`; a partition not led here has its replay, if any, cancelled."""
        topic = image.topics.get(self.topic)
        for pid in topic.partitions if topic is not None else ():
            hosted = self.replicas.get(self.topic, pid)
            if hosted is not None and hosted.state.role is Role.LEADER:
                yield pid, hosted
            else:
                self.cancel(pid)
                yield pid, None

    def loading(self, pid: int, hosted, epoch: int | None = None) -> bool:
        """A replay of `pid` on this replica (and for this leader epoch, if given) is under way."""
        r = self.running.get(pid)
        return r is not None and r.hosted is hosted and (epoch is None or r.epoch == epoch)

    def start(self, pid: int, hosted, on_record: Callable, finish: Callable[[Replay], None]) -> None:
        """Replay `pid`'s log: the first slice now, the rest in a task; `finish(replay)` when
        every record up to the log's end has gone to `on_record` (not after a cancel)."""
        self.cancel(pid)
        replay = Replay(pid, hosted, on_record)
        if self._step(replay):
            finish(replay)
            return
        if replay.failed is not None:
            return
        self.running[pid] = replay
        if self._nursery is None:
            self._queued.append((replay, finish))
        else:
            self._nursery.start_soon(self._go_on, replay, finish)

    def cancel(self, pid: int) -> None:
        replay = self.running.pop(pid, None)
        if replay is not None:
            replay.cancelled = True

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            queued, self._queued = self._queued, []
            for replay, finish in queued:
                nursery.start_soon(self._go_on, replay, finish)
            await trio.sleep_forever()

    def _step(self, replay: Replay) -> bool:
        try:
            return replay.step(self.slice_bytes)
        except KafkaError as exc:            # the log dir failed, say: the next image decides
            replay.failed = str(exc)
            log.warning("loading %s-%d stopped at offset %d: %s", self.topic, replay.pid,
                        replay.offset, exc)
            return False

    async def _go_on(self, replay: Replay, finish: Callable[[Replay], None]) -> None:
        try:
            while True:
                await trio.lowlevel.checkpoint()        # the event loop runs between slices
                if not replay.still_ours(self.replicas, self.topic):
                    return
                if self._step(replay):
                    break
                if replay.failed is not None:
                    return
        finally:
            if self.running.get(replay.pid) is replay:
                del self.running[replay.pid]
        finish(replay)
