"""Produce over many partitions vs few, side by side, for one or more code trees (issue 17).

The produce half of `bench/partitions.py`'s throughput step without the rest of that bench:
for each tree in `--trees` a dev cluster (3 controllers + 3 brokers, RF 3,
min.insync.replicas 2) is started from that tree (its processes run with PYTHONPATH=tree), with
`--wide` partitions in topics of 100 and one `--narrow`-partition topic. Then rounds alternate
tree by tree and, within a tree, narrow then wide, so every figure of a round shares the
machine's load of the moment. Records: 100 B, acks=all, librdkafka with linger 5 ms
(`partitions_throughput.Throughput`, the headline configuration); `--linger-ms` adds rounds with
other linger values as information only. Before the rounds every partition gets one record (the
first append to a new follower replica writes its leader-epoch checkpoint with two fsyncs).

    python3 bench/produce_partitions.py --records 60000 --rounds 3
    python3 bench/produce_partitions.py --trees /tmp/pm-old,. --rounds 3      # before/after
    python3 bench/produce_partitions.py --hold 120     # keep producing wide (for py-spy)
    python3 bench/produce_partitions.py --configs 'linger.ms=10,batch.size=16384'  # + other settings
    python3 bench/produce_partitions.py --clients confluent,raftka,kafka-python --records 600000

`--clients` measures other producers too, in the same rounds: `raftka` (our SyncProducer) and
`kafka-python` both put every partition bound for a broker into one ProduceRequest, as Kafka's
Java producer does; librdkafka (`confluent`) sends one partition per request.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from clients.cli.dev import stop_cluster  # noqa: E402
from bench.code_tree import started_from  # noqa: E402
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


def follower_fetches(cluster: LiveCluster) -> int:
    """Follower fetches sent so far by all brokers (their /metrics counter)."""
    import urllib.request
    total = 0
    for b in (0, 1, 2):
        url = f"http://127.0.0.1:{cluster.layout.metrics_port(b)}/metrics"
        for line in urllib.request.urlopen(url, timeout=10).read().decode().splitlines():
            if line.startswith("raftka_replica_fetch_requests_total{"):
                total += int(float(line.rsplit(" ", 1)[1]))
    return total


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


class OtherClient:
    """A round of `records` x 100 B, acks=all, linger 5 ms, over `tps`, with a producer that is
    not librdkafka: `raftka` (clients/producer SyncProducer) or `kafka-python`."""

    def __init__(self, kind: str, bootstrap: str, tps: list[tuple[str, int]]):
        self.kind, self.bootstrap, self.tps = kind, bootstrap, tps

    def round(self, records: int, timeout_s: float, consume: bool = False,
              producer_config: dict | None = None) -> dict:
        linger = int((producer_config or {}).get("linger.ms", 5))
        payload, n, errors = b"x" * 100, len(self.tps), []
        if self.kind == "raftka":
            from clients.producer.sync import SyncProducer
            p = SyncProducer(self.bootstrap, {"acks": "all", "linger.ms": linger,
                                              "enable.idempotence": False},
                             max_queued=1_000_000)
            cb = (lambda meta, exc: errors.append(exc) if exc is not None else None)
            t0 = time.perf_counter()
            for i in range(records):
                topic, part = self.tps[i % n]
                p.send(topic, payload, partition=part, on_delivery=cb)
            enqueue_s = time.perf_counter() - t0
            p.flush(timeout_s)
            produce_s = time.perf_counter() - t0
            p.close(10)
        else:
            from kafka import KafkaProducer
            p = KafkaProducer(bootstrap_servers=self.bootstrap, acks="all", linger_ms=linger)
            futures = []
            t0 = time.perf_counter()
            for i in range(records):
                topic, part = self.tps[i % n]
                futures.append(p.send(topic, payload, partition=part))
            enqueue_s = time.perf_counter() - t0
            p.flush(timeout_s)
            produce_s = time.perf_counter() - t0
            errors = [f.exception for f in futures if f.failed()]
            p.close(10)
        if errors:
            raise RuntimeError(f"{self.kind}: {len(errors)} records failed: {errors[:1]}")
        return {"produce_rps": round(records / produce_s), "enqueue_s": round(enqueue_s, 3)}


class TreeCluster:
    def __init__(self, tree: Path, data_dir: Path, wide: int, narrow: int,
                 clients: tuple[str, ...] = ("confluent",)):
        self.tree = tree
        with started_from(tree):                    # bench/code_tree.py says why both
            self.cluster = LiveCluster(data_dir).start(120)
        wide_topics = {f"wide-{i:03d}": TOPIC_PARTITIONS
                       for i in range((wide + TOPIC_PARTITIONS - 1) // TOPIC_PARTITIONS)}
        create(self.cluster.bootstrap, wide_topics | {"narrow": narrow})
        wide_tps = [(t, q) for t in wide_topics for q in range(TOPIC_PARTITIONS)][:wide]
        # One record per partition first: a follower's first append to a new partition writes
        # its leader-epoch checkpoint (two fsyncs), ~2,000 of them over 1,000 partitions RF 3,
        # which would otherwise land in whichever round comes first.
        Throughput(self.cluster.bootstrap, wide_tps + [("narrow", q) for q in range(narrow)]) \
            .round(wide + narrow, 600, consume=False)
        sets = {"narrow": [("narrow", q) for q in range(narrow)], "wide": wide_tps}
        self.runs = {}
        for client in clients:
            for name, tps in sets.items():
                key = name if client == "confluent" else f"{name}/{client}"
                self.runs[key] = Throughput(self.cluster.bootstrap, tps) \
                    if client == "confluent" else OtherClient(client, self.cluster.bootstrap, tps)

    def pids(self) -> dict[str, int]:
        return {p.name: p.proc.pid for p in self.cluster.procs}

    def stop(self) -> None:
        try:
            stop_cluster(self.cluster.procs)
        finally:
            for p in self.cluster.procs:
                if p.proc.poll() is None:
                    p.proc.kill()


def measure(c: TreeCluster, name: str, records: int, cfg: dict) -> dict:
    """One produce round on `c`'s narrow or wide set, with what it cost the brokers."""
    stats = RequestStats()
    fetches0 = follower_fetches(c.cluster)
    cpu0 = {n: proc_cpu_s(p) for n, p in c.pids().items()}
    r = c.runs[name].round(records, 600, consume=False, producer_config=cfg | stats.config())
    cpu = {n: proc_cpu_s(p) - cpu0[n] for n, p in c.pids().items()}
    r["broker_cpu_ms"] = round(1000 * sum(v for n, v in cpu.items() if "broker" in n))
    r["follower_fetches"] = follower_fetches(c.cluster) - fetches0
    r |= stats.summary()
    r["cpu_ms_per_request"] = round(r["broker_cpu_ms"] / r["produce_requests"], 3) \
        if r["produce_requests"] else None
    r["cpu_ms_per_1000_records"] = round(1000 * r["broker_cpu_ms"] / records, 2)
    return r


