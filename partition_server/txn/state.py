"""Transaction metadata of one transactional.id: the coordinator's pure state machine (KIP-98,
epoch bump per transaction and verification of KIP-890, producer recovery of KIP-360).

States (Kafka's names, shown by DescribeTransactions / ListTransactions):

    Empty            no transaction in progress (after InitProducerId)
    Ongoing          partitions/offsets were added; data may be written to them
    PrepareCommit    EndTxn(commit) logged; COMMIT markers are being written to every partition
    PrepareAbort     EndTxn(abort), a timeout or a newer producer logged it; ABORT markers pending
    CompleteCommit   every COMMIT marker written
    CompleteAbort    every ABORT marker written
    PrepareEpochFence  a newer producer (InitProducerId) found a transaction Ongoing: its epoch is
                     bumped and the transaction aborted before the new producer may start
    Dead             the transactional id expired (never written by this version)

Transitions (anything else is INVALID_TXN_STATE or CONCURRENT_TRANSACTIONS):

    Empty/CompleteCommit/CompleteAbort --AddPartitions/AddOffsets--> Ongoing
    Ongoing --AddPartitions--> Ongoing
    Ongoing --EndTxn(commit)--> PrepareCommit --markers written--> CompleteCommit
    Ongoing --EndTxn(abort) | timeout--> PrepareAbort --markers written--> CompleteAbort
      (EndTxn v5, KIP-890 part 2: the Prepare* state carries epoch + 1 — markers and the next
      transaction use it; at epoch overflow a new producer id is taken on completion)
    Ongoing --InitProducerId--> PrepareEpochFence -> PrepareAbort (epoch bumped)
    Empty/Complete* --InitProducerId--> Empty (epoch + 1; new producer id at epoch overflow)

Every function here is pure: it takes the current `TransactionMetadata` (None when unknown) and
returns an error code and/or the metadata to log; the coordinator (`coordinator.py`) persists the
new metadata to `__transaction_state` first and installs it only once it is committed.

Error codes, and when:
- INVALID_PRODUCER_ID_MAPPING: the producer id is not the one of this transactional id.
- PRODUCER_FENCED: the producer's epoch is older than ours (a newer producer or a timeout bumped it).
- CONCURRENT_TRANSACTIONS: markers of the previous transaction are still being written (retriable).
- INVALID_TXN_STATE: EndTxn with no transaction, or commit after an abort, and the like.
- INVALID_TRANSACTION_TIMEOUT: timeout <= 0 or above transaction.max.timeout.ms.
"""

from __future__ import annotations

import dataclasses
import enum

from wire.errors import ErrorCode

MAX_EPOCH = 32767 - 1          # Short.MaxValue - 1: the next bump needs a new producer id


class TxnState(str, enum.Enum):
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"


PREPARING = (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT, TxnState.PREPARE_EPOCH_FENCE)
IDLE = (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)

# state → the states it may come from (checked by `transition`)
VALID_PREVIOUS = {
    TxnState.EMPTY: {TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT},
    TxnState.ONGOING: {TxnState.ONGOING, TxnState.EMPTY, TxnState.COMPLETE_COMMIT,
                       TxnState.COMPLETE_ABORT},
    TxnState.PREPARE_COMMIT: {TxnState.ONGOING},
    TxnState.PREPARE_ABORT: {TxnState.ONGOING, TxnState.PREPARE_EPOCH_FENCE},
    TxnState.COMPLETE_COMMIT: {TxnState.PREPARE_COMMIT},
    TxnState.COMPLETE_ABORT: {TxnState.PREPARE_ABORT},
    TxnState.DEAD: {TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT},
    TxnState.PREPARE_EPOCH_FENCE: {TxnState.ONGOING},
}


class InvalidTransition(Exception):
    pass


