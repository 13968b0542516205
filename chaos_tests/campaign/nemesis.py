"""The campaign's nemesis: injects and heals schedule.py's fault classes on a live cluster —
processes through `LiveCluster` (signals, restarts), the network through nftables tables of
this cluster's own (`raftka_camp<port>_<n>`, matching only its node addresses), clocks through
each node's `raftka.clock.offset.file`, disks through the brokers' own tmpfs (disk.py), process
clocks through libfaketime's offset files (timejump.py).

`run_schedule` plays a schedule as timed events (inject at `at`, heal at `end`), so faults may
overlap: each fault keeps its own table, thread or file, and heals only what it made.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time

from chaos_tests.campaign import disk, timejump
from chaos_tests.campaign.schedule import FaultStep
from clients.cli.dev import CONTROLLER_IDS, wait_ready

CLOCK_FILE = "clock-offset"          # raftka.clock.offset.file, in each node's data directory
FLAP_MIN_S, FLAP_MAX_S = 0.5, 2.0


class Flapper:
    """One link cut and restored again and again (seeded intervals of 0.5-2 s), starting cut."""

    def __init__(self, nft, table: str, drops, seed: float):
        self.nft, self.table, self.drops = nft, table, drops
        self.rng = random.Random(seed)
        self.stopped = threading.Event()
        self.cuts = self.dropped = 0
        self.errors: list[str] = []
        self.thread = threading.Thread(target=self._run, daemon=True, name=f"flap-{table}")

    def start(self) -> "Flapper":
        self._cut()
        self.thread.start()
        return self

    def _cut(self) -> None:
        self.nft.apply(self.table, self.drops)
        self.cuts += 1

    def _restore(self) -> None:
        self.dropped += self.nft.dropped(self.table)
        self.nft.remove(self.table)

    def _run(self) -> None:
        cut = True
        # the flap's own clock: timed toggles, not a wait for a condition
        while not self.stopped.wait(self.rng.uniform(FLAP_MIN_S, FLAP_MAX_S)):
            try:
                self._restore() if cut else self._cut()
                cut = not cut
            except Exception as exc:    # noqa: BLE001 - reported; stop() removes the table
                self.errors.append(str(exc))

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(30)
        self._restore()


class Nemesis:
    def __init__(self, cluster):
        self.cluster = cluster
        self.n = 0
        self.flappers: list[Flapper] = []
        self.filled: set[str] = set()        # brokers whose disk is (or was) full, not restarted
        self.clocks: set[str] = set()
        self.notes: list[str] = []
        self.ready_by: float | None = None   # set by run_schedule: when its next event is due

    def _table(self) -> str:
        return f"raftka_camp{self.cluster.layout.base_port}_{self.n}"

    def _dir(self, node: str):
        return self.cluster.layout.data_dir / node

    def inject(self, step: FaultStep):
        """Start the fault; returns its heal (a callable)."""
        c, t = self.cluster, step.targets
        if step.fault in ("kill", "controller-kill"):
            c.kill(t[0], signal.SIGKILL)
            return lambda: self.restart(t[0])
        if step.fault == "pause":
            c.kill(t[0], signal.SIGSTOP)
            return lambda: c.kill(t[0], signal.SIGCONT)
        if step.fault == "restart":
            c.kill(t[0], signal.SIGTERM)
            self.restart(t[0])
            return lambda: None
        if step.fault == "clock":
            self.set_clock(t[0], step.param)
            return lambda: self.set_clock(t[0], 0.0)
        if step.fault == "disk-full":
            return self._disk_full(t[0])
        if step.fault == "time-jump":
            total = timejump.jump(timejump.node_dir(c.layout.data_dir, t[0]), step.param)
            self.notes.append(f"time-jump({t[0]}) {step.param:+.0f}s: its clocks now "
                              f"{total:.0f}s ahead")
            return lambda: None         # a leap is not undone: the clocks stay ahead
        return self._net(step)

    def set_clock(self, node: str, offset_s: float) -> None:
        """`node`'s wall clock reads `offset_s` off from now on (its poll: within 100 ms).
        Written aside and renamed: the node never reads a half-written file."""
        tmp = self._dir(node) / (CLOCK_FILE + ".tmp")
        tmp.write_text(repr(offset_s))
        os.replace(tmp, self._dir(node) / CLOCK_FILE)
        (self.clocks.add if offset_s else self.clocks.discard)(node)

    def _disk_full(self, broker: str):
        self.filled.add(broker)
        disk.fill(self._dir(broker))

        def heal():
            disk.free(self._dir(broker))
            # Kafka keeps a failed log directory offline until the broker restarts; so does
            # Raftka (replica_manager.storage_failed)
            self.restart(broker)
            self.filled.discard(broker)
        return heal

    def restart(self, name: str) -> None:
        """Start `name` again; wait until it is ready, but not past `ready_by`, when the
        schedule's next event is due, and leave it starting then (noted).

        A broker is ready once unfenced, which needs an active controller, and a fault that
        keeps the controllers from it may be one that only a later event heals: waiting for
        readiness held a round's schedule for 60 s (a disk-full heal under a controller
        split), which stretched faults of 1-2 s past librdkafka's 60 s message timeout and
        into its documented duplicates. A node that exits before it is ready is a failed
        heal (raised: run_schedule notes it, heal_all starts it again)."""
        kind, ident = name.split("-", 1)
        if kind == "broker":
            self.cluster.restart_broker(int(ident), wait=False)
        else:
            self.cluster.restart_controller(CONTROLLER_IDS.index(int(ident)), wait=False)
        bounded = self.ready_by is not None
        problem = wait_ready([self.cluster.proc(name)],
                             max(0.0, self.ready_by - time.monotonic()) if bounded else 60)
        if problem is None:
            return
        if not bounded or self.cluster.proc(name).proc.poll() is not None:
            raise RuntimeError(problem)
        self.notes.append(f"{name} was still starting when the schedule's next event was due")

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
        elif step.fault == "flap":
            flapper = Flapper(nft.Nft(), table, nft.split([hosts[t[0]]], [hosts[t[1]]]),
                              step.param).start()
            self.flappers.append(flapper)

            def heal():
                flapper.stop()
                self.notes.append(f"{step.label()}: cut {flapper.cuts} times, "
                                  f"{flapper.dropped} packets dropped"
                                  + "".join(f"; {e}" for e in flapper.errors[:3]))
            return heal
        else:
            raise ValueError(f"unknown fault class {step.fault!r}")
        n = nft.Nft()
        n.apply(table, drops)
        return lambda: n.remove(table)

    def heal_all(self) -> None:
        """Whatever a failed heal left: every table of ours gone, every clock true, every disk
        freed, every process running (a broker whose disk filled up restarted)."""
        from clients.cli.netfaults import nft
        for f in self.flappers:
            f.stopped.set()
        n = nft.Nft() if self.n else None
        for i in range(1, self.n + 1):
            n.remove(f"raftka_camp{self.cluster.layout.base_port}_{i}")
        for node in list(self.clocks):
            self.set_clock(node, 0.0)
        for broker in list(self.filled):
            disk.free(self._dir(broker))
        for p in self.cluster.procs:
            if p.proc.poll() is None:
                p.proc.send_signal(signal.SIGCONT)
            if p.proc.poll() is not None or p.name in self.filled:
                _restart(self.cluster, p.name)
        self.filled.clear()


def _restart(cluster, name: str) -> None:
    kind, ident = name.split("-", 1)
    if kind == "broker":
        cluster.restart_broker(int(ident))
    else:
        cluster.restart_controller(CONTROLLER_IDS.index(int(ident)))


def run_schedule(nemesis: Nemesis, schedule: list[FaultStep], t0: float, notes: list[str]):
    """Inject each step at its time and heal it when it ends, in time order (so overlapping
    steps interleave: heals before injections due at the same moment); returns the windows
    as they really ran, in the schedule's order."""
    events = sorted([(s.end, 0, i) for i, s in enumerate(schedule)] +
                    [(s.at, 1, i) for i, s in enumerate(schedule)])
    heals, starts, windows = {}, {}, {}
    for k, (when, inject, i) in enumerate(events):
        step = schedule[i]
        _sleep_until(t0 + when)
        # a restart in this event waits for its node no longer than until the next event
        nemesis.ready_by = t0 + events[k + 1][0] if k + 1 < len(events) else None
        if inject:
            starts[i] = time.monotonic() - t0
            heals[i] = nemesis.inject(step)
            continue
        try:
            heals.pop(i)()
        except Exception as exc:        # noqa: BLE001 - heal_all retries; the round goes on
            notes.append(f"heal of {step.label()} failed: {exc}")
        windows[i] = (starts[i], time.monotonic() - t0, step.label())
    return [windows[i] for i in range(len(schedule))]


def _sleep_until(when: float) -> None:
    """The schedule's clock: wait for a planned moment (not for a condition)."""
    delay = when - time.monotonic()
    if delay > 0:
        time.sleep(delay)