def summarize(got: dict) -> list:
    out = []
    for (tree, label), v in got.items():
        if not v["wide"] or not v["narrow"]:
            continue
        w = statistics.median(r["produce_rps"] for r in v["wide"])
        n = statistics.median(r["produce_rps"] for r in v["narrow"])
        ratios = [a["produce_rps"] / b["produce_rps"] for a, b in zip(v["wide"], v["narrow"])]
        per_req = [r["cpu_ms_per_request"] for r in v["wide"] if r["cpu_ms_per_request"]]
        cpu = statistics.median(per_req) if per_req else float("nan")
        per_k = statistics.median(r["cpu_ms_per_1000_records"] for r in v["wide"])
        out.append({"tree": tree, "config": label, "wide_rps": round(w), "narrow_rps": round(n),
                    "ratio_of_medians": round(w / n, 3),
                    "ratio_per_round": [round(x, 3) for x in ratios],
                    "wide_cpu_ms_per_request_median": cpu,
                    "wide_cpu_ms_per_1000_records_median": per_k, "rounds": v})
        print(f"{tree} {label}: wide {w:,.0f} / narrow {n:,.0f} rec/s = {w / n:.3f} "
              f"(per round {[round(x, 3) for x in ratios]}); wide: brokers' CPU {cpu:.2f} ms "
              f"per request, {per_k:.1f} ms per 1,000 records (medians)")
    return out


