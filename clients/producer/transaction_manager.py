"""The producer's side of a transaction: a pure state machine, no I/O (the producer does that).

States and transitions, as Kafka's Java `TransactionManager`:

    UNINITIALIZED ──init_transactions──▶ INITIALIZING ──InitProducerId ok──▶ READY
    READY ──begin_transaction──▶ IN_TRANSACTION
    IN_TRANSACTION ──commit_transaction──▶ COMMITTING ──EndTxn ok──▶ READY
    IN_TRANSACTION | ABORTABLE_ERROR ──abort_transaction──▶ ABORTING ──EndTxn ok──▶ READY
    IN_TRANSACTION | COMMITTING ──a batch or request fails──▶ ABORTABLE_ERROR
    any ──fenced / not authorised──▶ FATAL_ERROR (terminal: close the producer)

Why a separate machine: every public call and the sender ask it the same questions (may I send
to this partition? which partitions must be added before their first batch? did anything fail
in this transaction?), and answering them from one place keeps misuse errors immediate and
clear instead of turning into a hang.

Partitions: a record's partition is *pending* from its first append in a transaction until
AddPartitionsToTxn for it succeeds; the sender adds every pending partition in one request per
drain (as Java batches them) and sends a partition's batches only once it is *added*. A
transaction that added no partition and no offsets ends locally, without EndTxn.
"""

from __future__ import annotations

import enum

from wire.errors import ErrorCode, KafkaError


class State(enum.Enum):
    UNINITIALIZED = "Uninitialized"
    INITIALIZING = "Initializing"
    READY = "Ready"
    IN_TRANSACTION = "InTransaction"
    COMMITTING = "CommittingTransaction"
    ABORTING = "AbortingTransaction"
    ABORTABLE_ERROR = "AbortableError"
    FATAL_ERROR = "FatalError"


_ALLOWED: dict[State, set[State]] = {
    State.UNINITIALIZED: {State.INITIALIZING},
    State.INITIALIZING: {State.READY, State.UNINITIALIZED},
    State.READY: {State.IN_TRANSACTION, State.INITIALIZING},
    State.IN_TRANSACTION: {State.COMMITTING, State.ABORTING, State.ABORTABLE_ERROR},
    State.COMMITTING: {State.READY, State.ABORTABLE_ERROR},
    State.ABORTING: {State.READY, State.INITIALIZING},
    State.ABORTABLE_ERROR: {State.ABORTING, State.ABORTABLE_ERROR},
    State.FATAL_ERROR: set(),
}

# Errors after which this producer instance can do nothing more with its transactional.id:
# another instance took it over (fencing), or the principal may not use it at all.
FATAL_CODES = frozenset({ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH,
                         ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                         ErrorCode.INVALID_PRODUCER_ID_MAPPING, ErrorCode.UNSUPPORTED_VERSION,
                         ErrorCode.CLUSTER_AUTHORIZATION_FAILED})


class TransactionStateError(KafkaError):
    """A transactional call made in a state that does not allow it (misuse by the caller, e.g.
    commit without begin, or send outside a transaction). Maps to INVALID_TXN_STATE."""

    code = ErrorCode.INVALID_TXN_STATE


class TransactionAbortedError(KafkaError):
    """A record of a transaction that was aborted (or had to be) before the record was sent."""

    code = ErrorCode.TRANSACTION_ABORTABLE


def is_fatal(exc_or_code) -> bool:
    code = exc_or_code if isinstance(exc_or_code, int) else getattr(exc_or_code, "code", None)
    return code in FATAL_CODES


