"""Exactly-once benchmark on a local 3-broker cluster (issues #11 and #23):

- idempotent produce throughput as a ratio to non-idempotent in the same run (goal >= 0.9):
  confluent-kafka, acks=all, 100 B records, RF 3, 6 partitions, alternating rounds so both see
  the same machine noise;
- transactions/s with 10 records each (begin, 10 produces over 3 partitions, commit), and
  the commit latency p50/p99 (commit_transaction: the records' acks, then EndTxn), one
  producer, with confluent-kafka and/or our producer (`--client confluent --client ours`).

    python3 bench/transactions.py [--rounds 3] [--records 200000] [--txns 300]

Two code trees side by side (issue #23: before/after), transactions only, RF 3 and RF 1: a
cluster per tree and replication factor is started from that tree (its brokers and
controllers), and rounds alternate between the trees and clients so all see the same noise.

    git worktree add /tmp/old <base commit>        # then build its C extension
    python3 bench/transactions.py --txn-only --tree /tmp/old --tree . --rf 3 --rf 1 \
        --client confluent --client ours --rounds 3 --txns 300

`--producers N`: N transactional producers at once (ids spread over the coordinators), the rate
of all together — where markers of several transactions meet on one broker.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from bench.code_tree import started_from  # noqa: E402
from partition_server.testing import LiveCluster  # noqa: E402

RF1 = {"default.replication.factor": "1", "min.insync.replicas": "1",
       "offsets.topic.replication.factor": "1", "transaction.state.log.replication.factor": "1",
       "transaction.state.log.min.isr": "1"}


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


def txn_rate(bootstrap: str, topic: str, txns: int, tid: str = "bench-txn",
             producers: int = 1) -> tuple[float, list[float]]:
    """`txns` transactions of 10 records, by `producers` producers at once (transactional ids
    `tid`-0, -1, ...: their coordinators spread over the brokers), each in its thread (librdkafka
    works outside the GIL); the rate is all of them together."""
    if producers > 1:
        return _together(producers, lambda i, n: txn_rate(bootstrap, topic, n, f"{tid}-{i}"),
                         txns)
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid,
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


def _together(producers: int, run_one, txns: int) -> tuple[float, list[float]]:
    """`run_one(i, n)` for every producer i at once, `txns` split between them."""
    import threading
    share = [txns // producers + (1 if i < txns % producers else 0) for i in range(producers)]
    outs: list = [None] * producers

    def one(i):
        outs[i] = run_one(i, share[i])
    threads = [threading.Thread(target=one, args=(i,)) for i in range(producers)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    if any(o is None for o in outs):
        raise RuntimeError("a producer failed")
    return txns / elapsed, [x for _, lat in outs for x in lat]


def txn_rate_ours(bootstrap: str, topic: str, txns: int, tid: str,
                  producers: int = 1) -> tuple[float, list[float]]:
    """The same loop with our producer (clients/, trio; EndTxn v5); several producers run as
    tasks of one trio loop (so they share one core of the client's)."""
    import trio

    from clients.producer import Producer as OurProducer
    share = [txns // producers + (1 if i < txns % producers else 0) for i in range(producers)]

    async def one(i, n, latencies):
        name = tid if producers == 1 else f"{tid}-{i}"
        async with OurProducer(bootstrap, {"transactional.id": name, "linger.ms": 1}) as p:
            await p.init_transactions(60)
            for _ in range(n):
                await p.begin_transaction()
                for k in range(10):
                    await p.send(topic, b"y" * 100, partition=k % 3)
                c0 = time.perf_counter()
                await p.commit_transaction(60)
                latencies.append(time.perf_counter() - c0)

    async def run():
        latencies: list[float] = []
        t0 = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for i in range(producers):
                nursery.start_soon(one, i, share[i], latencies)
        return txns / (time.perf_counter() - t0), latencies
    return trio.run(run)


def cluster_cpu_s(cluster: LiveCluster) -> float:
    """User + system CPU seconds used so far by every node process of `cluster` (Linux)."""
    total = 0
    for p in cluster.procs:
        with open(f"/proc/{p.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


COUNTED = ("WriteTxnMarkers", "AddPartitionsToTxn", "Fetch")


def request_counts(cluster: LiveCluster) -> dict[str, float]:
    """Requests answered so far by all brokers of `cluster`, per API of COUNTED (their /metrics):
    markers batched across transactions show as fewer WriteTxnMarkers per transaction."""
    import re
    import urllib.request
    out = dict.fromkeys(COUNTED, 0.0)
    for b in cluster.layout.broker_ids:
        url = f"http://{cluster.layout.broker_host(b)}:{cluster.layout.metrics_port(b)}/metrics"
        text = urllib.request.urlopen(url, timeout=10).read().decode()
        for m in re.finditer(r'^raftka_requests_total\{api="(\w+)"\} (\S+)$', text, re.M):
            if m.group(1) in out:
                out[m.group(1)] += float(m.group(2))
    return out


def start_cluster(tree: str | None, rf: int) -> LiveCluster:
    """A cluster whose nodes run the code of `tree` (`-m` puts the cwd first on the path)."""
    overrides = {"transaction.state.log.num.partitions": "6", **(RF1 if rf == 1 else {})}
    with started_from(tree):
        return LiveCluster(Path(tempfile.mkdtemp(prefix="bench-txn-")), overrides).start()


def compare_trees(args) -> None:
    """Transactions only: every tree x RF x client, rounds alternating (see the docstring)."""
    trees = [os.path.abspath(t) for t in args.tree] if args.tree else [None]
    runners = {"confluent": txn_rate, "ours": txn_rate_ours}
    results: dict = {}
    load_before = os.getloadavg()
    for rf in args.rf:
        clusters = {}
        try:
            for tree in trees:
                clusters[tree] = c = start_cluster(tree, rf)
                admin = AdminClient({"bootstrap.servers": c.bootstrap})
                admin.create_topics([NewTopic("bench-txn", 3, rf)])["bench-txn"].result(30)
                for client in args.client:                              # warm-up
                    runners[client](c.bootstrap, "bench-txn", 20 * args.producers,
                                    f"bench-{client}", args.producers)
            for r in range(args.rounds):
                order = [(t, c) for t in trees for c in args.client]
                for tree, client in (order if r % 2 == 0 else order[::-1]):
                    cpu0 = cluster_cpu_s(clusters[tree])
                    req0 = request_counts(clusters[tree])
                    rate, lat = runners[client](clusters[tree].bootstrap, "bench-txn",
                                                args.txns, f"bench-{client}", args.producers)
                    cpu = (cluster_cpu_s(clusters[tree]) - cpu0) / args.txns * 1000
                    req1 = request_counts(clusters[tree])
                    per = "  ".join(f"{k} {(req1[k] - req0[k]) / args.txns:.2f}" for k in COUNTED)
                    results.setdefault((rf, client, tree), []).append((rate, lat, cpu))
                    print(f"RF {rf} {client:9s} {tree or '.'}: {rate:.1f} txn/s, commit p50 "
                          f"{pct(lat, 0.5) * 1000:.1f} ms, p99 {pct(lat, 0.99) * 1000:.1f} ms, "
                          f"cluster CPU {cpu:.1f} ms/txn (load {os.getloadavg()[0]:.1f}); "
                          f"requests per txn: {per}", flush=True)
        finally:
            for c in clusters.values():
                c.stop()
    load_after = os.getloadavg()
    print("\nRF | client | tree | txn/s (median of rounds) | commit p50 ms | p99 ms | "
          "cluster CPU ms/txn (median)")
    for (rf, client, tree), runs in results.items():
        lat = [x for _, ls, _ in runs for x in ls]
        print(f"{rf} | {client} | {tree or '.'} | "
              f"{statistics.median(r for r, _, _ in runs):.1f} | {pct(lat, 0.5) * 1000:.1f} | "
              f"{pct(lat, 0.99) * 1000:.1f} | {statistics.median(c for _, _, c in runs):.1f}")
    if len(trees) == 2:
        print("\nratios (txn/s and CPU: last tree / first; commit p50: first / last):")
        for rf in args.rf:
            for client in args.client:
                a, b = results.get((rf, client, trees[0])), results.get((rf, client, trees[1]))
                if a and b:
                    ra = statistics.median(r for r, _, _ in a)
                    rb = statistics.median(r for r, _, _ in b)
                    pa = pct([x for _, ls, _ in a for x in ls], 0.5)
                    pb = pct([x for _, ls, _ in b for x in ls], 0.5)
                    ca = statistics.median(c for _, _, c in a)
                    cb = statistics.median(c for _, _, c in b)
                    print(f"RF {rf} {client}: throughput x{rb / ra:.2f}, commit p50 "
                          f"x{pa / pb:.2f} faster, cluster CPU per txn x{cb / ca:.2f}")
    print(f"producers at once: {args.producers}")
    print(f"load average (1, 5, 15 min) before {load_before[0]:.1f} {load_before[1]:.1f} "
          f"{load_before[2]:.1f}, after {load_after[0]:.1f} {load_after[1]:.1f} "
          f"{load_after[2]:.1f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--txns", type=int, default=300)
    ap.add_argument("--txn-only", action="store_true",
                    help="transactions only (with --tree, --rf, --client)")
    ap.add_argument("--tree", action="append", help="a code tree to run the cluster from (repeat)")
    ap.add_argument("--rf", action="append", type=int, choices=(1, 3),
                    help="replication factor of the transactions' topics (repeat; default 3)")
    ap.add_argument("--client", action="append", choices=("confluent", "ours"),
                    help="transactional producer (repeat; default confluent)")
    ap.add_argument("--producers", type=int, default=1,
                    help="transactional producers at once, each its own transactional.id "
                         "(--txns in all)")
    args = ap.parse_args()
    args.rf = args.rf or [3]
    args.client = args.client or ["confluent"]
    if args.txn_only or args.tree:
        compare_trees(args)
        return
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
