"""Raft journal fsync cost at the Raft layer: three RaftQuorum voters in one process on 127.0.0.1,
entries proposed one at a time (commit latency) and many in flight (what group commit is for),
with raftka.controller.raft.fsync off and on, side by side.

    python3 bench/metadata_raft_journal.py [--entries 2000] [--sequential 200] [--in-flight 64]

Entries in flight at once are what the pipelined controller gives Raft when several clients
send commands (bench/metadata_pipeline.py measures that end to end); one at a time is the commit
latency a single client sees.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time

# run as a script, sys.path[0] is bench/, whose metadata_quorum.py would shadow the package
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:] = [_ROOT] + [p for p in sys.path
                         if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]

from metadata_quorum import records as r  # noqa: E402
from metadata_quorum.quorum.raft import RaftQuorum  # noqa: E402
from partition_server.testing import free_base_port  # noqa: E402

ENTRY = r.encode_entries([r.ConfigRecord(resource_type=2, resource_name="t", name="k",
                                         value="v" * 100)])[0]


def start(fsync: bool) -> list[RaftQuorum]:
    base = free_base_port()
    peers = {i: f"127.0.0.1:{base + i}" for i in range(3)}
    root = tempfile.mkdtemp(prefix=f"raftka-journal-bench-{'on' if fsync else 'off'}-")
    return [RaftQuorum(i, peers, os.path.join(root, str(i)), "bench-password", fsync=fsync)
            for i in range(3)]


def leader_of(nodes: list[RaftQuorum], deadline_s: float = 30) -> RaftQuorum:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        for n in nodes:
            if n.is_leader:
                return n
        time.sleep(0.05)
    raise RuntimeError("no leader")


def propose_all(leader: RaftQuorum, count: int, in_flight: int) -> tuple[float, float]:
    """Seconds to commit `count` entries with at most `in_flight` outstanding, and the CPU
    seconds the process (all three voters) used meanwhile."""
    slots = threading.Semaphore(in_flight)
    done = threading.Event()
    left = [count]
    lock = threading.Lock()
    errors = []

    def callback(result, error):
        if error:                                   # FAIL_REASON.SUCCESS is 0
            errors.append(error)
        slots.release()
        with lock:
            left[0] -= 1
            if left[0] == 0:
                done.set()
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(count):
        slots.acquire()
        leader.propose(ENTRY, callback)
    if not done.wait(300):
        raise RuntimeError("entries did not commit")
    if errors:
        raise RuntimeError(f"{len(errors)} entries failed: {errors[:3]}")
    return time.perf_counter() - start, time.process_time() - cpu


def measure(fsync: bool, entries: int, sequential: int, in_flight: int) -> dict:
    nodes = start(fsync)
    try:
        leader = leader_of(nodes)
        propose_all(leader, 20, 1)                  # warm up
        seq, seq_cpu = propose_all(leader, sequential, 1)
        par, par_cpu = propose_all(leader, entries, in_flight)
        return {"sequential_commits_per_s": round(sequential / seq, 1),
                "sequential_commit_ms": round(seq / sequential * 1000, 2),
                "sequential_cpu_ms_per_commit": round(seq_cpu / sequential * 1000, 3),
                f"commits_per_s_{in_flight}_in_flight": round(entries / par, 1),
                "in_flight_cpu_ms_per_commit": round(par_cpu / entries * 1000, 3)}
    finally:
        for n in nodes:
            n.destroy()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--entries", type=int, default=2000)
    ap.add_argument("--sequential", type=int, default=200)
    ap.add_argument("--in-flight", type=int, default=64)
    args = ap.parse_args()
    results = {}
    for mode in ("off", "on"):
        results[mode] = measure(mode == "on", args.entries, args.sequential, args.in_flight)
        print(f"fsync {mode}: {results[mode]}", flush=True)
    print("fsync on / off:", {k: round(results["on"][k] / results["off"][k], 2)
                              for k in results["on"] if "per_s" in k})


if __name__ == "__main__":
    main()