class TransactionManager:
    def __init__(self, transactional_id: str, transaction_timeout_ms: int):
        if not transactional_id:
            raise ValueError("transactional.id must not be empty")
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.state = State.UNINITIALIZED
        self.last_error: BaseException | None = None
        self.added: set = set()         # partitions the coordinator has in this transaction
        self.pending: set = set()       # appended to, not yet added
        self.adding: set = set()        # in an AddPartitionsToTxn request now
        self.offsets_added = False      # AddOffsetsToTxn done in this transaction
        # a batch with a sequence number failed in this transaction: after the abort the broker
        # would see a sequence gap, so the producer bumps its epoch (KIP-360) before the next one
        self.needs_epoch_bump = False

    # -- transitions -----------------------------------------------------------------------------

    def _to(self, new: State) -> None:
        if new not in _ALLOWED[self.state]:
            raise TransactionStateError(
                f"transactional.id {self.transactional_id!r}: cannot go from {self.state.value} "
                f"to {new.value}")
        self.state = new

    def _raise_if_fatal(self) -> None:
        if self.state is State.FATAL_ERROR:
            raise self.last_error if isinstance(self.last_error, KafkaError) else \
                TransactionStateError(f"producer is in a fatal state: {self.last_error}")

    def start_init(self) -> None:
        self._raise_if_fatal()
        if self.state is State.INITIALIZING:
            return          # a retried init_transactions after a timeout resumes
        if self.state not in (State.UNINITIALIZED, State.READY, State.ABORTING):
            raise TransactionStateError(
                f"init_transactions() in state {self.state.value}: it must be the first call")
        self._to(State.INITIALIZING)

    def init_done(self) -> None:
        self._to(State.READY)
        self.needs_epoch_bump = False

    def init_failed(self) -> None:
        if self.state is State.INITIALIZING:
            self.state = State.UNINITIALIZED

    def begin(self) -> None:
        self._raise_if_fatal()
        if self.state is State.UNINITIALIZED:
            raise TransactionStateError("begin_transaction() before init_transactions()")
        if self.state is not State.READY:
            raise TransactionStateError(
                f"begin_transaction() in state {self.state.value}: the previous transaction "
                "must be committed or aborted first")
        self._to(State.IN_TRANSACTION)
        self.added.clear()
        self.pending.clear()
        self.adding.clear()
        self.offsets_added = False
        self.last_error = None

    def check_can_send(self) -> None:
        """Called for every record of a transactional producer."""
        if self.state is State.IN_TRANSACTION:
            return
        self._raise_if_fatal()
        if self.state is State.ABORTABLE_ERROR:
            raise TransactionAbortedError(
                f"the transaction failed and must be aborted: {self.last_error}")
        raise TransactionStateError(
            f"send() outside a transaction (state {self.state.value}): call "
            "begin_transaction() first")

    def check_can_add_offsets(self) -> None:
        self.check_can_send()

    def begin_commit(self) -> None:
        self._raise_if_fatal()
        if self.state is State.ABORTABLE_ERROR:
            raise TransactionAbortedError(
                f"cannot commit: the transaction failed ({self.last_error}); abort it")
        if self.state is not State.IN_TRANSACTION:
            raise TransactionStateError(
                f"commit_transaction() in state {self.state.value}: no transaction begun")
        self._to(State.COMMITTING)

    def begin_abort(self) -> None:
        self._raise_if_fatal()
        if self.state is State.ABORTING:
            return          # a retried abort after a timeout resumes
        if self.state not in (State.IN_TRANSACTION, State.ABORTABLE_ERROR):
            raise TransactionStateError(
                f"abort_transaction() in state {self.state.value}: no transaction begun")
        self._to(State.ABORTING)

    def end_done(self) -> None:
        self.added.clear()
        self.pending.clear()
        self.adding.clear()
        self.offsets_added = False
        self._to(State.READY)

    def set_abortable(self, exc: BaseException) -> None:
        """A batch or request of this transaction failed: only abort can follow."""
        if is_fatal(exc):
            self.set_fatal(exc)
            return
        if self.state in (State.IN_TRANSACTION, State.COMMITTING):
            self.last_error = exc           # the first failure is the one worth reporting
            self.state = State.ABORTABLE_ERROR

    def set_fatal(self, exc: BaseException) -> None:
        self.last_error = exc
        self.state = State.FATAL_ERROR

    @property
    def in_error(self) -> bool:
        return self.state in (State.ABORTABLE_ERROR, State.FATAL_ERROR)

    @property
    def started(self) -> bool:
        """Whether the coordinator knows about this transaction (then EndTxn is needed)."""
        return bool(self.added or self.offsets_added or self.adding)

    # -- partitions ------------------------------------------------------------------------------

    def maybe_add_partition(self, tp) -> None:
        if tp not in self.added and tp not in self.adding:
            self.pending.add(tp)

    def is_added(self, tp) -> bool:
        return tp in self.added

    def take_pending(self) -> list:
        """The partitions to put in the next AddPartitionsToTxn (one request per drain)."""
        if self.adding or not self.pending:
            return []
        tps = sorted(self.pending)
        self.adding.update(tps)
        self.pending.clear()
        return tps

    def partitions_added(self, tps) -> None:
        for tp in tps:
            self.adding.discard(tp)
            self.added.add(tp)

    def partitions_retry(self, tps) -> None:
        for tp in tps:
            self.adding.discard(tp)
            self.pending.add(tp)
