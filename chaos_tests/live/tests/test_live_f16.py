"""Fault F16 for transactions: the client is cut off with batches in flight (issue #11).

A transactional confluent-kafka producer talks to the cluster only through the per-broker client
proxies (`ClientProxiedCluster`). Each round it begins a transaction and writes 9 values over 3
partitions; then the proxy cuts it off (reset, silent blackhole both ways, or only the brokers'
answers dropped; from every broker or only one partition's leader) either while its produce
batches are in flight or just after it sent the commit:

- `inflight-restart`: the cut heals and, racing the old instance's retries, a new instance of
  the same transactional.id runs init_transactions, which fences the old one and aborts its
  transaction (never committed: ABORTED, none of it may ever be read);
- `commit-restart`: the same while commit_transaction runs: the old instance's commit may or may
  not have reached the coordinator (COMMITTED if it returned, otherwise IN DOUBT);
- `inflight-heal` / `commit-heal`: the cut heals and the same instance carries on: flush and
  commit (retrying a retriable failure), abort when the error asks for it (ABORTED once
  abort_transaction returns), a new instance after a fatal one (IN DOUBT).
- `inflight-timeout`: an instance with a 2 s transaction.timeout.ms is cut off with batches in
  flight for longer than that: the coordinator aborts the transaction on its own; after the heal
  the client's retries and commit must not bring any of it back (the Jepsen scenario KIP-890
  closes: a late batch of an aborted transaction must not join a later one or be read).

After every round a clean transaction commits (a later commit must never lose or expose an
earlier transaction). A read_committed reader runs throughout; at the end, once no transaction
is open (LSO = HW everywhere), a final read_committed pass. Checkers (chaos_tests/checkers/txn):
no aborted read, no lost committed transaction, all-or-nothing, no duplicate, nothing read that
was not written, nothing read during the run that the final log does not hold there.
Default: 10 rounds (each scenario twice); `RAFTKA_SOAK=1` adds a soak of RAFTKA_F16_ROUNDS (default 40).
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time

import pytest

from chaos_tests.checkers import ABORTED, COMMITTED, IN_DOUBT, History, Txn, assert_transactions
from chaos_tests.live.admin import create_topic, full_isr, leader_of, wait_for
from chaos_tests.live.cluster import ClientProxiedCluster
from chaos_tests.live.txn_clients import ABORTABLE, CLIENTS, RETRIABLE, TxnFailed
from chaos_tests.live.workload import Reader, final_read_committed
from clients.cli.dev import BROKER_IDS

pytestmark = pytest.mark.live
PARTITIONS = 3
SCENARIOS = ("inflight-restart", "commit-restart", "inflight-heal", "commit-heal",
             "inflight-timeout")
SHORT_TXN_TIMEOUT_MS = 2000
CUTS = ("cut", "blackhole", "drop")
OVERRIDES = {"broker.heartbeat.interval.ms": "500", "replica.lag.time.max.ms": "3000",
             "transaction.state.log.num.partitions": "3",
             "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000"}


@pytest.fixture(autouse=True)
def _quiet_kafka_python():
    # kafka-python logs every retry at WARNING; a failing round's report must show the
    # assertion, not pages of retries from the fenced instances kept until the end
    logger = logging.getLogger("kafka")
    level, logger.level = logger.level, logging.ERROR
    yield
    logger.setLevel(level)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = ClientProxiedCluster(tmp_path_factory.mktemp("f16"), OVERRIDES,
                             {"broker.session.timeout.ms": "3000"})
    try:
        c.start()
        yield c
    finally:
        c.stop()


class Rounds:
    """One transactional.id through the rounds: the live instance, the fenced ones kept until
    the end (destroying a librdkafka handle mid-retry can block), the transactions' record."""

    def __init__(self, cluster: ClientProxiedCluster, topic: str, tid: str, seed: int,
                 client: str = "confluent"):
        self.cluster, self.topic, self.tid = cluster, topic, tid
        self.make = CLIENTS[client]
        self.rng = random.Random(seed)
        self.txns: list[Txn] = []
        self.zombies: list = []
        self.counts: dict[str, int] = {}
        self.log: list[str] = []
        self.last_error = None
        self.producer = self.new_instance()

    def new_instance(self, txn_timeout_ms: int = 15000):
        return self.make(self.cluster.bootstrap, self.tid, txn_timeout_ms)

    # -- a transaction's end, as the client learns it ---------------------------------------------

    def commit(self, p) -> str:
        """Commit, retrying what the client calls retriable; abort what it says needs aborting.
        Returns the outcome; after IN_DOUBT the instance is unusable (replaced by the caller)."""
        for _ in range(5):
            try:
                p.commit(30)
                return COMMITTED
            except TxnFailed as exc:
                self.last_error = exc.name
                if exc.kind == RETRIABLE:
                    continue
                if exc.kind == ABORTABLE:
                    try:
                        p.abort(30)
                        return ABORTED
                    except TxnFailed:
                        return IN_DOUBT
                return IN_DOUBT
        return IN_DOUBT

    # -- faults -----------------------------------------------------------------------------------

    def cut(self, kind: str, brokers: list[int]) -> None:
        {"cut": self.cluster.cut_clients, "blackhole": self.cluster.blackhole_clients,
         "drop": self.cluster.drop_responses}[kind](*brokers)

    def round(self, r: int) -> str:
        rng = self.rng
        # every scenario in turn (a short default run covers them all), the cut at random
        scenario, kind = SCENARIOS[r % len(SCENARIOS)], rng.choice(CUTS)
        if scenario == "inflight-timeout":
            # the cut outlasts the transaction timeout: the coordinator aborts the transaction
            # (and bumps the epoch) while the client's batches are still in flight
            self.zombies.append(self.producer)
            self.producer = self.new_instance(SHORT_TXN_TIMEOUT_MS)
        brokers = list(BROKER_IDS) if rng.random() < 0.6 else \
            [leader_of(self.cluster.direct_bootstrap, self.topic, rng.randrange(PARTITIONS))]
        p = self.producer
        self.last_error = None
        values = [f"r{r}-{i}" for i in range(9)]
        p.begin()
        result: dict[str, str] = {}
        committer = None
        delivered = []
        if scenario.startswith("inflight"):
            for i, v in enumerate(values):
                p.produce(self.topic, v.encode(), i % PARTITIONS, delivered.append)
            time.sleep(rng.uniform(0, 0.005))
        else:
            for i, v in enumerate(values):
                p.produce(self.topic, v.encode(), i % PARTITIONS)
            assert p.flush(30) == 0, "batches not delivered before the commit"
            committer = threading.Thread(target=lambda: result.update(c=self.commit(p)))
            committer.start()
            time.sleep(rng.uniform(0, 0.003))
        # did the cut land before the client had its answers? (statistics: a round whose
        # commit or deliveries completed first tests less)
        early = (len(delivered) < len(values)) if committer is None else "c" not in result
        self.cut(kind, brokers)
        if scenario == "inflight-timeout":
            # past the timeout and the coordinator's next abort sweep (every 1 s here)
            time.sleep(SHORT_TXN_TIMEOUT_MS / 1000 + rng.uniform(1.5, 2.5))
        else:
            time.sleep(rng.uniform(0.3, 1.0))
        self.cluster.heal_clients()
        if scenario.endswith("restart"):
            # the new instance races the old one's retries; its init fences the old epoch
            self.producer = self.new_instance()
            self.zombies.append(p)
            if committer is None:
                outcome = ABORTED                 # never committed: the init aborted it
            else:
                committer.join(120)
                outcome = COMMITTED if result.get("c") == COMMITTED else IN_DOUBT
        elif committer is None:
            outcome = IN_DOUBT if p.flush(60) else self.commit(p)
        else:
            committer.join(120)
            outcome = result.get("c", IN_DOUBT)
        if outcome == IN_DOUBT and not scenario.endswith("restart") or \
                scenario == "inflight-timeout":
            self.zombies.append(p)
            self.producer = self.new_instance()
        self.txns.append(Txn(f"r{r} {scenario}/{kind}@{brokers}", outcome, values))
        self.counts[outcome] = self.counts.get(outcome, 0) + 1
        self.counts["cut before answers"] = self.counts.get("cut before answers", 0) + early
        self.log.append(f"{self.txns[-1].id}: {outcome}{'' if early else ' (cut late)'}"
                        f"{f' after {self.last_error}' if self.last_error else ''}")
        self.clean(r)
        return outcome

    def clean(self, r: int) -> None:
        """A transaction with no fault: it must commit, and stay visible."""
        values = [f"r{r}-clean-{i}" for i in range(3)]
        self.producer.begin()
        for i, v in enumerate(values):
            self.producer.produce(self.topic, v.encode(), i % PARTITIONS)
        outcome = self.commit(self.producer)
        self.txns.append(Txn(f"r{r} clean", outcome, values))
        assert outcome == COMMITTED, \
            f"a transaction without faults ended {outcome} (last error: {self.last_error})"


