"""Consumer-group benchmark on a local 3-broker cluster (issue #7):

- time for a 3-member group to become stable after the members subscribe (every member holds
  partitions and together they hold all 6 once), with the classic protocol and with KIP-848
  (`group.protocol=consumer`), several rounds each, confluent-kafka members;
- OffsetCommit throughput and latency p50/p99: one member committing synchronously, one commit
  per call (each is an acks=all append to `__consumer_offsets`).

    python3 bench/groups.py [--rounds 5] [--commits 2000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Consumer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from partition_server.testing import LiveCluster  # noqa: E402


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def time_to_stable(bootstrap: str, topic: str, group: str, protocol: str) -> float:
    current: dict[int, set] = {}
    stop = threading.Event()

    def member(i):
        conf = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": protocol}
        if protocol == "classic":
            conf["session.timeout.ms"] = 10000
        c = Consumer(conf)
        c.subscribe([topic])
        while not stop.is_set():
            c.poll(0.05)
            current[i] = {tp.partition for tp in c.assignment()}
        c.close()
    t0 = time.perf_counter()
    threads = [threading.Thread(target=member, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    while True:
        parts = [p for ps in list(current.values()) for p in ps]
        if len(current) == 3 and all(current.values()) and sorted(parts) == list(range(6)):
            break
        if time.perf_counter() - t0 > 120:
            raise RuntimeError("group did not settle in 120 s")
        time.sleep(0.01)
    elapsed = time.perf_counter() - t0
    stop.set()
    for t in threads:
        t.join()
    return elapsed


def commit_rate(bootstrap: str, topic: str, commits: int) -> tuple[float, float, float]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-commits",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    lat = []
    start = time.perf_counter()
    for i in range(commits):
        t0 = time.perf_counter()
        c.commit(offsets=[TopicPartition(topic, 0, i + 1)], asynchronous=False)
        lat.append(time.perf_counter() - t0)
    elapsed = time.perf_counter() - start
    c.close()
    return commits / elapsed, pct(lat, 0.5) * 1000, pct(lat, 0.99) * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--commits", type=int, default=2000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d, LiveCluster(Path(d)) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        for fut in admin.create_topics([NewTopic("bench-groups", 6, 3)]).values():
            fut.result(30)
        rows = []
        for protocol in ("classic", "consumer"):
            times = [time_to_stable(cluster.bootstrap, "bench-groups", f"bench-{protocol}-{r}",
                                    protocol) for r in range(args.rounds)]
            rows.append((protocol, pct(times, 0.5), max(times)))
        rate, p50, p99 = commit_rate(cluster.bootstrap, "bench-groups", args.commits)
    print(f"{'group protocol':<16}{'stable p50 (s)':>16}{'stable max (s)':>16}")
    for protocol, p50s, mx in rows:
        print(f"{protocol:<16}{p50s:>16.2f}{mx:>16.2f}")
    print(f"\nOffsetCommit (sync, 1 partition): {rate:,.0f}/s  p50 {p50:.1f} ms  p99 {p99:.1f} ms")


if __name__ == "__main__":
    main()
