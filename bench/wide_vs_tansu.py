"""Produce over 1,000 partitions vs 6 with librdkafka's defaults, Raftka beside Tansu (issue 17).

Issue 17 asks that producing over 1,000 partitions reach half the rate over 6. librdkafka sends
one partition per ProduceRequest (its issue #1700), so over 1,000 partitions the rate is set by
what a broker spends per request. This runs the same rounds (`partitions_throughput.Throughput`:
100 B, acks=all, linger 5 ms, not idempotent: the headline configuration of
`bench/produce_partitions.py`) against Tansu, a Rust broker (`memory://` storage, one process,
no replication), and Raftka as one combined-mode process, RF 1 — the like-for-like pair — and,
with `--dev`, the 3-controller + 3-broker dev cluster at RF 1. Systems alternate within every
round, each started fresh, so all see the machine's load of the moment.

    python3 bench/wide_vs_tansu.py [--records 100000] [--rounds 3] [--dev]
    python3 bench/wide_vs_tansu.py --per-request [--rounds 2]

Per round and system: records/s over 6 and over 1,000 partitions, their ratio, and the CPU per
record of every process of the system (µs). `--per-request` measures instead what one small
Produce costs each one-process broker: 1 record of 100 B per request, one at a time (the next
once the answer is in) and pipelined (librdkafka with `batch.num.messages=1`). Tansu is a
benchmark peer only, fetched as `bench/broker_vs_tansu.py` does.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

import broker_vs_tansu as bt  # noqa: E402
from partitions_throughput import Throughput  # noqa: E402

WIDE_TOPICS = 10        # x 100 partitions
WARM_RECORDS = 2_000    # connections and first appends, not measured
PAYLOAD = b"x" * 100


def create_topics(bootstrap: str, configs: dict) -> tuple[list, list]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [NewTopic("narrow", 6, 1, config=configs)] + [
        NewTopic(f"wide{i}", 100, 1, config=configs) for i in range(WIDE_TOPICS)]
    for f in admin.create_topics(topics).values():
        f.result(60)
    narrow = [("narrow", p) for p in range(6)]
    wide = [(f"wide{i}", p) for i in range(WIDE_TOPICS) for p in range(100)]
    wait_led(bootstrap, [t.topic for t in topics])
    return narrow, wide


def wait_led(bootstrap: str, topics: list[str], timeout_s: float = 60) -> None:
    """Until Metadata names a leader for every partition of `topics`."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout_s
    while True:
        md = admin.list_topics(timeout=10)
        if all(t in md.topics and md.topics[t].partitions and
               all(p.leader >= 0 for p in md.topics[t].partitions.values()) for t in topics):
            return
        if time.monotonic() > deadline:
            raise RuntimeError("partitions not led in time")
        time.sleep(0.2)


class _System:
    """A started system: `bootstrap`, `pids` (all its processes), `stop()`."""

    def __init__(self, kind: str, tansu: str, work: Path):
        self.kind = kind
        self._data = work / kind
        shutil.rmtree(self._data, ignore_errors=True)
        if kind == "tansu":
            self._proc, self.bootstrap = bt.start_tansu(tansu)
            self.pids = [self._proc.pid]
        elif kind == "raftka-single":
            self._node = bt.SingleNode(None, self._data)
            self.bootstrap, self.pids = self._node.bootstrap, [self._node.proc.pid]
        else:
            self._cluster = bt.start_raftka(None, self._data)
            self.bootstrap = self._cluster.bootstrap
            self.pids = [p.proc.pid for p in self._cluster.procs]

    def stop(self) -> None:
        if self.kind == "tansu":
            self._proc.terminate()
            self._proc.wait(10)
        elif self.kind == "raftka-single":
            self._node.stop()
        else:
            self._cluster.stop()
        shutil.rmtree(self._data, ignore_errors=True)


def run_one(kind: str, tansu: str, work: Path, records: int) -> dict:
    system = _System(kind, tansu, work)
    try:
        # the dev cluster's default min.insync.replicas is 2: RF 1 topics need 1 for acks=all
        narrow, wide = create_topics(system.bootstrap, {"min.insync.replicas": "1"}
                                     if kind == "raftka-dev" else {})
        out = {}
        for name, tps in (("narrow", narrow), ("wide", wide)):
            t = Throughput(system.bootstrap, tps)
            t.round(WARM_RECORDS, 60, consume=False)
            c0 = sum(bt.cpu_seconds(pid) for pid in system.pids)
            r = t.round(records, 300, consume=False)
            out[name] = r["produce_rps"]
            out[f"{name}_cpu_us"] = round(
                (sum(bt.cpu_seconds(pid) for pid in system.pids) - c0) / records * 1e6, 2)
        out["ratio"] = round(out["wide"] / out["narrow"], 3)
        return out
    finally:
        system.stop()


def _one_at_a_time(bootstrap: str, n: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    for _ in range(n):
        p.produce("narrow", PAYLOAD, partition=0)
        p.flush(30)


def _pipelined(bootstrap: str, n: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                  "batch.num.messages": 1})
    for i in range(n):
        while True:
            try:
                p.produce("narrow", PAYLOAD, partition=i % 6)
                break
            except BufferError:
                p.poll(0.001)
    if p.flush(120):
        raise RuntimeError("records left undelivered")


def per_request(kind: str, tansu: str, work: Path) -> dict:
    system = _System(kind, tansu, work)
    try:
        create_topics(system.bootstrap, {})
        out = {}
        for name, run, n in (("one_at_a_time", _one_at_a_time, 3000),
                             ("pipelined", _pipelined, 30000)):
            run(system.bootstrap, 200)
            c0, t0 = sum(bt.cpu_seconds(pid) for pid in system.pids), time.monotonic()
            run(system.bootstrap, n)
            wall = time.monotonic() - t0
            cpu = sum(bt.cpu_seconds(pid) for pid in system.pids) - c0
            out[f"{name}_per_s"] = round(n / wall)
            out[f"{name}_cpu_us"] = round(cpu / n * 1e6, 1)
        return out
    finally:
        system.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=100_000, help="per measured round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dev", action="store_true",
                    help="also the 3-controller + 3-broker dev cluster, RF 1")
    ap.add_argument("--per-request", action="store_true",
                    help="CPU per 1-record Produce of each one-process broker instead")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-wide-tansu-"))
    try:
        tansu = bt.tansu_binary(str(work))
        if args.per_request:
            for rnd in range(args.rounds):
                for kind in ("tansu", "raftka-single"):
                    print(f"round {rnd} {kind:14s} {per_request(kind, tansu, work)}",
                          flush=True)
            return
        kinds = ["tansu", "raftka-single"] + (["raftka-dev"] if args.dev else [])
        results: dict[str, list] = {k: [] for k in kinds}
        for rnd in range(args.rounds):
            for kind in kinds:
                r = run_one(kind, tansu, work, args.records)
                results[kind].append(r)
                print(f"round {rnd} {kind:14s} {r}", flush=True)
        print("\nmedians (records/s; CPU µs per record over all the system's processes)")
        for kind, rs in results.items():
            med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
            print(f"{kind:14s} narrow {med['narrow']:>9,.0f}  wide {med['wide']:>9,.0f}  "
                  f"ratio {med['ratio']:.3f} (rounds {[r['ratio'] for r in rs]})  "
                  f"CPU narrow {med['narrow_cpu_us']:.2f} wide {med['wide_cpu_us']:.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
