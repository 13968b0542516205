"""Writing transaction markers (COMMIT/ABORT control batches) to the partitions of a transaction.

The coordinator groups the partitions by their leader: partitions led here are appended
directly, the others through WriteTxnMarkers to their leader; either way a marker counts as
written once the partition's high watermark passes it (acks=all, as Kafka's
WriteTxnMarkers). `write_markers` returns the partitions still to be done (leader unknown or
unreachable, errors); the coordinator retries them until all are written — a transaction in
PrepareCommit/PrepareAbort is decided, only its markers are late.

Markers of different transactions bound for one broker travel together, as Kafka's
TransactionMarkerChannelManager drains its per-broker queue: one WriteTxnMarkers request per
broker at a time (a connection answers one request at a time, and each waits a replication
round), and the markers queued while it is out go in the next one, whatever their number — so
N transactions completing at once cost that broker one replication round, not N in a row
(`batches.py`).

WriteTxnMarkers (the partition leader's side, `handle_marker`): codes per partition
NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, KAFKA_STORAGE_ERROR, REQUEST_TIMED_OUT
(not replicated in time), TRANSACTION_COORDINATOR_FENCED (an older coordinator epoch than one
already seen for that producer on this partition).

`MarkerSender` is given what it uses, not the broker: our broker id, the replica manager and
purgatory (local appends and their commit), the metadata image (a callable: who leads each
partition), the transactional offsets to materialize before a COMMIT on `__consumer_offsets`,
and connections to the other leaders.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Callable

import trio

from common.connection import ConnectionClosed
from partition_server.coordinator_append import wait_completion
from partition_server.group.coordinator import OFFSETS_TOPIC
from partition_server.txn.batches import Entry, OneOut
from wire.errors import DecodeError, ErrorCode
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS
from wire.records.batch import build_end_txn_marker

if TYPE_CHECKING:
    from metadata_quorum.image import MetadataImage
    from partition_server.peers import PeerConnections
    from partition_server.purgatory import Purgatory
    from partition_server.replica_manager import ReplicaManager
    from partition_server.txn.offsets import TxnOffsetStore

log = logging.getLogger(__name__)

MARKER_TIMEOUT_S = 10.0


def now_ms() -> int:
    return int(time.time() * 1000)


class MarkerSender:
    def __init__(self, broker_id: int, replicas: ReplicaManager, purgatory: Purgatory,
                 image: Callable[[], MetadataImage], offsets: TxnOffsetStore,
                 peers: PeerConnections):
        self.broker_id = broker_id
        self.replicas = replicas
        self.purgatory = purgatory
        self._image = image
        self.offsets = offsets
        self.peers = peers
        self.requests = OneOut(self._send_batch)       # WriteTxnMarkers, batched per broker

    async def append_locally(self, topic: str, partition: int, producer_id: int,
                             producer_epoch: int, commit: bool, coordinator_epoch: int,
                             timeout_s: float = MARKER_TIMEOUT_S) -> ErrorCode:
        """Append one marker on this leader and wait until it is replicated (high watermark).
        Also WriteTxnMarkers' work on the partition leader (handlers/txn.py)."""
        hosted = self.replicas.get(topic, partition)
        if hosted is not None and hosted.producers.marker_fenced(producer_id, coordinator_epoch):
            return ErrorCode.TRANSACTION_COORDINATOR_FENCED  # a zombie coordinator's late marker
        if topic == OFFSETS_TOPIC and commit:
            # transactional offset commits become ordinary committed offsets before the marker:
            # redone if the marker is retried, so a crash in between loses nothing
            err = await self.offsets.materialize(partition, producer_id, timeout_s)
            if err != ErrorCode.NONE:
                return err
        ts = now_ms()
        batch = build_end_txn_marker(commit, producer_id, producer_epoch, coordinator_epoch,
                                     timestamp_ms=ts)
        res = self.replicas.append_as_coordinator(topic, partition, batch, ts,
                                                  control_type=1 if commit else 0,
                                                  coordinator_epoch=coordinator_epoch)
        if res.error != ErrorCode.NONE:
            return res.error
        if topic == OFFSETS_TOPIC:
            self.offsets.forget(partition, producer_id)
        outcome = await wait_completion(self.replicas, self.purgatory, topic, partition,
                                        res.last_offset, timeout_s)
        return ErrorCode.REQUEST_TIMED_OUT if outcome is None else outcome

    async def write_markers(self, producer_id: int, producer_epoch: int, commit: bool,
                            coordinator_epoch: int, partitions) -> set:
        """Write the markers; returns the partitions not (yet) written."""
        image = self._image()
        by_leader: dict[int, list] = {}
        left = set()
        for topic, partition in partitions:
            if topic not in image.topics:
                continue                      # deleted topic: nothing to mark
            p = image.partition(topic, partition)
            if p is None:
                continue
            if p.leader < 0:
                left.add((topic, partition))
                continue
            by_leader.setdefault(p.leader, []).append((topic, partition))
        results: dict = {}

        async def local(tp):
            results[tp] = await self.append_locally(
                tp[0], tp[1], producer_id, producer_epoch, commit, coordinator_epoch)

        async def remote(node, tps):
            results.update(await self.requests.submit(node, Entry(producer_id, _Marker(
                producer_id, producer_epoch, commit, coordinator_epoch, tps))))

        here = by_leader.get(self.broker_id, [])
        others = [(node, tps) for node, tps in by_leader.items() if node != self.broker_id]
        async with trio.open_nursery() as nursery:
            for node, tps in others:
                nursery.start_soon(remote, node, tps)
            if here and others:
                await _after_their_first_steps()
            if len(here) == 1:
                await local(here[0])      # in this task, beside the remote ones
            else:
                for tp in here:           # appended at once, replicated together
                    nursery.start_soon(local, tp)
        for tps in by_leader.values():
            for tp in tps:
                if results.get(tp) != ErrorCode.NONE:
                    left.add(tp)
        return left

    async def _send_batch(self, node: int, batch: list[Entry]) -> None:
        """One WriteTxnMarkers with a marker per queued transaction; the answers are matched
        by position (each names its producer id: checked)."""
        cls = REQUESTS[ApiKey.WRITE_TXN_MARKERS]
        markers = []
        for e in (entry.payload for entry in batch):
            topics: dict[str, list[int]] = {}
            for t, p in e.partitions:
                topics.setdefault(t, []).append(p)
            markers.append(cls.WritableTxnMarker(
                producer_id=e.producer_id, producer_epoch=e.producer_epoch,
                transaction_result=e.commit, coordinator_epoch=e.coordinator_epoch,
                topics=[cls.WritableTxnMarkerTopic(name=t, partition_indexes=ps)
                        for t, ps in topics.items()]))
        resp, failure = None, "timed out"
        try:
            # a bare cancel scope, not trio.fail_after's generator context manager
            with trio.CancelScope(deadline=trio.current_time() + MARKER_TIMEOUT_S + 5):
                conn = await self.peers.get(node)
                resp = await conn.request(cls(markers=markers), 1,
                                          timeout_s=MARKER_TIMEOUT_S + 2)
        except (ConnectionClosed, OSError, DecodeError, ValueError, trio.TooSlowError) as exc:
            failure = exc
        if resp is None:
            log.info("markers to broker %d: %s", node, failure)
            await self.peers.drop(node)
            return
        for e, m in zip(batch, resp.markers):
            if m.producer_id != e.key:
                log.warning("markers to broker %d: answer for producer %d where %d was asked",
                            node, m.producer_id, e.key)
                continue
            for t in m.topics:
                for p in t.partitions:
                    e.results[(t.name, p.partition_index)] = ErrorCode(p.error_code)

    async def aclose(self) -> None:
        await self.peers.aclose()


async def _after_their_first_steps() -> None:
    """Let the tasks just spawned take their first step before ours goes on: a remote
    leader's first step ends with its WriteTxnMarkers on the wire, and its replication round
    is the long one, so the local append waits for it rather than the other way round. trio
    runs each batch of ready tasks in either order, so after one yield this task may still come
    first; after two, every task spawned before them has run its first step."""
    await trio.lowlevel.checkpoint()
    await trio.lowlevel.checkpoint()


class _Marker:
    """One transaction's markers for one broker."""

    __slots__ = ("producer_id", "producer_epoch", "commit", "coordinator_epoch", "partitions")

    def __init__(self, producer_id: int, producer_epoch: int, commit: bool,
                 coordinator_epoch: int, partitions: list):
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.commit = commit
        self.coordinator_epoch = coordinator_epoch
        self.partitions = partitions
