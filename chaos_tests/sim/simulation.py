"""One seeded run: a controller, three brokers, producers and consumers, a nemesis, invariants
after every event, then healing, convergence and the history checkers.

    result = run(seed=7, events=5000)      # raises SimulationFailed naming the seed

Faults (the nemesis picks among them at random times, at most two at once):
  kill        SIGKILL a broker, restart it later (the page cache survives: no data loss)
  power       power loss: the unflushed log suffix is gone too, and the broker re-registers as
              unclean (KIP-966). Struck at any time unless another broker's power loss is still
              unresolved (it has not rejoined the ISR since): more than min.insync.replicas - 1
              such failures at once may lose acknowledged data in Kafka too (flush is
              asynchronous), so they are not a bug to find here
  pause       SIGSTOP a broker past replica.lag.time.max.ms or not, then SIGCONT
  isolate     cut a broker off from everyone (controller, peers, clients)
  fence       cut a broker off from the controller only (it keeps serving as a zombie)
  zombie      cut the partition leader off from the controller and its peers, clients still
              reach it (F3)
  slow        one broker's messages (both ways) take 50-800 ms longer for a while (a slow
              follower or leader: ISR shrink and expansion under load, F5)
  flaky       drop, duplicate and delay (hence reorder) messages for a while

With `reassign` on (off by default, so the CI seeds' runs stay as they were), partitions are also
moved (KIP-455) at random times: a new target of 2 or 3 brokers in a random order, or a cancel;
convergence then means every partition's move finished and its replicas agree.

With `rereplicate` on (off by default), a fourth broker runs, the cluster-wide
`raftka.rereplication.timeout.ms` is set, and one broker is lost for good (crashed, never
restarted) at a random time: the controller re-places its replicas (rereplication.py) amid the
other faults; convergence then also means no partition names the lost broker any more.

With `balance` on (off by default), `raftka.balancer.enable` is set and a fourth broker, absent
at the start, joins at a random time: the controller's balancer (balancer.py) moves replicas
onto it amid the other faults (it waits while a broker is fenced); convergence then also means
replica counts per broker within ±1 and no balancer move pending.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile

from chaos_tests.checkers import History, check_all
from chaos_tests.sim.broker import SimBroker
from chaos_tests.sim.clients import SimConsumer, SimProducer
from chaos_tests.sim.controller import SimController
from chaos_tests.sim.core import LinkFaults, Network, Scheduler
from chaos_tests.sim.invariants import Invariants, Violation
from partition_server.replication.partition import Role

TOPIC = "sim"
PARTITIONS = 2
BROKERS = 3

DEFAULT_CONFIG = {
    "heartbeat_ms": 200,
    "session_timeout_ms": 1200,
    "lag_ms": 1000,
    "flush_ms": 400,
    "checkpoint_ms": 500,
    "fetch_wait_ms": 100,
    "fetch_retry_ms": 50,
    "request_timeout_ms": 1500,
    "delivery_timeout_ms": 8000,
    "reassign": False,
    "rereplicate": False,
    "rereplication_timeout_ms": 3000,
    "balance": False,
}


class SimulationFailed(AssertionError):
    def __init__(self, seed: int, events: int, message: str, history: History | None = None):
        super().__init__(f"seed {seed}: {message}\n  replay: python -m chaos_tests.sim "
                         f"--seed {seed} --events {events}")
        self.seed = seed
        self.history = history


@dataclasses.dataclass
class SimResult:
    seed: int
    events: int
    virtual_ms: int
    acked: int
    produced: int
    consumed: int
    faults: dict
    log_end_offsets: dict
    converged: bool = True
    stuck: str | None = None          # why replicas did not converge (require_convergence=False)


class Simulation:
    def __init__(self, seed: int, config: dict | None = None):
        self.seed = seed
        self.cfg = dict(DEFAULT_CONFIG, **(config or {}))
        # the brokers' log directories: tmpfs when there is one (fsync is then nearly free)
        self.root = tempfile.mkdtemp(prefix=f"raftka-sim-{seed}-",
                                     dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
        self.sched = Scheduler(seed)
        self.net = Network(self.sched)
        self.history = History()
        self.invariants = Invariants(self)
        self.controller = SimController(self, self.cfg["session_timeout_ms"])
        self.net.add("controller", self.controller)
        # RF stays BROKERS; re-replication needs one broker more to move to
        self.n_brokers = BROKERS + (1 if self.cfg["rereplicate"] or self.cfg["balance"] else 0)
        self.lost: set = set()            # brokers lost for good (never restarted)
        # the broker that joins later (balance mode): no fault strikes it before it starts
        self.not_joined: set = {BROKERS} if self.cfg["balance"] else set()
        self.brokers = [SimBroker(self, i, self.cfg) for i in range(self.n_brokers)]
        for b in self.brokers:
            self.net.add(b.name, b)
        self.producers = [SimProducer(self, f"producer-{p}", TOPIC, p, 1000 * (p + 1))
                          for p in range(PARTITIONS)]
        self.consumers = [SimConsumer(self, f"consumer-{p}", TOPIC, p) for p in range(PARTITIONS)]
        for c in self.producers + self.consumers:
            self.net.add(c.name, c)
        self.active: dict = {}            # broker id → fault name (one fault per broker)
        self.network_fault = None
        self.fault_counts: dict = {}
        self.nemesis_on = True

    @property
    def node_names(self):
        return ["controller"] + [b.name for b in self.brokers] + \
            [c.name for c in self.producers + self.consumers]

    # -- running ---------------------------------------------------------------------------------

    def run(self, events: int, require_convergence: bool = True) -> SimResult:
        """`require_convergence=False` still checks every safety invariant and the history, but
        reports (instead of failing on) replicas that stay apart after healing: a liveness
        problem, told apart so a known one does not hide safety results."""
        stuck = None
        try:
            self._setup()
            while self.sched.events < events:
                self._step()
            stuck = self._heal_and_settle(require_convergence)
        except Violation as exc:
            raise SimulationFailed(self.seed, events, str(exc), self.history) from None
        finally:
            self._close()
        bad = [r for r in check_all(self.history, idempotent=True) if not r.ok]
        if bad:
            raise SimulationFailed(self.seed, events, "; ".join(map(str, bad)), self.history)
        return SimResult(self.seed, self.sched.events, self.sched.now,
                         len(self.history.acked), len(self.history.produces),
                         len(self.history.consumes), dict(self.fault_counts),
                         {b.name: {tp: len(b.disk.values(tp)) for tp in b.disk.keys()}
                          for b in self.brokers}, stuck is None, stuck)

    def _close(self) -> None:
        for b in self.brokers:
            if b.up:
                b.crash(power_loss=False)
        shutil.rmtree(self.root, ignore_errors=True)

    def _step(self) -> None:
        if not self.sched.step():
            raise Violation("the event queue ran dry")
        self.invariants.check()

    def _setup(self) -> None:
        self.controller.start()
        for b in self.brokers:
            if b.broker_id not in self.not_joined:
                b.start()
        self._run_until(lambda: len(self.controller.image.usable_brokers()) ==
                        self.n_brokers - len(self.not_joined),
                        10_000, "brokers did not register")
        self.controller.create_topic(TOPIC, PARTITIONS, BROKERS, {"min.insync.replicas": "2"})
        if self.cfg["rereplicate"]:
            self.controller.set_cluster_config("raftka.rereplication.timeout.ms",
                                               str(self.cfg["rereplication_timeout_ms"]))
            self.sched.after(self.sched.rng.randint(1000, 8000), self._lose_a_broker)
        if self.cfg["balance"]:
            self.controller.set_cluster_config("raftka.balancer.enable", "true")
            self.sched.after(self.sched.rng.randint(1000, 8000), self._join_broker)
        for c in self.producers + self.consumers:
            c.start()
        self.sched.after(self.sched.rng.randint(200, 1000), self._nemesis)
        if self.cfg["reassign"]:
            self.sched.after(self.sched.rng.randint(200, 1000), self._reassigner)

    def _run_until(self, done, timeout_ms: int, what: str) -> None:
        deadline = self.sched.now + timeout_ms
        while not done():
            if self.sched.now > deadline:
                raise Violation(f"{what} within {timeout_ms} ms\n{self.describe()}")
            self._step()

    def describe(self) -> str:
        """The cluster as the controller and each broker see it (for failure reports)."""
        lines = []
        image = self.controller.image
        for t in image.topics.values():
            for p in t.partitions.values():
                lines.append(f"  controller {t.name}-{p.partition_id}: leader {p.leader} "
                             f"epoch {p.leader_epoch} replicas {p.replicas} isr {p.isr} "
                             f"elr {p.elr} last known elr {p.last_known_elr} "
                             f"adding {p.adding_replicas} removing {p.removing_replicas} "
                             f"partition epoch {p.partition_epoch}")
        for b in self.brokers:
            if not b.up:
                lines.append(f"  {b.name}: down")
                continue
            for tp, h in b.replicas.partitions.items():
                s = h.state
                lines.append(f"  {b.name}{' (paused)' if b.paused else ''} {tp}: {s.role.value} "
                             f"epoch {s.leader_epoch} leader {s.leader_id} isr {s.isr} pending "
                             f"{s.pending_isr} hw {s.high_watermark} leo {h.log.log_end_offset} "
                             f"offline {h.offline} image {b.image.offset} registered "
                             f"{b.registered} epochs {list(zip(h.log.epoch_cache.epochs, h.log.epoch_cache.start_offsets))}")
        for p in self.producers:
            lines.append(f"  {p.name}: leader {p.leader} waiting {p.waiting} batch "
                         f"{p.batch[0] if p.batch else None} acked {p.acked}")
        return "\n".join(lines)

    # -- nemesis ---------------------------------------------------------------------------------

    def _nemesis(self) -> None:
        if not self.nemesis_on:
            return
        rng = self.sched.rng
        self.sched.after(rng.randint(200, 1500), self._nemesis)
        choice = rng.choice(["kill", "power", "pause", "isolate", "fence", "zombie", "flaky",
                             "kill", "pause", "slow"])
        if choice == "flaky":
            if self.network_fault is None:
                self.network_fault = choice
                self.net.faults = LinkFaults(drop=rng.choice([0.02, 0.1, 0.3]),
                                             duplicate=rng.choice([0.0, 0.05, 0.2]),
                                             min_delay_ms=1, max_delay_ms=rng.choice([5, 30, 200]))
                self._count(choice)
                self.sched.after(rng.randint(500, 4000), self._end_flaky)
            return
        if len(self.active) >= 2:
            return
        free = [b for b in self.brokers if b.broker_id not in self.active
                and b.broker_id not in self.lost and b.broker_id not in self.not_joined]
        if choice == "zombie":
            leaders = {p.leader for t in self.controller.image.topics.values()
                       for p in t.partitions.values() if p.leader >= 0}
            free = [b for b in free if b.broker_id in leaders]
        if not free:
            return
        b = rng.choice(free)
        if choice == "power" and (self.invariants.suspect_brokers() - {b.broker_id} or
                                   "power" in self.active.values()):
            choice = "kill"
        self.active[b.broker_id] = choice
        self._count(choice)
        duration = rng.randint(100, 4000)
        if choice in ("kill", "power"):
            if choice == "power":
                self.invariants.on_power_loss(b)
            b.crash(power_loss=choice == "power")
        elif choice == "pause":
            b.pause()
        elif choice == "isolate":
            self.net.isolate(b.name, self.node_names)
        elif choice == "fence":
            self.net.isolate(b.name, ["controller"])
        elif choice == "zombie":
            self.net.isolate(b.name, ["controller"] + [o.name for o in self.brokers])
        elif choice == "slow":
            self.net.slow[b.name] = rng.choice([50, 200, 800])
        self.sched.after(duration, self._end_fault, b)

    def _reassigner(self) -> None:
        """Move one partition to 2 or 3 brokers in a random order, or cancel its move."""
        if not self.nemesis_on:
            return
        rng = self.sched.rng
        self.sched.after(rng.randint(300, 3000), self._reassigner)
        partition = rng.randrange(PARTITIONS)
        target = None
        if rng.random() < 0.8:
            # an operator does not move partitions onto a broker lost for good
            live = [b for b in range(self.n_brokers) if b not in self.lost]
            target = rng.sample(live, rng.choice([2, 3]))
        records, results = self.controller.qc.alter_partition_reassignments(
            [(TOPIC, partition, target)])
        self.controller.commit(records)
        self._count("reassign" if target else "cancel" if results[0][0] == 0 else "no-op")

    def _lose_a_broker(self) -> None:
        """One broker (not under another fault) crashes for good — one that is not the last
        in-sync copy of any partition: losing that for good loses the partition whatever the
        controller does (no unclean election here), which is not what this mode tests."""
        image = self.controller.image
        isrs = [p.isr for t in image.topics.values() for p in t.partitions.values()]
        free = [b for b in self.brokers if b.broker_id not in self.active and b.up
                and all(set(isr) - {b.broker_id} for isr in isrs)]
        if not free:
            self.sched.after(500, self._lose_a_broker)
            return
        b = self.sched.rng.choice(free)
        self.lost.add(b.broker_id)
        self._count("lost")
        if any(b.broker_id in p.replicas for t in image.topics.values()
               for p in t.partitions.values()):
            self._count("lost-a-replica")      # something for the controller to re-place
        b.crash(power_loss=False)

    def on_balancer_moves(self, image, decision) -> None:
        """The balancer's contract, checked on the image it decided from: a partition moving
        already is left alone; a copy starts only from a partition in sync at its full replica
        set, its replication factor kept; a reorder makes an in-sync replica preferred."""
        for (topic, partition), target, why in decision.moves:
            p = image.topics[topic].partitions[partition]
            reorder = set(target) == set(p.replicas)
            if p.adding_replicas or p.removing_replicas or len(target) != len(p.replicas) or \
                    (target[0] not in p.isr if reorder else set(p.isr) != set(p.replicas)):
                raise Violation(f"balancer moved {topic}-{partition} {p.replicas} isr {p.isr} "
                                f"to {target} ({why})")
            self._count("balancer-reorder" if set(target) == set(p.replicas)
                        else "balancer-move" if self.nemesis_on else "balancer-move-healed")

    def _join_broker(self) -> None:
        for broker_id in sorted(self.not_joined):
            self.brokers[broker_id].start()
            self._count("joined")
        self.not_joined.clear()

    def _count(self, name: str) -> None:
        self.fault_counts[name] = self.fault_counts.get(name, 0) + 1

    def _end_flaky(self) -> None:
        self.net.faults = LinkFaults()
        self.network_fault = None

    def _end_fault(self, b) -> None:
        kind = self.active.pop(b.broker_id, None)
        if kind in ("kill", "power"):
            b.start()
        elif kind == "pause":
            b.resume()
        elif kind in ("isolate", "fence", "zombie"):
            self.net.cut = {(s, d) for s, d in self.net.cut if b.name not in (s, d)}
        elif kind == "slow":
            self.net.slow.pop(b.name, None)

    # -- the end ---------------------------------------------------------------------------------

    def _heal_and_settle(self, require_convergence: bool) -> str | None:
        self.nemesis_on = False
        self.net.heal()
        self.net.slow.clear()
        self._end_flaky()
        self._join_broker() if self.not_joined else None
        for b in self.brokers:
            self._end_fault(b) if b.broker_id in self.active else None
            if not b.up and b.broker_id not in self.lost:
                b.start()
            b.resume()
        self.active.clear()
        for p in self.producers:
            p.stopped = True
        self._run_until(lambda: all(p.batch is None and p.waiting is None for p in self.producers),
                        30_000, "producers did not finish their last batch")
        stuck = None
        try:
            self._run_until(self._converged, 30_000, "replicas did not converge after healing")
        except Violation as exc:
            if require_convergence:
                raise
            stuck = str(exc)
        self._final_read()
        return stuck

    def _converged(self) -> bool:
        image = self.controller.image
        if self.cfg["balance"]:
            counts = [sum(b in p.replicas for t in image.topics.values()
                          for p in t.partitions.values()) for b in range(self.n_brokers)]
            decision = self.controller.qc.balancer_decision
            if max(counts) - min(counts) > 1 or decision is None or decision.moves:
                return False
        for t in image.topics.values():
            for p in t.partitions.values():
                if p.leader < 0 or p.adding_replicas or p.removing_replicas or \
                        len(p.isr) != len(p.replicas) or set(p.replicas) & self.lost:
                    return False
                tp = (t.name, p.partition_id)
                logs = []
                for b in self.brokers:
                    if b.broker_id not in p.replicas:
                        continue
                    hosted = b.replicas.get(*tp)
                    if hosted is None:
                        return False
                    if hosted.state.high_watermark != hosted.log.log_end_offset:
                        return False
                    logs.append(hosted.log.values)
                if any(v != logs[0] for v in logs[1:]):
                    return False
        return True

    def _final_read(self) -> None:
        """The final log of each partition: its leader's committed records (without a leader,
        which only a run with stuck replicas ends with, the ISR member with the highest high
        watermark)."""
        image = self.controller.image
        for t in image.topics.values():
            for p in t.partitions.values():
                candidates = [p.leader] if p.leader >= 0 else list(p.isr)
                best = None
                for r in candidates:
                    hosted = self.brokers[r].replicas.get(t.name, p.partition_id)
                    if hosted is not None and (best is None or hosted.state.high_watermark
                                               > best.state.high_watermark):
                        best = hosted
                if best is None:
                    raise Violation(f"{t.name}-{p.partition_id}: no replica to read at the end")
                for offset, value in enumerate(best.log.values[:best.state.high_watermark]):
                    self.history.consume(value, p.partition_id, offset, final=True,
                                         process="final", time=self.sched.now)

def run(seed: int, events: int = 5000, config: dict | None = None,
        require_convergence: bool = True) -> SimResult:
    return Simulation(seed, config).run(events, require_convergence)