@dataclasses.dataclass(frozen=True)
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: frozenset = frozenset()           # {(topic, partition)}
    txn_start_ms: int = -1
    last_update_ms: int = -1
    last_producer_id: int = -1                    # before an epoch overflow changed the id
    # the epoch before the coordinator itself bumped it (timeout, fencing abort): that producer
    # may still recover with KIP-360's InitProducerId(expected id and epoch)
    last_producer_epoch: int = -1
    # KIP-890 part 2 at epoch overflow: the markers of the ending transaction still go out under
    # the old producer id (at epoch MAX_EPOCH + 1); the producer continues with this id, epoch 0
    next_producer_id: int = -1

    def transition(self, state: TxnState, now_ms: int, **changes) -> "TransactionMetadata":
        if self.state not in VALID_PREVIOUS[state]:
            raise InvalidTransition(f"{self.transactional_id}: {self.state.value} -> {state.value}")
        return dataclasses.replace(self, state=state, last_update_ms=now_ms, **changes)

    # -- persistence: the value of the `__transaction_state` record (msgpack) ---------------------

    def to_record(self) -> list:
        return [self.producer_id, self.producer_epoch, self.timeout_ms, self.state.value,
                sorted([t, p] for t, p in self.partitions), self.txn_start_ms, self.last_update_ms,
                self.last_producer_id, self.last_producer_epoch, self.next_producer_id]

    @classmethod
    def from_record(cls, transactional_id: str, value: list) -> "TransactionMetadata":
        pid, epoch, timeout, state, parts, start, update, last_pid, last_epoch = value[:9]
        next_pid = int(value[9]) if len(value) > 9 else -1      # records before KIP-890 part 2
        return cls(transactional_id, int(pid), int(epoch), int(timeout), TxnState(state),
                   frozenset((str(t), int(p)) for t, p in parts), int(start), int(update),
                   int(last_pid), int(last_epoch), next_pid)

    def producer_after_end(self) -> tuple[int, int]:
        """The producer id and epoch an EndTxn v5 answers with: what the producer uses next."""
        if self.next_producer_id >= 0:
            return self.next_producer_id, 0
        return self.producer_id, self.producer_epoch


@dataclasses.dataclass(frozen=True)
class InitResult:
    """What InitProducerId decided: `error`, or `metadata` to log (then answer with its id and
    epoch); `abort_first` means the ongoing transaction must be aborted (markers written) before
    the producer can retry — it is answered CONCURRENT_TRANSACTIONS meanwhile."""
    error: ErrorCode = ErrorCode.NONE
    metadata: TransactionMetadata | None = None
    needs_new_producer_id: bool = False
    abort_first: bool = False


def validate_timeout(timeout_ms: int, max_timeout_ms: int) -> ErrorCode:
    if timeout_ms <= 0 or timeout_ms > max_timeout_ms:
        return ErrorCode.INVALID_TRANSACTION_TIMEOUT
    return ErrorCode.NONE


