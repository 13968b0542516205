"""Produce over many partitions vs few, side by side, for one or more code trees (issue 17).

The produce half of `bench/partitions.py`'s throughput step without the rest of that bench:
for each tree in `--trees` a dev cluster (3 controllers + 3 brokers, RF 3,
min.insync.replicas 2) is started from that tree (its processes run with PYTHONPATH=tree), with
`--wide` partitions in topics of 100 and one `--narrow`-partition topic. Then rounds alternate
tree by tree and, within a tree, narrow then wide, so every figure of a round shares the
machine's load of the moment. Records: 100 B, acks=all, librdkafka with linger 5 ms
(`partitions_throughput.Throughput`, the headline configuration); `--linger-ms` adds rounds with
other linger values as information only.

    python3 bench/produce_partitions.py --records 60000 --rounds 3
    python3 bench/produce_partitions.py --trees /tmp/pm-old,. --rounds 3      # before/after
    python3 bench/produce_partitions.py --hold 120     # keep producing wide (for py-spy)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from clients.cli.dev import stop_cluster  # noqa: E402
from partition_server.testing import LiveCluster  # noqa: E402
from partitions_throughput import Throughput  # noqa: E402

TOPIC_PARTITIONS = 100


def proc_cpu_s(pid: int) -> float:
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class RequestStats:
    """librdkafka's statistics (the last report of a round): Produce requests and batches sent,
    to tell how many partitions' batches each request carried."""

    def __init__(self):
        self.last = None

    def config(self) -> dict:
        return {"statistics.interval.ms": 100, "stats_cb": self._cb}

    def _cb(self, text: str) -> None:
        self.last = json.loads(text)

    def summary(self) -> dict:
        brokers = [b for b in (self.last or {}).get("brokers", {}).values() if b["nodeid"] >= 0]
        reqs = sum(b.get("req", {}).get("Produce", 0) for b in brokers)
        topics = (self.last or {}).get("topics", {}).values()
        batches = sum(t.get("batchcnt", {}).get("cnt", 0) for t in topics)
        msgs = sum(t.get("batchcnt", {}).get("sum", 0) for t in topics)
        return {"produce_requests": reqs, "batches": batches,
                "records_per_request": round(msgs / reqs, 1) if reqs else None}


def load_avg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def create(bootstrap: str, topics: dict[str, int], timeout_s: float = 120) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(t, n, 3, config={"min.insync.replicas": "2"}) for t, n in topics.items()],
        operation_timeout=timeout_s)
    for fut in futures.values():
        fut.result(timeout_s + 10)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        md = admin.list_topics(timeout=30).topics
        if all(t in md and len(md[t].partitions) == n and
               all(p.leader >= 0 for p in md[t].partitions.values())
               for t, n in topics.items()):
            return
        time.sleep(0.2)
    raise RuntimeError("topics not led in time")


class TreeCluster:
    def __init__(self, tree: Path, data_dir: Path, wide: int, narrow: int):
        self.tree = tree
        os.environ["PYTHONPATH"] = str(tree)        # inherited by the cluster's processes
        self.cluster = LiveCluster(data_dir).start(120)
        wide_topics = {f"wide-{i:03d}": TOPIC_PARTITIONS
                       for i in range((wide + TOPIC_PARTITIONS - 1) // TOPIC_PARTITIONS)}
        create(self.cluster.bootstrap, wide_topics | {"narrow": narrow})
        wide_tps = [(t, q) for t in wide_topics for q in range(TOPIC_PARTITIONS)][:wide]
        self.runs = {"narrow": Throughput(self.cluster.bootstrap,
                                          [("narrow", q) for q in range(narrow)]),
                     "wide": Throughput(self.cluster.bootstrap, wide_tps)}

    def pids(self) -> dict[str, int]:
        return {p.name: p.proc.pid for p in self.cluster.procs}

    def stop(self) -> None:
        try:
            stop_cluster(self.cluster.procs)
        finally:
            for p in self.cluster.procs:
                if p.proc.poll() is None:
                    p.proc.kill()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trees", default=str(Path(__file__).resolve().parents[1]),
                    help="comma-separated code trees, one cluster each")
    ap.add_argument("--wide", type=int, default=1000)
    ap.add_argument("--narrow", type=int, default=6)
    ap.add_argument("--records", type=int, default=60_000, help="per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--linger-ms", default="", help="extra linger.ms values (information)")
    ap.add_argument("--hold", type=float, default=0,
                    help="instead: produce wide for this many seconds (for a profiler)")
    ap.add_argument("--out", help="write the results as JSON here")
    args = ap.parse_args()
    trees = [Path(t).resolve() for t in args.trees.split(",")]
    lingers = [None] + [int(x) for x in args.linger_ms.split(",") if x]
    work = Path(tempfile.mkdtemp(prefix="produce-partitions-"))
    clusters: list[TreeCluster] = []
    got: dict = {}
    try:
        for i, tree in enumerate(trees):
            clusters.append(TreeCluster(tree, work / f"c{i}", args.wide, args.narrow))
            print(f"{tree}: {clusters[-1].pids()}", file=sys.stderr, flush=True)
        if args.hold:
            end = time.monotonic() + args.hold
            while time.monotonic() < end:
                for c in clusters:
                    r = c.runs["wide"].round(args.records, 600, consume=False)
                    print(f"{c.tree} wide {r}", file=sys.stderr, flush=True)
            return 0
        for rnd in range(args.rounds):
            for c in clusters:
                for linger in lingers:
                    cfg = {} if linger is None else {"linger.ms": linger}
                    for name in ("narrow", "wide"):
                        stats = RequestStats()
                        cpu0 = {n: proc_cpu_s(p) for n, p in c.pids().items()}
                        r = c.runs[name].round(args.records, 600, consume=False,
                                               producer_config=cfg | stats.config())
                        cpu = {n: proc_cpu_s(p) - cpu0[n] for n, p in c.pids().items()}
                        broker_cpu_ms = 1000 * sum(v for n, v in cpu.items() if "broker" in n)
                        r |= stats.summary()
                        key = (str(c.tree), "headline" if linger is None else f"linger{linger}")
                        got.setdefault(key, {"narrow": [], "wide": []})[name].append(
                            r["produce_rps"])
                        per_req = broker_cpu_ms / r["produce_requests"] \
                            if r["produce_requests"] else float("nan")
                        print(f"round {rnd} load {load_avg()} {c.tree} {key[1]} {name}: "
                              f"{r['produce_rps']} rec/s (enqueued in {r['enqueue_s']} s), "
                              f"{r['produce_requests']} requests "
                              f"({r['batches']} batches, {r['records_per_request']} rec/req), "
                              f"brokers' CPU {broker_cpu_ms:.0f} ms = {per_req:.2f} ms/request",
                              file=sys.stderr, flush=True)
        out = []
        for (tree, label), v in got.items():
            w, n = statistics.median(v["wide"]), statistics.median(v["narrow"])
            ratios = [a / b for a, b in zip(v["wide"], v["narrow"])]
            out.append({"tree": tree, "config": label, "wide_rps": round(w),
                        "narrow_rps": round(n), "ratio_of_medians": round(w / n, 3),
                        "ratio_per_round": [round(x, 3) for x in ratios], "raw": v})
            print(f"{tree} {label}: wide {w:,.0f} / narrow {n:,.0f} rec/s = {w / n:.3f} "
                  f"(per round {[round(x, 3) for x in ratios]})")
        if args.out:
            Path(args.out).write_text(json.dumps(out, indent=1))
    finally:
        for c in clusters:
            c.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