def _label(cfg: dict) -> str:
    """linger2000 for {"linger.ms": 2000} (the label of earlier runs), else the pairs."""
    if list(cfg) == ["linger.ms"]:
        return f"linger{cfg['linger.ms']}"
    return ",".join(f"{k}={v}" for k, v in cfg.items())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trees", default=str(Path(__file__).resolve().parents[1]),
                    help="comma-separated code trees, one cluster each")
    ap.add_argument("--wide", type=int, default=1000)
    ap.add_argument("--narrow", type=int, default=6)
    ap.add_argument("--records", type=int, default=60_000, help="per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--linger-ms", default="", help="extra linger.ms values (information)")
    ap.add_argument("--configs", default="",
                    help="extra librdkafka configurations (information), ';' between sets, "
                         "',' between key=value pairs: 'linger.ms=10,batch.size=16384'")
    ap.add_argument("--only-extra", action="store_true",
                    help="skip the headline configuration (--linger-ms values only): with a "
                         "linger longer than the enqueue, every partition gets exactly one "
                         "request, so the brokers' CPU per request compares trees fairly")
    ap.add_argument("--hold", type=float, default=0,
                    help="instead: produce wide for this many seconds (for a profiler), with "
                         "the first --linger-ms/--configs set if one is given")
    ap.add_argument("--clients", default="confluent",
                    help="producers to measure, comma-separated: confluent (librdkafka, the "
                         "headline), raftka (ours), kafka-python")
    ap.add_argument("--out", help="write the results as JSON here")
    args = ap.parse_args()
    trees = [Path(t).resolve() for t in args.trees.split(",")]
    extra = [{"linger.ms": int(x)} for x in args.linger_ms.split(",") if x] + \
        [dict(kv.split("=", 1) for kv in c.split(",")) for c in args.configs.split(";") if c]
    configs = ([] if args.only_extra else [None]) + extra
    work = Path(tempfile.mkdtemp(prefix="produce-partitions-"))
    clusters: list[TreeCluster] = []
    got: dict = {}
    try:
        for i, tree in enumerate(trees):
            clusters.append(TreeCluster(tree, work / f"c{i}", args.wide, args.narrow,
                                        tuple(args.clients.split(","))))
            print(f"{tree}: {clusters[-1].pids()}", file=sys.stderr, flush=True)
        end = time.monotonic() + args.hold
        while time.monotonic() < end:
            for c in clusters:
                first = args.clients.split(",")[0]         # the first client holds the load
                run = "wide" if first == "confluent" else f"wide/{first}"
                # the first extra configuration, if any, shapes the held load
                r = c.runs[run].round(args.records, 600, consume=False,
                                      producer_config=extra[0] if extra else None)
                print(f"{c.tree} wide {r}", file=sys.stderr, flush=True)
        for rnd in range(0 if args.hold else args.rounds):
            for c in clusters:
                for client in args.clients.split(","):
                  for extra_cfg in (configs if client == "confluent" else [None]):
                    label = "headline" if extra_cfg is None else _label(extra_cfg)
                    label += "" if client == "confluent" else f" {client}"
                    cfg = extra_cfg or {}
                    for name in ("narrow", "wide"):
                        run = name if client == "confluent" else f"{name}/{client}"
                        r = measure(c, run, args.records, cfg)
                        got.setdefault((str(c.tree), label), {"narrow": [], "wide": []})[
                            name].append(r)
                        print(f"round {rnd} load {load_avg()} {c.tree} {label} {name}: {r}",
                              file=sys.stderr, flush=True)
        out = summarize(got)
        if args.out:
            Path(args.out).write_text(json.dumps(out, indent=1))
    finally:
        for c in clusters:
            c.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
