"""Steady-state produce over 1,000 partitions vs 6, by producer configuration (issue 17).

`bench/produce_partitions.py` times rounds of N records from a fresh producer: librdkafka takes
them all into its queue in a fraction of a second and the round measures how that backlog
drains. A user's producer streams: its queue stays full (librdkafka's
`queue.buffering.max.messages`, 100,000 by default; `send()` blocking in ours) and the rate is
what the cluster acknowledges per second once that has settled. Here each producer streams
100 B records, acks=all, round-robin over the partitions of one set (6 or 1,000, RF 3,
min.insync.replicas 2, on the 3-controller + 3-broker dev cluster) for `--seconds`, and the rate
counts the records acknowledged after `--warm` seconds; then the producer drains and the next
set or producer runs, alternating within each round.

Producers (each with its library's defaults except acks=all and 100 B records):
- `librdkafka`: confluent-kafka as configured by default — not idempotent, up to 1,000,000
  requests in flight per connection;
- `librdkafka-idempotent`: `enable.idempotence=true` (5 in flight; the Java producer's default
  since Kafka 3.0);
- `raftka`: our SyncProducer (idempotent by default, every partition bound for a broker in one
  ProduceRequest, as the Java producer).

    python3 bench/produce_steady.py [--seconds 30] [--warm 10] [--rounds 3]

Per run: records/s, the cluster's CPU per record (all six processes) and, for librdkafka, the
records per ProduceRequest (its statistics).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from confluent_kafka import Producer  # noqa: E402

from produce_partitions import TreeCluster, load_avg, proc_cpu_s  # noqa: E402

PRODUCERS = {"librdkafka": {}, "librdkafka-idempotent": {"enable.idempotence": True},
             "raftka": None}
PAYLOAD = b"x" * 100


class _Window:
    """Acknowledged records and the cluster's CPU between the end of the warm-up and the end."""

    def __init__(self, pids: list[int]):
        self.pids = pids
        self.acked = 0
        self.failed = 0
        self.start = None

    def on_ack(self, ok: bool) -> None:
        if ok:
            self.acked += 1
        else:
            self.failed += 1

    def mark(self) -> None:
        self.start = (time.monotonic(), self.acked, sum(proc_cpu_s(p) for p in self.pids))

    def result(self) -> dict:
        t, acked, cpu = time.monotonic(), self.acked, sum(proc_cpu_s(p) for p in self.pids)
        n = acked - self.start[1]
        return {"rps": round(n / (t - self.start[0])),
                "cpu_us_per_record": round((cpu - self.start[2]) / max(n, 1) * 1e6, 2)}


def _librdkafka(bootstrap: str, tps: list, extra: dict, seconds: float, warm: float,
                window: _Window) -> dict:
    stats: list[tuple[float, dict]] = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "statistics.interval.ms": 500,
                  "stats_cb": lambda s: stats.append((time.monotonic(), json.loads(s)))} | extra)

    def cb(err, _msg):
        window.on_ack(err is None)
    t0, i, n = time.monotonic(), 0, len(tps)
    while (now := time.monotonic()) - t0 < seconds:
        if window.start is None and now - t0 >= warm:
            window.mark()
        topic, part = tps[i % n]
        try:
            p.produce(topic, PAYLOAD, partition=part, on_delivery=cb)
            i += 1
        except BufferError:                 # the queue is full: wait for acknowledgements
            p.poll(0.005)
        if i % 1000 == 0:
            p.poll(0)
    out = window.result()
    requests = [(t, sum(b["req"].get("Produce", 0) for b in s["brokers"].values()))
                for t, s in stats]
    after = [(t, r) for t, r in requests if t >= window.start[0]]
    if len(after) >= 2 and after[-1][1] > after[0][1]:
        (t0, r0), (t1, r1) = after[0], after[-1]
        out["records_per_request"] = round(out["rps"] * (t1 - t0) / (r1 - r0), 1)
    left = p.flush(300)
    if left:
        raise RuntimeError(f"{left} records not delivered after the run")
    return out


def _ours(bootstrap: str, tps: list, seconds: float, warm: float, window: _Window) -> dict:
    from clients.producer.sync import SyncProducer
    p = SyncProducer(bootstrap, {"acks": "all"})
    t0, i, n = time.monotonic(), 0, len(tps)
    try:
        while (now := time.monotonic()) - t0 < seconds:
            if window.start is None and now - t0 >= warm:
                window.mark()
            topic, part = tps[i % n]
            p.send(topic, PAYLOAD, partition=part,
                   on_delivery=lambda _m, exc: window.on_ack(exc is None))
            i += 1
        out = window.result()
        p.flush(300)
    finally:
        p.close(30)
    return out


def run(cluster: TreeCluster, producer: str, name: str, seconds: float, warm: float) -> dict:
    tps = cluster.runs[name].tps
    window = _Window(list(cluster.pids().values()))
    if PRODUCERS[producer] is None:
        out = _ours(cluster.cluster.bootstrap, tps, seconds, warm, window)
    else:
        out = _librdkafka(cluster.cluster.bootstrap, tps, PRODUCERS[producer], seconds, warm,
                          window)
    if window.failed:
        raise RuntimeError(f"{producer} {name}: {window.failed} records failed")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--warm", type=float, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--producers", default=",".join(PRODUCERS))
    args = ap.parse_args()
    if not 0 <= args.warm < args.seconds:
        ap.error("--warm must be at least 0 and less than --seconds")
    producers = args.producers.split(",")
    unknown = set(producers) - set(PRODUCERS)
    if unknown:
        ap.error(f"unknown producers {sorted(unknown)}; known: {', '.join(PRODUCERS)}")
    cluster = TreeCluster(Path(__file__).resolve().parents[1],
                          Path(tempfile.mkdtemp(prefix="bench-produce-steady-")), 1000, 6)
    got: dict = {(p, s): [] for p in producers for s in ("narrow", "wide")}
    try:
        for rnd in range(args.rounds):
            for producer in producers:
                for name in ("narrow", "wide"):
                    r = run(cluster, producer, name, args.seconds, args.warm)
                    got[(producer, name)].append(r)
                    print(f"round {rnd} load {load_avg()} {producer:22s} {name:6s} {r}",
                          flush=True)
    finally:
        cluster.stop()
    print("\nmedians: wide / narrow records/s (ratio per round), CPU µs per record")
    for producer in producers:
        w, n = got[(producer, "wide")], got[(producer, "narrow")]
        ratios = [round(a["rps"] / b["rps"], 3) for a, b in zip(w, n)]
        wm, nm = (statistics.median(r["rps"] for r in x) for x in (w, n))
        print(f"{producer:22s} {wm:>9,.0f} / {nm:>9,.0f} = {wm / nm:.3f} {ratios}  CPU wide "
              f"{statistics.median(r['cpu_us_per_record'] for r in w):.1f} narrow "
              f"{statistics.median(r['cpu_us_per_record'] for r in n):.1f}")


if __name__ == "__main__":
    main()
