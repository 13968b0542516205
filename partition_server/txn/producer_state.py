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

Followers and a restarted broker rebuild the same state by feeding every batch header of the log
to `update`, so the window survives leader failover and restarts.
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


class ProducerStateManager:
    def __init__(self):
        self.producers: dict[int, ProducerEntry] = {}

    def check(self, producer_id: int, epoch: int, base_seq: int, last_seq: int) -> Verdict:
        if producer_id < 0:
            return OK
        entry = self.producers.get(producer_id)
        if entry is None:
            return OK if base_seq == 0 else Verdict(ErrorCode.UNKNOWN_PRODUCER_ID)
        if epoch < entry.epoch:
            return Verdict(ErrorCode.INVALID_PRODUCER_EPOCH)
        if epoch > entry.epoch:
            return OK if base_seq == 0 else Verdict(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
        for cached in entry.batches:
            if cached.first_seq == base_seq and cached.last_seq == last_seq:
                return Verdict(ErrorCode.DUPLICATE_SEQUENCE_NUMBER, cached)
        if base_seq != _next_seq(entry.last_seq):
            return Verdict(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
        return OK

    def update(self, producer_id: int, epoch: int, base_seq: int, last_seq: int,
               first_offset: int, last_offset: int) -> None:
        """Record an appended batch (leader after append; followers and recovery for all)."""
        if producer_id < 0 or base_seq < 0:
            return
        entry = self.producers.get(producer_id)
        if entry is None or epoch > entry.epoch:
            entry = self.producers[producer_id] = ProducerEntry(epoch)
        elif epoch < entry.epoch:
            return
        entry.batches.append(CachedBatch(base_seq, last_seq, first_offset, last_offset))

    def update_from_header(self, h) -> None:
        last_seq = (h.base_sequence + h.last_offset_delta) % (INT32_MAX + 1) \
            if h.base_sequence >= 0 else -1
        self.update(h.producer_id, h.producer_epoch, h.base_sequence, last_seq, h.base_offset,
                    h.last_offset)

    def truncate_after(self, end_offset: int) -> None:
        """The log was truncated: forget batches at or after `end_offset`."""
        for pid in list(self.producers):
            entry = self.producers[pid]
            kept = [b for b in entry.batches if b.last_offset < end_offset]
            entry.batches.clear()
            entry.batches.extend(kept)
            if not kept:
                del self.producers[pid]
