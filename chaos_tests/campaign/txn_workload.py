"""The campaign's transactional workload: one transactional.id, transactions one after
another, each writing 1-4 values `t<n>-<i>` to random partitions of its topic, one in five
aborted on purpose. Each transaction's outcome as the client learnt it goes into a `Txn`
(committed / aborted / in doubt); whenever the client is left unsure (a retriable commit
failing until its deadline, a fatal error) the transaction is in doubt and a new instance of
the transactional.id takes over (its InitProducerId finishes or aborts the old one first).

Judged by checkers/txn.py (no aborted or partial transaction read, none committed lost) and by
checkers/elle.py's cycle check over ww edges: transactions of one producer run one after
another, so each must follow the previous one in every partition both wrote (a G0 cycle would
mean the log interleaved two of them).
"""

from __future__ import annotations

import random
import threading
import time

from chaos_tests.checkers.elle import TxnOp
from chaos_tests.checkers.ops import FAIL, INFO, OK, OpLog
from chaos_tests.checkers.txn import ABORTED, COMMITTED, IN_DOUBT, Txn
from chaos_tests.live.txn_clients import ABORTABLE, RETRIABLE, ConfluentTxn, TxnFailed


class TxnWorker:
    def __init__(self, bootstrap: str, topic: str, partitions: int, log: OpLog, seed: int):
        self.bootstrap, self.topic, self.partitions, self.log = bootstrap, topic, partitions, log
        self.rng = random.Random(seed)
        self.tid = f"camp-txn-{topic}"
        self.txns: list[Txn] = []
        self.writes: dict[str, list[tuple[int, str]]] = {}
        self.client = None
        self.notes: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="campaign-txn")

    def start(self) -> "TxnWorker":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(120)

    def _client(self):
        while self.client is None and not self._stop.is_set():
            try:
                self.client = ConfluentTxn(self.bootstrap, self.tid, 10000)
            except Exception as exc:          # noqa: BLE001 - init fails while faults last
                self.notes.append(f"init_transactions: {exc}")
                self._stop.wait(0.5)
        return self.client

    def _drop_client(self) -> None:
        if self.client is not None:
            self.client.discard()
            self.client = None

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            client = self._client()
            if client is None:
                return
            n += 1
            tid = f"T{n}"
            writes = [(self.rng.randrange(self.partitions), f"t{n}-{i}")
                      for i in range(self.rng.randint(1, 4))]
            self.writes[tid] = writes
            index = self.log.invoke("txn", "txn", tid, time.monotonic())
            outcome = self._one(client, writes, abort=self.rng.random() < 0.2)
            self.txns.append(Txn(tid, outcome, [v for _, v in writes]))
            kind = {COMMITTED: OK, ABORTED: FAIL, IN_DOUBT: INFO}[outcome]
            self.log.complete(index, kind, time.monotonic(), result=outcome)
            if outcome == IN_DOUBT:
                self._drop_client()

    def _one(self, client, writes, abort: bool) -> str:
        try:
            client.begin()
            for partition, value in writes:
                client.produce(self.topic, value.encode(), partition)
            if abort:
                client.abort(30)
                return ABORTED
            for _ in range(3):
                try:
                    client.commit(30)
                    return COMMITTED
                except TxnFailed as exc:
                    if exc.kind != RETRIABLE:
                        raise
            return IN_DOUBT
        except TxnFailed as exc:
            if exc.kind == ABORTABLE:
                try:
                    client.abort(30)
                    return ABORTED
                except TxnFailed:
                    pass
            return IN_DOUBT
        except Exception as exc:          # noqa: BLE001 - BufferError, KafkaException on begin
            self.notes.append(f"transaction: {type(exc).__name__}: {exc}")
            return IN_DOUBT

    def elle_txns(self, final_values: set[str]) -> list[TxnOp]:
        """The transactions as dependency-graph nodes: committed ones, and in-doubt ones that
        the final log shows committed (all-or-nothing is txn.py's to judge)."""
        out = []
        for t in self.txns:
            landed = t.outcome == COMMITTED or (t.outcome == IN_DOUBT and
                                                 any(v in final_values for v in t.values))
            out.append(TxnOp(t.id, writes=list(self.writes[t.id]), committed=landed))
        return out
