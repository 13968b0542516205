"""Metadata commit rate with and without the fsynced Raft journal (issue 20 item 4), side by side in
one run: 3 controller processes on 127.0.0.1 per quorum, N clients each sending CreateTopics one
after another on its own connection to the active controller (what many brokers and admin
clients at once look like to it).

    python3 bench/metadata_pipeline.py [--clients 1,4,16] [--rounds 8] [--window 1.5]
                                       [--baseline TREE] [--one-at-a-time]

Quorums run at once, one per combination: raftka.controller.raft.fsync off and on, pipelined,
from this checkout; with `--baseline TREE` the same two from another code tree (a checkout of
the commit to compare with: `git worktree add` or `git archive | tar -x`, its C extension built),
so before and after are measured in the same run; `--one-at-a-time` adds this checkout's
controller with raftka.controller.pipeline=false (one command at a time), fsync off and on.
For each client count they are measured in turn, `--window` seconds each, for `--rounds` rounds
(the order rotating), so a machine whose load swings (this one is shared) weighs on all alike;
the rate reported is the median window's.
A commit is one CreateTopics (one topic, one partition on broker 0) answered after its records
commit. Prints commits/s per combination, the CPU time the three controllers spent per commit
(a figure the machine's load moves far less than the rate), and the ratios that matter: fsync
on / off, and against the baseline's rate without fsync (the rate before fsync, "today's").
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import tempfile
import time
from statistics import median
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.code_tree import started_from  # noqa: E402
from clients.connection import BrokerConnection  # noqa: E402
from metadata_quorum.tests.test_failover import Quorum, create_topic, register_broker  # noqa: E402
from wire.messages.api_keys import ApiKey  # noqa: E402
from wire.messages.index_generated import REQUESTS  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(q: Quorum) -> float:
    """CPU time (user + system) the quorum's controller processes used so far."""
    total = 0
    for p in q.procs.values():
        with open(f"/proc/{p.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])      # utime, stime
    return total / TICKS



class Combo(tuple):
    """(tree label, fsync, pipeline): one quorum of the run."""

    def __str__(self):
        tree, fsync, pipeline = self
        return f"{tree} fsync {fsync}" + ("" if pipeline == "on" else " one-at-a-time")


def combos(baseline: bool, one_at_a_time: bool) -> list[Combo]:
    out = [Combo(("this", "off", "on")), Combo(("this", "on", "on"))]
    if baseline:
        out += [Combo(("base", "off", "on")), Combo(("base", "on", "on"))]
    if one_at_a_time:
        out += [Combo(("this", "off", "off")), Combo(("this", "on", "off"))]
    return out


def request(name: str):
    ct = REQUESTS[ApiKey.CREATE_TOPICS]
    return ct(topics=[ct.CreatableTopic(name=name, num_partitions=-1, replication_factor=-1,
                                        assignments=[ct.CreatableReplicaAssignment(
                                            partition_index=0, broker_ids=[0])])],
              timeout_ms=5000)


async def rate(q: Quorum, active: list, clients: int, seconds: float,
               prefix: str) -> tuple[float, list, int]:
    """Commits per second of `clients` connections, each one CreateTopics at a time; a client
    told NOT_CONTROLLER (an election: this machine is loaded) moves to the next controller,
    and the retries are counted."""
    names = (f"{prefix}-{i}" for i in itertools.count())
    counts = [0] * clients
    retries = [0]
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds

    async def client(k: int) -> None:
        conn = None
        try:
            while time.perf_counter() < deadline:
                if conn is None:
                    conn = BrokerConnection("127.0.0.1", q.port(active[0]))
                    await conn.connect(timeout_s=5)
                t0 = time.perf_counter()
                resp = await conn.request(request(next(names)), 7, timeout_s=10)
                code = resp.topics[0].error_code
                if code == 0:
                    latencies.append(time.perf_counter() - t0)
                    counts[k] += 1
                    continue
                if code != 41:
                    raise RuntimeError(f"CreateTopics failed: error {code}")
                retries[0] += 1
                await conn.aclose()
                conn = None
                active[0] = (active[0] + 1) % 3
                await trio.sleep(0.05)
        finally:
            if conn is not None:
                await conn.aclose()

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for k in range(clients):
            nursery.start_soon(client, k)
    return sum(counts), time.perf_counter() - start, latencies, retries[0]


async def measure(quorums: dict, client_counts: list[int], rounds: int, window: float) -> dict:
    order_all = list(quorums)
    active = {}
    for combo, q in quorums.items():
        await register_broker(q)
        active[combo] = [(await create_topic(q, "warm-up", 30))[0]]
        await rate(q, active[combo], 4, 1.0, "warm")
    out: dict = {combo: {} for combo in quorums}
    for n in client_counts:
        totals = {combo: [[], [], 0, 0.0, 0] for combo in quorums}
        for rnd in range(rounds):
            k = rnd % len(order_all)
            order = order_all[k:] + order_all[:k]
            for combo in order:
                cpu = cpu_seconds(quorums[combo])
                count, took, lat, retries = await rate(quorums[combo], active[combo], n, window,
                                                       f"c{n}-{rnd}")
                t = totals[combo]
                t[0].append(count / took)
                t[1] += lat
                t[2] += retries
                t[3] += cpu_seconds(quorums[combo]) - cpu
                t[4] += count
        for combo, (rates, lat, retries, cpu, count) in totals.items():
            # the median window: one election (NOT_CONTROLLER) ruins a window on this loaded
            # machine, whichever quorum it hits
            lat.sort()
            out[combo][n] = (round(median(rates), 1), round(lat[len(lat) // 2] * 1000, 2),
                             retries, round(cpu / max(count, 1) * 1000, 2))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", default="1,4,16")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--window", type=float, default=1.5)
    ap.add_argument("--baseline", default=None,
                    help="another code tree to run the same quorums from, side by side")
    ap.add_argument("--one-at-a-time", action="store_true",
                    help="also this checkout's one-command-at-a-time controller")
    args = ap.parse_args()
    client_counts = [int(x) for x in args.clients.split(",")]
    quorums = {}
    try:
        for combo in combos(bool(args.baseline), args.one_at_a_time):
            tree, fsync, pipeline = combo
            q = Quorum(Path(tempfile.mkdtemp(prefix="raftka-pipeline-bench-")),
                       {"raftka.controller.raft.fsync": "true" if fsync == "on" else "false",
                        "raftka.controller.pipeline": "true" if pipeline == "on" else "false"})
            quorums[combo] = q
            with started_from(args.baseline if tree == "base" else None):
                q.start_all()
        results = trio.run(measure, quorums, client_counts, args.rounds, args.window)
    finally:
        for q in quorums.values():
            q.stop_all()
    for combo, by_n in results.items():
        print(f"{str(combo):28s}: " + ", ".join(
            f"{n} clients {r} commits/s (p50 {lat} ms, {cpu} CPU ms/commit"
            f"{f', {e} NOT_CONTROLLER' if e else ''})"
            for n, (r, lat, e, cpu) in by_n.items()), flush=True)
    for n in client_counts:
        r = {k: v[n][0] for k, v in results.items()}
        line = f"{n} clients: fsync on/off {r['this', 'on', 'on'] / r['this', 'off', 'on']:.2f}"
        if args.baseline:
            line += (f"; baseline on/off {r['base', 'on', 'on'] / r['base', 'off', 'on']:.2f}"
                     f"; this with fsync / baseline without "
                     f"{r['this', 'on', 'on'] / r['base', 'off', 'on']:.2f}"
                     f"; this / baseline, fsync on {r['this', 'on', 'on'] / r['base', 'on', 'on']:.2f}"
                     f", off {r['this', 'off', 'on'] / r['base', 'off', 'on']:.2f}")
        if args.one_at_a_time:
            line += (f"; one at a time on/off "
                     f"{r['this', 'on', 'off'] / r['this', 'off', 'off']:.2f}")
        print(line)


if __name__ == "__main__":
    main()
