"""Idempotent-producer state of one partition (KIP-98 idempotence; the dedup window of 5).

For each producer id: its epoch and the sequence ranges (with their offsets) of its last 5
batches. On the leader, before a batch is appended:

    producer id < 0                        → not idempotent: append
    unknown producer, base sequence 0      → new producer: append
    unknown producer, base sequence > 0    → UNKNOWN_PRODUCER_ID (its state was lost/expired)
    epoch older than ours                  → INVALID_PRODUCER_EPOCH
    epoch newer, base sequence 0           → the producer bumped its epoch: append
    epoch newer, base sequence > 0         → OUT_OF_ORDER_SEQUENCE_NUMBER
    same epoch, same range as a cached one → DUPLICATE: answer with the original offsets
    same epoch, base ≠ last sequence + 1   → OUT_OF_ORDER_SEQUENCE_NUMBER

Two refinements for librdkafka, which renumbers and resends everything unacknowledged when told a
batch behind its first unacknowledged one is out of order (`admit`, `_refused_gap`): the gap
errors above become the retriable error this replica just refused the gap's first batch with
(short ISR, not yet the leader), and a retry of a cached batch is answered from the window even
while the ISR is short.

Followers and a restarted broker rebuild the same state by feeding every batch header of the log
to `update`, so the window survives leader failover and restarts; a follower whose log is
truncated reloads it from the newest snapshot plus the log (replica_manager.HostedPartition
.truncated).

Transactions (KIP-98) on the partition: a transactional batch of a producer with no open
transaction here opens one at its base offset; a COMMIT/ABORT control batch (transaction marker,
written by the coordinator) closes it. From that:
- the last stable offset (LSO) = min(first offset of every open transaction, high watermark):
  read_committed consumers never read at or past it;
- aborted transactions (producer id, first offset, marker offset, LSO after the abort), handed
  to `on_abort` — the log's per-segment `.txnindex` (log/txn_index.py) — from which a
  read_committed Fetch tells the consumer to drop those producers' records up to the marker.
A marker with a newer producer epoch (the coordinator bumped it to fence a producer) moves the
producer to that epoch, so the fenced producer's late writes get INVALID_PRODUCER_EPOCH.
The same rules run on followers and on recovery (the whole log replayed), so leaders elected
later agree.
"""

from __future__ import annotations

import collections
import dataclasses

from wire.errors import ErrorCode

WINDOW = 5
INT32_MAX = 2**31 - 1


@dataclasses.dataclass
class CachedBatch:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int


@dataclasses.dataclass
class ProducerEntry:
    epoch: int
    batches: collections.deque = dataclasses.field(
        default_factory=lambda: collections.deque(maxlen=WINDOW))
    last_ms: int = -1            # last append (batch max timestamp): producer.id.expiration.ms

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1


@dataclasses.dataclass(frozen=True)
class Verdict:
    error: ErrorCode = ErrorCode.NONE
    duplicate_of: CachedBatch | None = None


OK = Verdict()


def _next_seq(seq: int) -> int:
    return 0 if seq == INT32_MAX else seq + 1


def _ahead(seq: int, expected: int) -> bool:
    """`seq` is past `expected` (sequences wrap at INT32_MAX)."""
    return 0 < (seq - expected) % (INT32_MAX + 1) < (INT32_MAX + 1) // 2


@dataclasses.dataclass(frozen=True, order=True)
class FinishedTxn:
    marker_offset: int          # sort key: the offset of the COMMIT/ABORT marker
    producer_id: int
    first_offset: int
    aborted: bool


REFUSAL_KEPT_MS = 120_000       # a refused batch not retried by then never will be (in this epoch)
MAX_FINISHED = 100_000          # recent finished transactions (snapshots keep some; `reaches`)


