"""Transactional producers of two client libraries behind one small interface, so a fault test
can drive either (confluent-kafka / librdkafka and kafka-python differ in how they report a
failed commit: error flags on the exception vs. the transaction manager's state).

    client = CLIENTS["confluent"](bootstrap, transactional_id, transaction_timeout_ms)
    client.begin(); client.produce(topic, b"v", 0, on_done); client.flush(30)
    client.commit(30)           # raises TxnFailed(kind) with kind retriable/abortable/fatal
    client.abort(30)

The constructor runs init_transactions (fencing older instances of the id).
"""

from __future__ import annotations

import threading
from typing import Callable

from confluent_kafka import KafkaException, Producer

RETRIABLE, ABORTABLE, FATAL = "retriable", "abortable", "fatal"


class TxnFailed(Exception):
    def __init__(self, kind: str, name: str):
        super().__init__(f"{kind}: {name}")
        self.kind, self.name = kind, name


class ConfluentTxn:
    name = "confluent"

    def __init__(self, bootstrap: str, tid: str, timeout_ms: int):
        self.p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid,
                           "transaction.timeout.ms": timeout_ms, "linger.ms": 2,
                           "reconnect.backoff.max.ms": 500})
        self.p.init_transactions(90)

    def begin(self) -> None:
        self.p.begin_transaction()

    def produce(self, topic: str, value: bytes, partition: int,
                on_done: Callable[[bool], None] | None = None) -> None:
        cb = None if on_done is None else (lambda err, msg: on_done(err is None))
        self.p.produce(topic, value, partition=partition, on_delivery=cb)
        self.p.poll(0)

    def flush(self, timeout_s: float) -> int:
        return self.p.flush(timeout_s)

    @staticmethod
    def _failed(exc: KafkaException) -> TxnFailed:
        err = exc.args[0]
        if err.fatal():
            return TxnFailed(FATAL, err.name())
        if err.txn_requires_abort():
            return TxnFailed(ABORTABLE, err.name())
        return TxnFailed(RETRIABLE if err.retriable() else FATAL, err.name())

    def commit(self, timeout_s: float) -> None:
        try:
            self.p.commit_transaction(timeout_s)
        except KafkaException as exc:
            raise self._failed(exc) from None

    def abort(self, timeout_s: float) -> None:
        try:
            self.p.abort_transaction(timeout_s)
        except KafkaException as exc:
            raise self._failed(exc) from None

    def discard(self) -> None:
        self.p.purge()


class KafkaPythonTxn:
    """kafka-python's commit/abort block without a deadline: they run on a helper thread
    joined with one (a call that never returns counts as fatal). That happens: kafka-python
    3.0.12 drops its EndTxn when the reconnect to the coordinator fails right after a cut (it
    re-enqueues FindCoordinator only, logs "Going to back off and retry" and never sends the
    EndTxn again), so commit_transaction waits forever although the transaction may well have
    been committed: the test records it in doubt."""

    name = "kafka-python"

    def __init__(self, bootstrap: str, tid: str, timeout_ms: int):
        from kafka import KafkaProducer
        self.p = KafkaProducer(bootstrap_servers=bootstrap.split(","), transactional_id=tid,
                               transaction_timeout_ms=timeout_ms, linger_ms=2,
                               reconnect_backoff_max_ms=500, request_timeout_ms=15000,
                               max_block_ms=90000)
        self.p.init_transactions()

    def begin(self) -> None:
        self.p.begin_transaction()

    def produce(self, topic: str, value: bytes, partition: int,
                on_done: Callable[[bool], None] | None = None) -> None:
        fut = self.p.send(topic, value, partition=partition)
        if on_done is not None:
            fut.add_callback(lambda _meta: on_done(True))
            fut.add_errback(lambda _exc: on_done(False))

    def flush(self, timeout_s: float) -> int:
        try:
            self.p.flush(timeout_s)
        except Exception:                 # noqa: BLE001 - KafkaTimeoutError: some undelivered
            return 1
        return 0

    def _call(self, fn, timeout_s: float) -> None:
        box: dict = {}

        def run():
            try:
                fn()
            except BaseException as exc:  # noqa: BLE001 - classified below
                box["exc"] = exc
            box["done"] = True
        t = threading.Thread(target=run, daemon=True, name="kafka-python-txn")
        t.start()
        t.join(timeout_s)
        if "done" not in box:
            raise TxnFailed(FATAL, "no answer in time")
        exc = box.get("exc")
        if exc is None:
            return
        tm = self.p._transaction_manager
        if tm.has_fatal_error():
            raise TxnFailed(FATAL, type(exc).__name__)
        if tm.has_abortable_error():
            raise TxnFailed(ABORTABLE, type(exc).__name__)
        raise TxnFailed(RETRIABLE if getattr(exc, "retriable", False) else FATAL,
                        type(exc).__name__)

    def commit(self, timeout_s: float) -> None:
        self._call(self.p.commit_transaction, timeout_s)

    def abort(self, timeout_s: float) -> None:
        self._call(self.p.abort_transaction, timeout_s)

    def discard(self) -> None:
        try:
            self.p.close(timeout=0)
        except Exception:                 # noqa: BLE001 - a fenced instance may refuse
            pass


CLIENTS = {c.name: c for c in (ConfluentTxn, KafkaPythonTxn)}
