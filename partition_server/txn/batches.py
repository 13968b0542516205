"""Transaction requests between brokers that Kafka sends in batches: one
request out per broker at a time, and what queued while it was out goes in the next one,
whatever its number (Kafka's TransactionMarkerChannelManager for WriteTxnMarkers, its
AddPartitionsToTxnManager for KIP-890 verifications). A connection answers one request at a
time and each of these may wait (a replication round, a busy coordinator), so N callers at once
cost one exchange, not N in a row.

`submit` is called by whoever has something to send; the first caller finding no request out
sends everything queued, its own entry included, then hands the turn on (no background task).
At most one entry per `key` goes in a request (Kafka's requests name a producer or a
transactional id once); a later one with the same key waits for the next. A caller cancelled
before its entry went out takes it back; entries of a request that failed or was cancelled
come back with no results, which their callers treat as "not done" (they retry or refuse)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Awaitable, Callable, Hashable

import trio

from common.connection import ConnectionClosed
from wire.errors import DecodeError, ErrorCode
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS

if TYPE_CHECKING:
    from partition_server.peers import PeerConnections

log = logging.getLogger(__name__)


class Entry:
    """What one caller wants sent; `results` is filled by the batch sender."""

    __slots__ = ("key", "payload", "results", "finished")

    def __init__(self, key: Hashable, payload):
        self.key = key
        self.payload = payload
        self.results: dict = {}
        self.finished = False


class OneOut:
    def __init__(self, send_batch: Callable[[int, list[Entry]], Awaitable[None]]):
        self._send_batch = send_batch
        self._queued: dict[int, list[Entry]] = {}      # broker → entries waiting for a request
        self._sending: set[int] = set()                 # brokers with a request out
        self._turns: dict[int, trio.Event] = {}         # set when that request is answered

    def idle(self) -> bool:
        return not (self._queued or self._sending or self._turns)

    async def submit(self, node: int, entry: Entry) -> dict:
        """Send `entry` to broker `node` (with whatever else is queued there) and return its
        results; empty if its request failed."""
        queue = self._queued.setdefault(node, [])
        queue.append(entry)
        try:
            while not entry.finished:
                if node in self._sending:
                    turn = self._turns.get(node)
                    if turn is None:
                        turn = self._turns[node] = trio.Event()
                    await turn.wait()
                    continue
                batch = _take(queue)
                self._sending.add(node)
                try:
                    await self._send_batch(node, batch)
                finally:
                    for e in batch:
                        e.finished = True
                    self._sending.discard(node)
                    turn = self._turns.pop(node, None)
                    if turn is not None:
                        turn.set()
        finally:
            if not entry.finished and entry in queue:
                queue.remove(entry)               # cancelled before it was sent
            if not queue and self._queued.get(node) is queue:
                del self._queued[node]
        return entry.results


def _take(queue: list[Entry]) -> list[Entry]:
    """The queued entries, at most one per key (the others stay, in order)."""
    batch, keys, rest = [], set(), []
    for e in queue:
        (rest if e.key in keys else batch).append(e)
        keys.add(e.key)
    queue[:] = rest
    return batch


class Verifications:
    """KIP-890 verifications a partition leader asks of a remote transaction coordinator
    (AddPartitionsToTxn v4, verify_only), one request per coordinator at a time with every
    transaction queued meanwhile, on connections of their own (`peers`): behind a
    WriteTxnMarkers, which waits a replication round, a producer's write would wait as long."""

    TIMEOUT_S = 5.0

    def __init__(self, peers: PeerConnections):
        self.peers = peers
        self.requests = OneOut(self._send_batch)

    async def verify(self, node: int, tid: str, pid: int, epoch: int, tps: list) -> dict:
        """{partition: error} from coordinator `node`; COORDINATOR_NOT_AVAILABLE for all if it
        could not be asked."""
        got = await self.requests.submit(node, Entry(tid, (pid, epoch, tps)))
        return got or {tp: ErrorCode.COORDINATOR_NOT_AVAILABLE for tp in tps}

    async def _send_batch(self, node: int, batch: list[Entry]) -> None:
        cls = REQUESTS[ApiKey.ADD_PARTITIONS_TO_TXN]
        txns = []
        for e in batch:
            pid, epoch, tps = e.payload
            topics: dict[str, list[int]] = {}
            for t, part in tps:
                topics.setdefault(t, []).append(part)
            txns.append(cls.AddPartitionsToTxnTransaction(
                transactional_id=e.key, producer_id=pid, producer_epoch=epoch, verify_only=True,
                topics=[cls.AddPartitionsToTxnTopic(name=t, partitions=ps)
                        for t, ps in topics.items()]))
        resp, failure = None, "timed out"
        try:
            # a bare cancel scope, not trio.fail_after's generator context manager (one of
            # these per KIP-890 verification: it showed in the leaders' profiles)
            with trio.CancelScope(deadline=trio.current_time() + self.TIMEOUT_S):
                conn = await self.peers.get(node)
                resp = await conn.request(cls(transactions=txns), 4, timeout_s=self.TIMEOUT_S)
        except (ConnectionClosed, OSError, DecodeError, ValueError, trio.TooSlowError) as exc:
            failure = exc
        if resp is None:
            log.info("verification with broker %d failed: %s", node, failure)
            await self.peers.drop(node)
            return
        answers = {r.transactional_id: r for r in resp.results_by_transaction}
        top = ErrorCode(resp.error_code) if resp.error_code else ErrorCode.INVALID_TXN_STATE
        for e in batch:
            e.results = {tp: top for tp in e.payload[2]}
            r = answers.get(e.key)
            for t in (r.topic_results if r is not None else ()):
                for pr in t.results_by_partition:
                    e.results[(t.name, pr.partition_index)] = ErrorCode(pr.partition_error_code)