def init_producer_id(meta: TransactionMetadata | None, transactional_id: str, timeout_ms: int,
                     expected_pid: int, expected_epoch: int, fresh_pid: int | None,
                     now_ms: int) -> InitResult:
    """InitProducerId with a transactional id. `fresh_pid` is a newly allocated producer id, or
    None — then a result asking for one (`needs_new_producer_id`) may come back."""
    if meta is None or meta.state is TxnState.DEAD:
        if fresh_pid is None:
            return InitResult(needs_new_producer_id=True)
        return InitResult(metadata=TransactionMetadata(
            transactional_id, fresh_pid, 0, timeout_ms, TxnState.EMPTY, frozenset(), -1, now_ms))
    if meta.state in PREPARING:
        return InitResult(ErrorCode.CONCURRENT_TRANSACTIONS)
    if expected_pid >= 0:
        # KIP-360: a producer recovering from an abortable error names its id and epoch; only the
        # current one (or the one just before a bump we made for it) may bump again
        current = (expected_pid, expected_epoch) == (meta.producer_id, meta.producer_epoch)
        previous = (expected_pid == meta.last_producer_id or expected_pid == meta.producer_id) and \
            expected_epoch == meta.last_producer_epoch and meta.last_producer_epoch >= 0
        if not (current or previous):
            return InitResult(ErrorCode.PRODUCER_FENCED)
    if meta.state is TxnState.ONGOING:
        # a newer producer fences the old one: abort its transaction under a bumped epoch
        return InitResult(ErrorCode.CONCURRENT_TRANSACTIONS, abort_first=True)
    if meta.producer_epoch >= MAX_EPOCH:
        if fresh_pid is None:
            return InitResult(needs_new_producer_id=True)
        return InitResult(metadata=meta.transition(
            TxnState.EMPTY, now_ms, producer_id=fresh_pid, producer_epoch=0, timeout_ms=timeout_ms,
            partitions=frozenset(), txn_start_ms=-1, last_producer_id=meta.producer_id,
            last_producer_epoch=meta.producer_epoch))
    return InitResult(metadata=meta.transition(
        TxnState.EMPTY, now_ms, producer_epoch=meta.producer_epoch + 1, timeout_ms=timeout_ms,
        partitions=frozenset(), txn_start_ms=-1, last_producer_epoch=-1))


def check_producer(meta: TransactionMetadata | None, producer_id: int,
                   producer_epoch: int) -> ErrorCode:
    if meta is None or meta.producer_id != producer_id:
        return ErrorCode.INVALID_PRODUCER_ID_MAPPING
    if producer_epoch != meta.producer_epoch:
        return ErrorCode.PRODUCER_FENCED
    return ErrorCode.NONE


def add_partitions(meta: TransactionMetadata | None, producer_id: int, producer_epoch: int,
                   partitions, now_ms: int) -> tuple[ErrorCode, TransactionMetadata | None]:
    """AddPartitionsToTxn / AddOffsetsToTxn. Returns (error, metadata to log or None when nothing
    changes)."""
    err = check_producer(meta, producer_id, producer_epoch)
    if err != ErrorCode.NONE:
        return err, None
    if meta.state in PREPARING:
        return ErrorCode.CONCURRENT_TRANSACTIONS, None
    new = frozenset(partitions)
    if meta.state is TxnState.ONGOING and new <= meta.partitions:
        return ErrorCode.NONE, None
    start = meta.txn_start_ms if meta.state is TxnState.ONGOING else now_ms
    return ErrorCode.NONE, meta.transition(TxnState.ONGOING, now_ms,
                                           partitions=meta.partitions | new, txn_start_ms=start)


def verify_partitions(meta: TransactionMetadata | None, producer_id: int, producer_epoch: int,
                      partitions) -> dict:
    """KIP-890 verify-only AddPartitionsToTxn: {partition: error}; NONE only for partitions of
    the producer's ongoing transaction."""
    err = check_producer(meta, producer_id, producer_epoch)
    out = {}
    for tp in partitions:
        if err != ErrorCode.NONE:
            out[tp] = err
        elif meta.state is TxnState.ONGOING and tp in meta.partitions:
            out[tp] = ErrorCode.NONE
        else:
            out[tp] = ErrorCode.INVALID_TXN_STATE
    return out


@dataclasses.dataclass(frozen=True)
class EndResult:
    """What EndTxn decided. `metadata` is to be logged (None: nothing changes — a retry of an
    EndTxn already done answers NONE); `needs_new_producer_id`: ask again with a fresh id."""
    error: ErrorCode = ErrorCode.NONE
    metadata: TransactionMetadata | None = None
    needs_new_producer_id: bool = False


