"""KIP-890 verifications asked ahead (issue #23 item 2): a partition leader asks a remote
coordinator about a producer's next transaction as soon as a marker closes the current one on
the partition, so the producer's first write of that transaction finds its answer here.

Without it, the first transactional write to a partition led away from the coordinator waits
a round trip to the coordinator (txn/verify.py) before it is appended; on the transaction
benchmark's critical path that was ~1.3 ms of a ~17.5 ms cycle, measured from the wire
(bench/README.md). The question asked ahead is the same AddPartitionsToTxn v4 verify-only
request, with one Raftka tagged field (`RaftkaWaitMs`): the coordinator may hold the answer while
the partition is not yet in the producer's ongoing transaction, and answers when it joins
(`verify_held`). Typically: marker → this request → the coordinator holds it over the markers
and the producer's next AddPartitionsToTxn → its Ongoing record is replicated → the answer
leaves beside the producer's own, and the producer's Produce arrives after it.

Why an answer asked ahead is safe to use:
- The guard (Kafka's VerificationGuard, txn/producer_state.py) is taken right after the
  marker, before asking. Only the next marker for the producer voids it, so an answer that
  arrives after that marker is not used, and a write appended with it belongs to a transaction
  that began after the marker.
- The question leaves after that marker, which the coordinator sent only after it had logged
  the end of that transaction. So the coordinator cannot answer it from the transaction the
  marker closed: NONE means the partition is in a later one. A coordinator that was deposed
  and does not know it could still answer from stale state, and the request asked when the
  write arrives can be answered the same way; Kafka has the same exposure.
- The producer epoch asked is the marker's. A write is verified ahead only under that epoch,
  and everything else takes the usual path.
It is only a shortcut: a write that finds no usable answer here asks as before, and an answer
still in flight is not waited for.

The coordinator holds a request until one of its transactions has every partition asked
about in the producer's ongoing transaction, or one is refused outright (fenced, for example),
or `WAIT_MS` passes. Then it answers every transaction with what holds at that moment. The
leader asks again, while its own deadline lasts, about those still outside the transaction.
One request per coordinator is out at a time, on connections of its own, so a held request
never delays a verification a write is waiting for.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Callable

import trio

from common.connection import ConnectionClosed
from wire.errors import DecodeError, ErrorCode
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS

if TYPE_CHECKING:
    from partition_server.peers import PeerConnections

log = logging.getLogger(__name__)

# The coordinator's hold, and how long after the marker the leader keeps asking: a busy
# producer's next transaction, not its pauses. A request held for a producer that is not
# writing again delays the questions queued behind it (they then take the usual path).
WAIT_MS = 50
ASK_FOR_S = 0.25
JOIN_S = 0.05               # how long a write waits for a question still out, before asking
KEEP_IDS = 100_000          # producer id → transactional id entries kept (the oldest go first)
NOT_YET = ErrorCode.INVALID_TXN_STATE       # "not in the ongoing transaction": may change


class TxnChanges:
    """Coordinator side: wake-ups of requests held on transactional ids, set whenever an id's
    state is installed (a record logged, a load, an unload)."""

    def __init__(self):
        self._waiting: dict[str, set[trio.Event]] = {}

    def changed(self, tid: str) -> bool:
        """Wake the requests held on `tid`; whether there were any."""
        events = self._waiting.pop(tid, None) if self._waiting else None
        for event in events or ():
            event.set()
        return bool(events)

    @staticmethod
    async def let_them_answer() -> None:
        """Two scheduler passes, so the requests just woken answer before the caller's own
        answer leaves: the producer's AddPartitionsToTxn answer is what sends its Produce to
        the leaders, and the answer asked ahead should be there first. (trio runs the tasks
        made runnable in one pass in either order; after two, the woken ones have run.)"""
        await trio.lowlevel.checkpoint()
        await trio.lowlevel.checkpoint()

    def changed_all(self) -> None:
        waiting, self._waiting = self._waiting, {}
        for events in waiting.values():
            for event in events:
                event.set()

    async def wait_any(self, tids, deadline: float) -> None:
        event = trio.Event()
        for tid in tids:
            self._waiting.setdefault(tid, set()).add(event)
        try:
            with trio.move_on_at(deadline):
                await event.wait()
        finally:
            for tid in tids:
                events = self._waiting.get(tid)
                if events is not None:
                    events.discard(event)
                    if not events:
                        del self._waiting[tid]


def _settled(result: dict) -> bool:
    """All partitions in the ongoing transaction, or one refused for good."""
    return all(e == ErrorCode.NONE for e in result.values()) or \
        any(e not in (ErrorCode.NONE, NOT_YET) for e in result.values())


async def verify_held(verify: Callable, changes: TxnChanges, asked: list, wait_ms: int) -> list:
    """Coordinator: answer a held verify-only request. `asked`: (tid, pid, epoch, partitions)
    per transaction; `verify(tid, pid, epoch, partitions)` → {partition: error}. Returns those
    results once one transaction is settled, or at the deadline."""
    deadline = trio.current_time() + min(wait_ms, WAIT_MS) / 1000
    while True:
        results = [verify(*a) for a in asked]
        if any(_settled(r) for r in results) or trio.current_time() >= deadline:
            return results
        await changes.wait_any({a[0] for a in asked}, deadline)


class _Asked:
    """One partition's question asked ahead for one producer."""

    __slots__ = ("tid", "epoch", "guard", "verified", "until", "done", "out")

    def __init__(self, tid: str, epoch: int, guard: object, until: float):
        self.tid, self.epoch, self.guard, self.until = tid, epoch, guard, until
        self.verified = False
        self.out = False                        # in a request now (not queued behind one)
        self.done = trio.Event()                # answered (either way), failed or replaced