def f16_rounds(cluster, topic: str, rounds: int, seed: int, tmp_path,
               client: str = "confluent") -> dict:
    create_topic(cluster.direct_bootstrap, topic, PARTITIONS)
    wait_for(lambda: full_isr(cluster.direct_bootstrap, topic, PARTITIONS), 30,
             "the topic has leaders and full ISRs")
    history = History()
    reader = Reader(cluster.direct_bootstrap, topic, PARTITIONS, history, name="rc",
                    isolation_level="read_committed").start()
    t0 = time.monotonic()
    run = Rounds(cluster, topic, f"tx-{topic}", seed, client)
    try:
        for r in range(rounds):
            run.round(r)
    finally:
        cluster.heal()
        reader.stop()
    seconds = round(time.monotonic() - t0, 1)
    final_read_committed(cluster.direct_bootstrap, topic, PARTITIONS, history)
    assert_transactions(run.txns, history, dump_to=tmp_path / f"{topic}.jsonl")
    committed = sum(len(t.values) for t in run.txns if t.outcome == COMMITTED)
    assert len(history.final_reads) >= committed > 0
    stats = {"rounds": rounds, "outcomes": run.counts, "seconds": seconds,
             "final_records": len(history.final_reads), "live_reads": len(history.consumes)}
    final = {op.value for op in history.final_reads}
    landed = ["landed" if t.values[0] in final else "not in the log"
              for t in run.txns if "clean" not in t.id]
    print(f"{topic}: {stats}\n  " + "\n  ".join(f"{line}; {where}"
                                                for line, where in zip(run.log, landed)))
    for z in run.zombies:
        z.discard()
    run.zombies.clear()
    return stats


def test_f16_transactional_client_cut_off_with_batches_in_flight(cluster, tmp_path):
    stats = f16_rounds(cluster, "f16", rounds=10, seed=16, tmp_path=tmp_path)
    assert stats["rounds"] >= 10


def test_f16_kafka_python_transactional_client_cut_off(cluster, tmp_path):
    stats = f16_rounds(cluster, "f16-kp", rounds=5, seed=61, tmp_path=tmp_path,
                       client="kafka-python")
    assert stats["rounds"] >= 5


@pytest.mark.slow
@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_f16_soak(cluster, tmp_path, client):
    f16_rounds(cluster, f"f16-soak-{client}",
               rounds=int(os.environ.get("RAFTKA_F16_ROUNDS", "40")),
               seed=int(os.environ.get("RAFTKA_CHAOS_SEED", "1616")), tmp_path=tmp_path,
               client=client)