class ProducerStateManager:
    def __init__(self):
        self.producers: dict[int, ProducerEntry] = {}
        self.ongoing: dict[int, int] = {}                 # producer id → first offset
        self.finished: collections.deque = collections.deque(maxlen=MAX_FINISHED)
        # (producer id, first offset, marker offset, last stable offset) of each abort: the
        # partition's log records it in its transaction index (None: nobody asks, e.g. tests)
        self.on_abort = None
        # producer id → newest transaction coordinator epoch seen in its markers: a marker from
        # an older coordinator (a zombie after failover) is refused (TRANSACTION_COORDINATOR_FENCED)
        self.coordinator_epochs: dict[int, int] = {}
        # producer id → (epoch, base sequence, error, when): the batch next in its sequence that
        # this leader refused before appending, with a retriable error (see `admit`)
        self.refusals: dict[int, tuple[int, int, ErrorCode, int]] = {}
        # producer id → the guard of a KIP-890 verification asked about it (Kafka's
        # VerificationGuard): cleared by its next marker, so a write verified before the
        # transaction ended cannot open a new one here after it (`verification_holds`)
        self.verifying: dict[int, object] = {}
        self._old_guards: dict[int, object] = {}          # those seen by the last expiry pass

    def check(self, producer_id: int, epoch: int, base_seq: int, last_seq: int) -> Verdict:
        if producer_id < 0:
            return OK
        entry = self.producers.get(producer_id)
        if entry is None:
            return OK if base_seq == 0 else \
                self._refused_gap(producer_id, epoch, 0, ErrorCode.UNKNOWN_PRODUCER_ID)
        if epoch < entry.epoch:
            return Verdict(ErrorCode.INVALID_PRODUCER_EPOCH)
        if epoch > entry.epoch:
            return OK if base_seq == 0 else \
                self._refused_gap(producer_id, epoch, 0, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
        for cached in entry.batches:
            if cached.first_seq == base_seq and cached.last_seq == last_seq:
                return Verdict(ErrorCode.DUPLICATE_SEQUENCE_NUMBER, cached)
        expected = _next_seq(entry.last_seq)
        if base_seq == expected:
            return OK
        if not _ahead(base_seq, expected):
            # behind: an old batch no longer in the window (its retry after the window moved
            # on), never a gap a refusal opened: OUT_OF_ORDER_SEQUENCE_NUMBER, as Kafka
            return Verdict(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
        return self._refused_gap(producer_id, epoch, expected,
                                 ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)

    def _refused_gap(self, producer_id: int, epoch: int, expected: int,
                     otherwise: ErrorCode) -> Verdict:
        """A batch past a gap. When the gap starts at a batch this replica refused with a
        retriable error, the client is about to send that one again: this one gets the same
        retriable error. OUT_OF_ORDER_SEQUENCE_NUMBER (or UNKNOWN_PRODUCER_ID) would tell
        librdkafka that every batch it has not seen acknowledged is lost: it bumps its epoch and
        sends them all again, renumbered — including a batch that is in the log but was
        answered as not written (NOT_LEADER_OR_FOLLOWER from a deposed leader, a retry refused
        NOT_ENOUGH_REPLICAS), which the new numbers then write twice. Such a gap opens when the
        ISR grows back, or this broker becomes the leader, between two requests in flight: the
        first is refused, the second is not."""
        refused = self.refusals.get(producer_id)
        if refused is not None and refused[0] == epoch and refused[1] == expected:
            return Verdict(refused[2])
        return Verdict(otherwise)

    def admit(self, headers, now_ms: int, refuse: ErrorCode | None = None) -> Verdict:
        """A produce's verdict: `headers` are (header, last sequence) of its idempotent
        batches; `refuse`, the retriable error the replica answers before any append (not the
        leader, or acks=all with fewer in-sync replicas than min.insync.replicas). A batch so
        refused that was next in its sequence is remembered (`_refused_gap`).

        A leader short of in-sync replicas still answers the retry of a batch it holds from
        the window. Kafka refuses it NOT_ENOUGH_REPLICAS first, which tells the client that a
        batch in the log is not there: librdkafka may renumber it and write it again. Its
        acks=all wait then holds it until the ISR is whole, or times out ("maybe written").
        (A replica that is not the leader only records its refusal: its caller answers
        NOT_LEADER_OR_FOLLOWER whatever this returns.)"""
        if not headers:                 # not idempotent: nothing to check or remember
            return OK if refuse is None else Verdict(refuse)
        verdicts = [self.check(h.producer_id, h.producer_epoch, h.base_sequence, last)
                    for h, last in headers]
        if len(verdicts) == 1 and verdicts[0].duplicate_of is not None:
            return verdicts[0]
        if refuse is not None:
            for (h, _), verdict in zip(headers, verdicts):
                if verdict.error == ErrorCode.NONE:
                    self.refusals[h.producer_id] = (h.producer_epoch, h.base_sequence, refuse,
                                                    now_ms)
            return Verdict(refuse)
        # several batches with one already here: refused whole, never answered as appended
        return next((Verdict(v.error) for v in verdicts if v.error != ErrorCode.NONE), OK)

    def update(self, producer_id: int, epoch: int, base_seq: int, last_seq: int,
               first_offset: int, last_offset: int, timestamp_ms: int = -1) -> None:
        """Record an appended batch (leader after append; followers and recovery for all)."""
        if producer_id < 0 or base_seq < 0:
            return
        entry = self.producers.get(producer_id)
        if entry is None or epoch > entry.epoch:
            entry = self.producers[producer_id] = ProducerEntry(epoch)
        elif epoch < entry.epoch:
            return
        entry.batches.append(CachedBatch(base_seq, last_seq, first_offset, last_offset))
        entry.last_ms = max(entry.last_ms, timestamp_ms)
        if self.refusals:
            self.refusals.pop(producer_id, None)      # the refused batch (or a bump) came

    def expire_producers(self, now_ms: int, expiration_ms: int) -> list[int]:
        """producer.id.expiration.ms: forget producers idle that long with no open transaction
        (kafka-python makes every client idempotent, each with a new id: without this the state
        and its snapshots only grow). A producer that comes back gets UNKNOWN_PRODUCER_ID or
        starts again at sequence 0, as in Kafka."""
        gone = [pid for pid, e in self.producers.items()
                if e.last_ms >= 0 and now_ms - e.last_ms > expiration_ms and pid not in self.ongoing]
        for pid in gone:
            del self.producers[pid]
            # its markers' coordinator epoch goes with it, as in Kafka's producer state entry:
            # kept, one per transactional producer that ever wrote here, for the log's life
            self.coordinator_epochs.pop(pid, None)
        self._age_guards()
        for pid in [pid for pid, r in self.refusals.items() if now_ms - r[3] > REFUSAL_KEPT_MS]:
            del self.refusals[pid]
        return gone

    def update_from_header(self, h, marker=None) -> None:
        """Every batch with a producer id, in log order (followers' appends, recovery): the
        sequence window and the transaction tracking below."""
        self.observe(h, marker)

    def _update_sequences(self, h) -> None:
        last_seq = (h.base_sequence + h.last_offset_delta) % (INT32_MAX + 1) \
            if h.base_sequence >= 0 else -1
        self.update(h.producer_id, h.producer_epoch, h.base_sequence, last_seq, h.base_offset,
                    h.last_offset, h.max_timestamp)

    # -- transactions --------------------------------------------------------------------------

    def _age_guards(self) -> None:
        """Drop the guards that were already here, unchanged, at the previous expiry pass:
        their verifications ended long ago (they time out in seconds) without a marker or a
        write to clear them — refused ones, whose guard stays for any other verification of the
        producer that shares it."""
        old, self._old_guards = self._old_guards, {}
        for pid, guard in list(self.verifying.items()):
            if old.get(pid) is guard:
                del self.verifying[pid]
            else:
                self._old_guards[pid] = guard

    def begin_txn(self, producer_id: int, offset: int) -> None:
        """A transactional data batch at `offset`: opens the producer's transaction if none."""
        if producer_id >= 0 and producer_id not in self.ongoing:
            self.ongoing[producer_id] = offset
            if self.verifying:
                self.verifying.pop(producer_id, None)     # the verified write landed

    def start_verification(self, producer_id: int) -> object:
        """The guard of a KIP-890 verification about to be asked of the coordinator (the one
        under way, if any: writes of one producer verified at once share it)."""
        guard = self.verifying.get(producer_id)
        if guard is None:
            guard = self.verifying[producer_id] = object()
        return guard

    def verification_holds(self, producer_id: int, guard: object) -> bool:
        """Whether a write the coordinator verified with `guard` may be appended now: no marker
        closed the producer's transaction here while the coordinator was asked (it answered
        about a transaction that may have ended since: appended, the write would open one the
        coordinator knows nothing of — a hanging transaction), or one is open again (the
        sequence checks then place the write, as in Kafka)."""
        return producer_id in self.ongoing or self.verifying.get(producer_id) is guard

    def in_transaction(self, producer_id: int) -> bool:
        return producer_id in self.ongoing

    def marker_fenced(self, producer_id: int, coordinator_epoch: int) -> bool:
        return coordinator_epoch < self.coordinator_epochs.get(producer_id, -1)

    def end_txn(self, producer_id: int, producer_epoch: int, commit: bool,
                marker_offset: int, coordinator_epoch: int = -1, timestamp_ms: int = -1) -> None:
        """A COMMIT/ABORT marker was appended at `marker_offset`. Its timestamp counts as the
        producer's last write: an entry a marker made (a bumped epoch: every transaction with
        KIP-890 part 2, any coordinator abort) had none, so it never expired."""
        if coordinator_epoch > self.coordinator_epochs.get(producer_id, -1):
            self.coordinator_epochs[producer_id] = coordinator_epoch
        entry = self.producers.get(producer_id)
        if entry is None or producer_epoch > entry.epoch:
            entry = self.producers[producer_id] = ProducerEntry(producer_epoch)
        entry.last_ms = max(entry.last_ms, timestamp_ms)
        if self.verifying:
            self.verifying.pop(producer_id, None)         # a verification asked before is void
        first = self.ongoing.pop(producer_id, None)
        if first is None:
            return                      # no data of that transaction here (e.g. a retried marker)
        self.finished.append(FinishedTxn(marker_offset, producer_id, first, not commit))
        if not commit and self.on_abort is not None:
            # Kafka's rule: the LSO right after this abort (the earliest other open
            # transaction, else just past the marker) bounds a later index search
            lso = min(self.ongoing.values()) if self.ongoing else marker_offset + 1
            self.on_abort(producer_id, first, marker_offset, lso)

    def observe(self, h, marker=None) -> None:
        """Every batch with a producer id, in log order (leader after append, followers, and
        recovery). `marker`: (control type — 0 ABORT / 1 COMMIT —, coordinator epoch) of a
        transaction marker, else parsed from the batch bytes when they are at hand."""
        if h.producer_id < 0:
            return
        if h.is_control:
            if marker is None:
                marker = marker_of(h.bytes())
            if marker is not None and marker[0] in (0, 1):
                self.end_txn(h.producer_id, h.producer_epoch, marker[0] == 1, h.base_offset,
                             marker[1], h.max_timestamp)
            return
        self._update_sequences(h)
        if h.is_transactional:
            self.begin_txn(h.producer_id, h.base_offset)

    def first_unstable_offset(self) -> int | None:
        return min(self.ongoing.values()) if self.ongoing else None

    def last_stable_offset(self, high_watermark: int) -> int:
        first = self.first_unstable_offset()
        return high_watermark if first is None else min(first, high_watermark)

    def reaches(self, end_offset: int) -> bool:
        """Whether any batch, open transaction or marker here is at or past `end_offset` (a
        truncation to it changes this state)."""
        return any(e.batches and e.batches[-1].last_offset >= end_offset
                   for e in self.producers.values()) or \
            any(first >= end_offset for first in self.ongoing.values()) or \
            bool(self.finished and self.finished[-1].marker_offset >= end_offset)  # log order


def marker_of(batch) -> tuple[int, int] | None:
    """(control record type — 0 ABORT, 1 COMMIT, ... —, coordinator epoch or -1) of a control
    batch's bytes; None if unreadable."""
    from wire.errors import DecodeError
    from wire.records.batch import decode_batch, parse_control_key, parse_end_txn_marker_value
    try:
        recs = decode_batch(batch).records
        if not recs:
            return None
        rtype = parse_control_key(recs[0].key)[1]
    except (DecodeError, ValueError, IndexError):
        return None
    try:
        coordinator_epoch = parse_end_txn_marker_value(recs[0].value)[1] if rtype in (0, 1) else -1
    except (DecodeError, ValueError, TypeError):
        coordinator_epoch = -1
    return rtype, coordinator_epoch


def rebuild_from_segments(segments) -> ProducerStateManager:
    """Replay every batch with a producer id of a log (restart, leader change)."""
    import os
    state = ProducerStateManager()
    for seg in segments:
        for h in seg.iter_headers(0):
            if h.producer_id < 0:
                continue
            marker = None
            if h.is_control:
                marker = marker_of(seg.pread(h.size_in_bytes, h.pos))
            state.observe(h, marker)
    return state
