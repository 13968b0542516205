"""One campaign round against a live cluster: a fresh topic, the workloads, the nemesis
schedule (each fault injected, held, healed, in order), a full heal, the verification reads,
then every checker.

The nemesis applies schedule.py's fault classes: processes through `LiveCluster` (signals,
restarts), the network through nftables tables of this cluster's own (`raftka_camp<port>_<n>`,
matching only its node addresses).
"""

from __future__ import annotations

import dataclasses
import signal
import time

from chaos_tests.campaign.schedule import FaultStep
from chaos_tests.campaign.workloads import (CONFIG, epoch_reader, KeyedProducer, MetadataWorker,
                                            final_read_with_epochs)
from chaos_tests.campaign.group_workload import GroupWorker
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
from clients.cli.dev import CONTROLLER_IDS

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


class Nemesis:
    def __init__(self, cluster):
        self.cluster = cluster
        self.n = 0

    def _table(self) -> str:
        return f"raftka_camp{self.cluster.layout.base_port}_{self.n}"

    def inject(self, step: FaultStep):
        """Start the fault; returns its heal (a callable)."""
        c, t = self.cluster, step.targets
        if step.fault in ("kill", "controller-kill"):
            c.kill(t[0], signal.SIGKILL)
            return lambda: _restart(c, t[0])
        if step.fault == "pause":
            c.kill(t[0], signal.SIGSTOP)
            return lambda: c.kill(t[0], signal.SIGCONT)
        if step.fault == "restart":
            c.kill(t[0], signal.SIGTERM)
            _restart(c, t[0])
            return lambda: None
        return self._net(step)

    def _net(self, step: FaultStep):
        from clients.cli.netfaults import nft
        hosts = self.cluster.layout.node_hosts()
        self.n += 1
        table, t = self._table(), step.targets
        others = [h for name, h in hosts.items() if name not in t]
        if step.fault == "isolate":
            drops = nft.isolate(hosts[t[0]], others)
        elif step.fault == "oneway":
            drops = nft.one_way([hosts[t[0]]], others)
        elif step.fault == "loss":
            drops = nft.loss(hosts[t[0]], others, 30)
        elif step.fault == "split":
            drops = nft.split([hosts[x] for x in t], others)
        elif step.fault == "bridge":
            side_a = [hosts[x] for x in t[:2]]
            side_b = [h for name, h in hosts.items() if name not in t]
            drops = nft.bridge(side_a, side_b, hosts[t[2]])
        else:
            raise ValueError(f"unknown fault class {step.fault!r}")
        n = nft.Nft()
        n.apply(table, drops)
        return lambda: n.remove(table)

    def heal_all(self) -> None:
        """Whatever a failed heal left: every table of ours gone, every process running."""
        from clients.cli.netfaults import nft
        n = nft.Nft() if self.n else None
        for i in range(1, self.n + 1):
            n.remove(f"raftka_camp{self.cluster.layout.base_port}_{i}")
        for p in self.cluster.procs:
            if p.proc.poll() is None:
                p.proc.send_signal(signal.SIGCONT)
            else:
                _restart(self.cluster, p.name)


def _restart(cluster, name: str) -> None:
    kind, ident = name.split("-", 1)
    if kind == "broker":
        cluster.restart_broker(int(ident))
    else:
        cluster.restart_controller(CONTROLLER_IDS.index(int(ident)))


def run_schedule(nemesis: Nemesis, schedule: list[FaultStep], t0: float, notes: list[str]):
    """Inject each step at its time, heal it when it ends; returns the real windows."""
    windows = []
    for step in schedule:
        _sleep_until(t0 + step.at)
        start = time.monotonic() - t0
        heal = nemesis.inject(step)
        _sleep_until(t0 + step.end)
        try:
            heal()
        except Exception as exc:        # noqa: BLE001 - heal_all retries; the round goes on
            notes.append(f"heal of {step.label()} failed: {exc}")
        windows.append((start, time.monotonic() - t0, step.label()))
    return windows


def _sleep_until(when: float) -> None:
    """The schedule's clock: wait for a planned moment (not for a condition)."""
    delay = when - time.monotonic()
    if delay > 0:
        time.sleep(delay)


def run_round(cluster, round_no: int, seed: int, schedule: list[FaultStep],
              round_s: float) -> RoundResult:
    topic, config_topic = f"camp-{round_no}-{seed}", f"camp-cfg-{round_no}-{seed}"
    txn_topic = f"camp-txn-{round_no}-{seed}"
    for t in (topic, config_topic, txn_topic):
        wait_for(lambda t=t: create_topic(cluster.bootstrap, t, PARTITIONS) or True, 60,
                 f"topic {t} created")
    wait_for(lambda: full_isr(cluster.bootstrap, topic, PARTITIONS), 60, "a full ISR",
             describe=lambda: _isr_state(cluster, topic))
    history, log, notes, txn_history = History(), OpLog(), [], History()
    names = [f"camp-meta-{round_no}-{seed}-{i}" for i in range(3)]
    producer = KeyedProducer(cluster.bootstrap, topic, history, log)
    reader = epoch_reader(cluster.bootstrap, topic, PARTITIONS, history)
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
    admin.stop()
    txn.stop()
    wait_for(lambda: full_isr(cluster.bootstrap, topic, PARTITIONS), 90,
             "every partition's ISR whole after the heal",
             describe=lambda: _isr_state(cluster, topic))
    left = producer.stop()
    if left:
        notes.append(f"{left} produce(s) never answered (recorded as in doubt)")
    reader.stop()
    txn_reader.stop()
    group.stop(PARTITIONS)
    final_read_with_epochs(cluster.bootstrap, topic, PARTITIONS, history)
    final_read_committed(cluster.bootstrap, txn_topic, PARTITIONS, txn_history)
    admin.final_reads()
    notes += txn.notes[:5] + group.notes
    checks = run_checkers(history, log, config_topic) + txn_checkers(txn, txn_history) + \
        check_groups(group.reads, group.commits)
    counts = {"group-read": len(group.reads), **{
        f"group-commit:{o}": sum(c.outcome == o and not c.fetched for c in group.commits)
        for o in ("ok", "fail", "unknown")}}
    return RoundResult(round_no, seed, schedule, checks, history, log, txn_history, t0, windows,
                       notes, counts)


def _isr_state(cluster, topic: str) -> str:
    """For the failure message: the round topic's partitions and every partition short of a
    replica, as a broker and as the controller see them (chaos_tests/live/isr_report.py)."""
    return "\n  " + isr_report(cluster.bootstrap, topic, controller_image(cluster))


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