class VerifyAhead:
    """Leader side. `coordinator_of(tid)`: the broker to ask (None: ourselves, or not known);
    `peers`: connections of their own."""

    TIMEOUT_S = 5.0

    def __init__(self, peers: PeerConnections, coordinator_of: Callable[[str], int | None]):
        self.peers = peers
        self.coordinator_of = coordinator_of
        self.tids: dict[int, str] = {}          # producer id → transactional id (its Produce)
        self.asked: dict[tuple, _Asked] = {}    # ((topic, partition), producer id) → question
        self._queued: dict[int, set[tuple]] = {}     # coordinator → keys of `asked` to send
        self._sending: set[int] = set()
        self.questions = 0                      # for /metrics: questions asked after markers,
        self.used = 0                           # writes they verified,
        self.late = 0                           # and writes that waited JOIN_S for one in vain

    def learned(self, pid: int, tid: str) -> None:
        if self.tids.get(pid) != tid:
            if len(self.tids) >= KEEP_IDS:
                del self.tids[next(iter(self.tids))]
            self.tids[pid] = tid

    def after_marker(self, tp, pid: int, epoch: int, producers) -> None:
        """A marker for `pid` was just appended on `tp`, which we lead: ask about its next
        transaction now (`producers`: the partition's producer state, where the guard goes)."""
        tid = self.tids.get(pid)
        node = self.coordinator_of(tid) if tid is not None else None
        if node is None:
            self.asked.pop((tp, pid), None)
            return
        guard = producers.start_verification(pid)
        if len(self.asked) >= KEEP_IDS:
            self.asked.pop(next(iter(self.asked))).done.set()
        old = self.asked.get((tp, pid))
        if old is not None:
            old.done.set()
        self.asked[(tp, pid)] = _Asked(tid, epoch, guard, trio.current_time() + ASK_FOR_S)
        self.questions += 1
        self._queue(node, (tp, pid))

    def take(self, tp, pid: int, epoch: int, producers) -> object | None:
        """The guard of an answer asked ahead that verifies a write of (`pid`, `epoch`) on `tp`
        now, if there is one (then it is used up)."""
        a = self.asked.get((tp, pid))
        if a is None or not a.verified or a.epoch != epoch or \
                producers.verifying.get(pid) is not a.guard:
            return None
        del self.asked[(tp, pid)]
        self.used += 1
        return a.guard

    async def join(self, ask: dict, producers_of: Callable) -> dict:
        """`ask`: {(pid, epoch): partitions} a Produce would ask the coordinator about. Those
        with a question asked ahead out at the coordinator (under the current guard, for that
        epoch) wait for its answer, up to JOIN_S: it left the coordinator beside the producer's
        own AddPartitionsToTxn answer, so it is on its way. One still queued here, behind a
        request held for other producers, is not waited for. Returns what is left to ask."""
        waiting = []
        for (pid, epoch), tps in ask.items():
            for tp in tps:
                a = self.asked.get((tp, pid))
                if a is not None and a.out and not a.verified and a.epoch == epoch and \
                        producers_of(tp).verifying.get(pid) is a.guard:
                    waiting.append(a.done)
        if not waiting:
            return ask
        with trio.move_on_after(JOIN_S) as waited:
            for done in waiting:
                await done.wait()
        if waited.cancelled_caught:
            self.late += 1
        left: dict = {}
        for (pid, epoch), tps in ask.items():
            for tp in tps:
                producers = producers_of(tp)        # None: no longer hosted here
                if producers is None or self.take(tp, pid, epoch, producers) is None:
                    left.setdefault((pid, epoch), []).append(tp)
        return left

    def _queue(self, node: int, key: tuple) -> None:
        self._queued.setdefault(node, set()).add(key)
        if node not in self._sending:
            self._sending.add(node)
            trio.lowlevel.spawn_system_task(self._send_loop, node)

    async def _send_loop(self, node: int) -> None:
        try:
            while self._queued.get(node):
                keys = self._queued.pop(node)
                await self._send(node, [k for k in keys if k in self.asked])
        except Exception:               # a shortcut only: never the broker's end
            log.exception("verifications asked ahead of broker %d", node)
            self._queued.pop(node, None)
        finally:
            self._sending.discard(node)

    async def _send(self, node: int, keys: list) -> None:
        # the questions as sent: an answer is applied to these only, never to one asked after
        # a later marker for the same producer (it may describe the transaction that closed)
        sent = [(key, self.asked[key]) for key in keys]
        for _, a in sent:
            a.out = True
        by_txn: dict[tuple, list] = {}
        for key, a in sent:
            by_txn.setdefault((a.tid, key[1], a.epoch), []).append(key[0])
        if not by_txn:
            return
        cls = REQUESTS[ApiKey.ADD_PARTITIONS_TO_TXN]
        txns = []
        for (tid, pid, epoch), tps in by_txn.items():
            topics: dict[str, list[int]] = {}
            for t, part in tps:
                topics.setdefault(t, []).append(part)
            txns.append(cls.AddPartitionsToTxnTransaction(
                transactional_id=tid, producer_id=pid, producer_epoch=epoch, verify_only=True,
                topics=[cls.AddPartitionsToTxnTopic(name=t, partitions=ps)
                        for t, ps in topics.items()]))
        resp, started = None, trio.current_time()
        try:
            with trio.CancelScope(deadline=trio.current_time() + self.TIMEOUT_S):
                conn = await self.peers.get(node)
                resp = await conn.request(cls(transactions=txns, raftka_wait_ms=WAIT_MS), 4,
                                          timeout_s=self.TIMEOUT_S)
        except (ConnectionClosed, OSError, DecodeError, ValueError, trio.TooSlowError) as exc:
            log.debug("verification asked ahead of broker %d failed: %s", node, exc)
        if resp is None:
            await self.peers.drop(node)
            for key, a in sent:
                a.done.set()
                if self.asked.get(key) is a:
                    del self.asked[key]
            return
        self._answered(node, resp, sent, trio.current_time() - started)

    def _answered(self, node: int, resp, sent: list, took_s: float) -> None:
        errors: dict[tuple, ErrorCode] = {}
        for r in resp.results_by_transaction:
            for t in r.topic_results:
                for pr in t.results_by_partition:
                    errors[(r.transactional_id, (t.name, pr.partition_index))] = \
                        ErrorCode(pr.partition_error_code)
        # ask again about those not in a transaction yet, while their time lasts, if the
        # coordinator held the request or answered because another question settled: one
        # answering at once with nothing settled (it does not hold: an older version) is not
        # asked again and again
        again = took_s >= 0.01 or any(e != NOT_YET for e in errors.values())
        now = trio.current_time()
        for key, a in sent:
            if self.asked.get(key) is not a:
                continue                        # replaced by a later marker's question
            err = errors.get((a.tid, key[0]), ErrorCode.UNKNOWN_SERVER_ERROR)
            if err == ErrorCode.NONE:
                a.verified = True
                a.done.set()
            elif err == NOT_YET and again and now < a.until:
                a.out = False
                self._queued.setdefault(node, set()).add(key)      # the loop sends it
            else:
                del self.asked[key]
                a.done.set()