def end_txn(meta: TransactionMetadata | None, producer_id: int, producer_epoch: int,
            commit: bool, now_ms: int, bump: bool = False,
            fresh_pid: int | None = None) -> EndResult:
    """EndTxn. With `bump` (EndTxn v5, KIP-890 part 2) the epoch goes up by one for the markers
    and for everything the producer does next: a write of the finished transaction retried late
    carries the old epoch and is fenced by the partition instead of landing in the next
    transaction (the hole Jepsen found: part 1's verification alone lets it through once the
    same partition is added again)."""
    if meta is None or (producer_id != meta.producer_id and producer_id != meta.last_producer_id):
        return EndResult(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
    s = meta.state
    done_same = (s is TxnState.COMPLETE_COMMIT and commit) or \
        (s is TxnState.COMPLETE_ABORT and not commit)
    preparing_same = (s is TxnState.PREPARE_COMMIT and commit) or \
        (s is TxnState.PREPARE_ABORT and not commit)
    if bump and (done_same or preparing_same) and producer_epoch == meta.last_producer_epoch \
            and producer_id in (meta.producer_id, meta.last_producer_id):
        # the producer retries the EndTxn whose answer (with the bumped epoch) it did not get
        return EndResult(ErrorCode.NONE if done_same else ErrorCode.CONCURRENT_TRANSACTIONS)
    if producer_id != meta.producer_id:
        return EndResult(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
    if producer_epoch != meta.producer_epoch:
        return EndResult(ErrorCode.PRODUCER_FENCED)
    if s is TxnState.ONGOING:
        target = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        if not bump:
            return EndResult(metadata=meta.transition(target, now_ms))
        if meta.producer_epoch < MAX_EPOCH:
            return EndResult(metadata=meta.transition(
                target, now_ms, producer_epoch=meta.producer_epoch + 1,
                last_producer_epoch=meta.producer_epoch))
        if fresh_pid is None:
            return EndResult(needs_new_producer_id=True)
        return EndResult(metadata=meta.transition(
            target, now_ms, producer_epoch=meta.producer_epoch + 1,
            last_producer_epoch=meta.producer_epoch, next_producer_id=fresh_pid))
    if done_same and not bump:
        return EndResult()
    if preparing_same or s is TxnState.PREPARE_EPOCH_FENCE:
        return EndResult(ErrorCode.CONCURRENT_TRANSACTIONS)
    return EndResult(ErrorCode.INVALID_TXN_STATE)


def fence_and_abort(meta: TransactionMetadata, now_ms: int) -> TransactionMetadata:
    """An Ongoing transaction aborted by the coordinator (a newer producer, a timeout, an
    operator): the epoch is bumped so the old producer's writes and EndTxn are fenced."""
    fenced = meta.transition(TxnState.PREPARE_EPOCH_FENCE, now_ms)
    if meta.producer_epoch >= MAX_EPOCH:
        # no room to bump: abort under the current epoch (Kafka does the same)
        return fenced.transition(TxnState.PREPARE_ABORT, now_ms)
    return fenced.transition(TxnState.PREPARE_ABORT, now_ms,
                             producer_epoch=meta.producer_epoch + 1,
                             last_producer_epoch=meta.producer_epoch)


def complete(meta: TransactionMetadata, now_ms: int) -> TransactionMetadata:
    """Every marker of a PrepareCommit/PrepareAbort transaction is written."""
    target = TxnState.COMPLETE_COMMIT if meta.state is TxnState.PREPARE_COMMIT else \
        TxnState.COMPLETE_ABORT
    if meta.next_producer_id >= 0:
        # epoch overflow under KIP-890 part 2: the markers are out, the producer moves to its
        # new id (the old one is remembered for a retried EndTxn)
        return meta.transition(target, now_ms, partitions=frozenset(), txn_start_ms=-1,
                               producer_id=meta.next_producer_id, producer_epoch=0,
                               last_producer_id=meta.producer_id, next_producer_id=-1)
    return meta.transition(target, now_ms, partitions=frozenset(), txn_start_ms=-1)


def timed_out(meta: TransactionMetadata, now_ms: int) -> bool:
    return meta.state is TxnState.ONGOING and meta.txn_start_ms >= 0 and \
        now_ms - meta.txn_start_ms > meta.timeout_ms
