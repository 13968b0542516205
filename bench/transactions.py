"""Exactly-once benchmark on a local 3-broker cluster (issue #11):

- idempotent produce throughput as a ratio to non-idempotent in the same run (goal >= 0.9):
  confluent-kafka, acks=all, 100 B records, RF 3, 6 partitions, alternating rounds so both see
  the same machine noise;
- transactions/s with 10 records each (begin, 10 produces over 3 partitions, commit), and
  the commit latency p50/p99 (EndTxn → markers on every partition → Complete).

    python3 bench/transactions.py [--rounds 3] [--records 200000] [--txns 300]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from partition_server.testing import LiveCluster  # noqa: E402


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def produce_rate(bootstrap: str, topic: str, n: int, idempotent: bool) -> float:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                  "enable.idempotence": idempotent, "batch.num.messages": 10000,
                  "queue.buffering.max.messages": 1_000_000})
    value = b"x" * 100
    t0 = time.perf_counter()
    for i in range(n):
        while True:
            try:
                p.produce(topic, value, partition=i % 6)
                break
            except BufferError:
                p.poll(0.01)
        if i % 10000 == 0:
            p.poll(0)
    left = p.flush(120)
    elapsed = time.perf_counter() - t0
    if left:
        raise RuntimeError(f"{left} records not delivered")
    return n / elapsed


def txn_rate(bootstrap: str, topic: str, txns: int) -> tuple[float, list[float]]:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "bench-txn",
                  "linger.ms": 1})
    p.init_transactions(60)
    latencies = []
    t0 = time.perf_counter()
    for _ in range(txns):
        p.begin_transaction()
        for i in range(10):
            p.produce(topic, b"y" * 100, partition=i % 3)
        c0 = time.perf_counter()
        p.commit_transaction(60)
        latencies.append(time.perf_counter() - c0)
    return txns / (time.perf_counter() - t0), latencies


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--txns", type=int, default=300)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        cluster = LiveCluster(Path(d), {"transaction.state.log.num.partitions": "6"}).start()
        try:
            admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
            for fut in admin.create_topics([NewTopic("bench-idem", 6, 3),
                                            NewTopic("bench-txn", 3, 3)]).values():
                fut.result(30)
            produce_rate(cluster.bootstrap, "bench-idem", 20_000, True)       # warm-up
            plain, idem = [], []
            for r in range(args.rounds):
                order = (False, True) if r % 2 == 0 else (True, False)
                for idempotent in order:
                    rate = produce_rate(cluster.bootstrap, "bench-idem", args.records, idempotent)
                    (idem if idempotent else plain).append(rate)
                    print(f"round {r}: {'idempotent' if idempotent else 'plain':10s} "
                          f"{rate:,.0f} rec/s", flush=True)
            ratio = statistics.median(idem) / statistics.median(plain)
            print(f"produce acks=all 100 B: plain {statistics.median(plain):,.0f} rec/s, "
                  f"idempotent {statistics.median(idem):,.0f} rec/s, ratio {ratio:.2f}")
            rate, lat = txn_rate(cluster.bootstrap, "bench-txn", args.txns)
            print(f"transactions of 10 records: {rate:.1f} txn/s, commit p50 "
                  f"{pct(lat, 0.5) * 1000:.1f} ms, p99 {pct(lat, 0.99) * 1000:.1f} ms")
        finally:
            cluster.stop()


if __name__ == "__main__":
    main()
