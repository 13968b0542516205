"""One campaign round against a live cluster: a fresh topic, the workloads, the nemesis
schedule (each fault injected, held, healed, in order), a full heal, the verification reads,
then every checker.

The nemesis (nemesis.py) applies schedule.py's fault classes.
"""

from __future__ import annotations

import dataclasses
import time

from chaos_tests.campaign.nemesis import Nemesis, run_schedule, _sleep_until
from chaos_tests.campaign.schedule import FaultStep
from chaos_tests.campaign.workloads import (CONFIG, epoch_reader, KeyedProducer, MetadataWorker,
                                            final_read_with_epochs)
from chaos_tests.campaign.group_workload import GroupWorker
from chaos_tests.campaign.scale import controllers_agree, drop_topics, replicas_converged
from chaos_tests.campaign.txn_workload import TxnWorker
from chaos_tests.checkers import History, check_all, check_transactions
from chaos_tests.checkers.checks import CheckResult
from chaos_tests.checkers.elle import check_cycles, final_log_of
from chaos_tests.checkers.groups import check_groups
from chaos_tests.checkers.linear import check_linearizable
from chaos_tests.checkers.logs import key_order, offsets_dense
from chaos_tests.checkers.ops import OpLog
from chaos_tests.live.admin import create_topic, full_isr, wait_for
from chaos_tests.live.isr_report import controller_image, isr_report
from chaos_tests.live.workload import final_read_committed

PARTITIONS = 3


@dataclasses.dataclass
class RoundResult:
    round: int
    seed: int
    schedule: list[FaultStep]
    checks: list[CheckResult]
    history: History
    log: OpLog
    txn_history: History                    # the transactional topic's reads
    started: float                          # monotonic time the workload began
    windows: list[tuple[float, float, str]]  # fault windows as they really ran (relative s)
    notes: list[str] = dataclasses.field(default_factory=list)
    counts: dict = dataclasses.field(default_factory=dict)   # operations outside the OpLog

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)


def run_round(cluster, round_no: int, seed: int, schedule: list[FaultStep],
              round_s: float, partitions: int = PARTITIONS, idle: int = 0) -> RoundResult:
    """`partitions`: the keyed topic's (the producer's keys spread over them); `idle`: how
    many partitions the cluster holds besides the round's (the convergence deadlines grow
    with them)."""
    topic, config_topic = f"camp-{round_no}-{seed}", f"camp-cfg-{round_no}-{seed}"
    txn_topic = f"camp-txn-{round_no}-{seed}"
    for t, n in ((topic, partitions), (config_topic, PARTITIONS), (txn_topic, PARTITIONS)):
        wait_for(lambda t=t, n=n: create_topic(cluster.bootstrap, t, n, exist_ok=True) or True,
                 60, f"topic {t} created")
    wait_for(lambda: full_isr(cluster.bootstrap, topic, partitions), 60 + 10 * idle / 1000,
             "a full ISR", describe=lambda: _isr_state(cluster, topic))
    history, log, notes, txn_history = History(), OpLog(), [], History()
    names = [f"camp-meta-{round_no}-{seed}-{i}" for i in range(3)]
    producer = KeyedProducer(cluster.bootstrap, topic, history, log, keys=max(10, partitions))
    reader = epoch_reader(cluster.bootstrap, topic, partitions, history)
    admin = MetadataWorker(cluster.bootstrap, names, config_topic, log, seed)
    txn = TxnWorker(cluster.bootstrap, txn_topic, PARTITIONS, log, seed)
    txn_reader = epoch_reader(cluster.bootstrap, txn_topic, PARTITIONS, txn_history)
    group = GroupWorker(cluster.bootstrap, topic, f"camp-g-{round_no}-{seed}")
    nemesis = Nemesis(cluster)
    t0 = time.monotonic()
    for w in (producer, reader, admin, txn, txn_reader, group):
        w.start()
    try:
        windows = run_schedule(nemesis, schedule, t0, notes)
        _sleep_until(t0 + round_s)
    finally:
        nemesis.heal_all()
        notes += nemesis.notes
    admin.stop()
    txn.stop()
    wait_for(lambda: full_isr(cluster.bootstrap, topic, partitions), 90 + 10 * idle / 1000,
             "every partition's ISR whole after the heal",
             describe=lambda: _isr_state(cluster, topic))
    left = producer.stop()
    if left:
        notes.append(f"{left} produce(s) never answered (recorded as in doubt)")
    if producer.refused:
        notes.append(f"{producer.refused} produce(s) refused by librdkafka before sending "
                     f"(recorded as failed)")
    reader.stop()
    txn_reader.stop()
    group.stop(partitions)
    final_read_with_epochs(cluster.bootstrap, topic, partitions, history)
    final_read_committed(cluster.bootstrap, txn_topic, PARTITIONS, txn_history)
    admin.final_reads()
    notes += txn.notes[:5] + group.notes
    checks = run_checkers(history, log, config_topic) + txn_checkers(txn, txn_history) + \
        check_groups(group.reads, group.commits) + \
        [replicas_converged(cluster, topic, idle + partitions + 6), controllers_agree(cluster)]
    counts = {"group-read": len(group.reads), **{
        f"group-commit:{o}": sum(c.outcome == o and not c.fetched for c in group.commits)
        for o in ("ok", "fail", "unknown")}}
    if all(c.ok for c in checks):           # a failed round's topics stay for a post-mortem
        notes += drop_topics(cluster.bootstrap, [topic, config_topic, txn_topic, *names])
    return RoundResult(round_no, seed, schedule, checks, history, log, txn_history, t0, windows,
                       notes, counts)


def _isr_state(cluster, topic: str) -> str:
    """For the failure message: the round topic's partitions and every partition short of a
    replica, as a broker and as the controller see them (chaos_tests/live/isr_report.py)."""
    dead = cluster.unexpected_exits()           # a node that died, and why
    return "\n  " + isr_report(cluster.bootstrap, topic, controller_image(cluster)) + \
        "".join(f"\n  {d}" for d in dead)


def txn_checkers(txn: TxnWorker, txn_history: History) -> list[CheckResult]:
    final = final_log_of(txn_history)
    values = {v for vs in final.values() for v in vs}
    results = check_transactions(txn.txns, txn_history)
    for r in results:
        r.name = f"txn-{r.name}"        # apart from the data-plane checkers of the same name
    return results + [check_cycles(txn.elle_txns(values), final)]


def run_checkers(history: History, log: OpLog, config_topic: str) -> list[CheckResult]:
    ops = log.operations()
    topic_ops = [o for o in ops if o.f in ("create", "delete") or
                 (o.f == "read" and isinstance(o.value[0], str))]
    config_ops = [o for o in ops if o.f == "write" or
                  (o.f == "read" and o.value[0] == (config_topic, CONFIG))]
    return [*check_all(history, idempotent=True, sequenced=True), offsets_dense(history),
            key_order(history), check_linearizable(topic_ops, "topics", "linearizable-topics"),
            check_linearizable(config_ops, "register", "linearizable-configs")]
