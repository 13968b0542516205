"""Replication benchmark on a local 3-controller + 3-broker cluster (issue #6):

- produce throughput with RF=3 acks=all (min.insync.replicas=2) as a ratio to RF=1 acks=1,
  measured in the same run, alternating, same client settings (confluent-kafka, 100 B records,
  linger 5 ms, one partition each);
- end-to-end latency (produce → consume, RF=3 acks=all, producer linger 5 ms) p50/p99 at a
  steady 2,000 msg/s (send time in the value, same machine clock);
- failover: time from SIGKILL of the partition leader to the first acknowledged write (of a
  record sent after the kill) on the new leader, several rounds, with the cluster's default
  timeouts unless --session-ms / --fence-ms is given.

    python3 bench/replication.py [--records 100000] [--rounds 2] [--latency-s 10] [--kills 3]
    python3 bench/replication.py --failover-only --kills 4 --fence-ms 1000   # compare graces
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from clients.cli.dev import DevLayout  # noqa: E402
from partition_server.testing import LiveCluster  # noqa: E402


@dataclasses.dataclass(frozen=True)
class SessionLayout(DevLayout):
    """The dev layout with the controllers' broker.session.timeout.ms and
    raftka.controller.disconnect.fence.ms set (None: the default)."""
    session_ms: int | None = None
    fence_ms: int | None = None

    def controller_properties(self, index: int) -> dict[str, str]:
        props = super().controller_properties(index)
        if self.session_ms is not None:
            props["broker.session.timeout.ms"] = str(self.session_ms)
        if self.fence_ms is not None:
            props["raftka.controller.disconnect.fence.ms"] = str(self.fence_ms)
        return props


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def create(bootstrap, name, rf, min_isr):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(name, 1, rf, config={
            "min.insync.replicas": str(min_isr)})]).values():
        fut.result(30)


def leader_of(bootstrap, topic):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return admin.list_topics(topic, timeout=10).topics[topic].partitions[0].leader


def throughput(bootstrap, topic, acks, records, size=100) -> float:
    p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5,
                  "queue.buffering.max.messages": 1_000_000, "batch.num.messages": 10000})
    payload = b"x" * size
    errors = []

    def cb(err, _msg):
        if err is not None:
            errors.append(err)
    t0 = time.perf_counter()
    for _ in range(records):
        while True:
            try:
                p.produce(topic, payload, partition=0, on_delivery=cb)
                break
            except BufferError:
                p.poll(0.01)
        p.poll(0)
    assert p.flush(120) == 0
    elapsed = time.perf_counter() - t0
    if errors:
        raise RuntimeError(f"{len(errors)} produce errors, first {errors[0]}")
    return records / elapsed


def e2e_latency(bootstrap, topic, rate, seconds, linger_ms=5):
    lat = []
    done = threading.Event()
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-e2e",
                  "enable.auto.commit": False, "fetch.wait.max.ms": 10})
    c.assign([TopicPartition(topic, 0, 0)])

    def consume():
        while not done.is_set() or len(lat) < sent[0]:
            m = c.poll(0.1)
            if m is None or m.error():
                if done.is_set() and time.time() > deadline[0]:
                    return
                continue
            lat.append(time.time() - float(m.value()))
    sent = [0]
    deadline = [float("inf")]
    t = threading.Thread(target=consume)
    t.start()
    time.sleep(1.0)                                  # the consumer has its assignment
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": linger_ms})
    start = time.perf_counter()
    for i in range(int(rate * seconds)):
        target = start + i / rate
        while time.perf_counter() < target:
            p.poll(0)
            time.sleep(max(0.0, min(0.0005, target - time.perf_counter())))
        p.produce(topic, repr(time.time()).encode(), partition=0)
        sent[0] += 1
    p.flush(30)
    done.set()
    deadline[0] = time.time() + 10
    t.join()
    c.close()
    return lat


def failover(cluster, topic, kills):
    out = []
    for _ in range(kills):
        acks = []
        stop = threading.Event()
        p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                      "linger.ms": 0, "retry.backoff.ms": 20, "message.timeout.ms": 60000})

        def writer():
            while not stop.is_set():
                sent = time.monotonic()
                p.produce(topic, b"f", partition=0,
                          on_delivery=lambda err, _m, s=sent: acks.append((s, time.monotonic()))
                          if err is None else None)
                p.poll(0.005)
        t = threading.Thread(target=writer)
        t.start()
        time.sleep(1.0)
        leader = leader_of(cluster.bootstrap, topic)
        t_kill = time.monotonic()
        cluster.kill(f"broker-{leader}")
        while not any(s >= t_kill for s, _ in acks) and time.monotonic() - t_kill < 60:
            time.sleep(0.01)
        first = min((a for s, a in acks if s >= t_kill), default=None)
        stop.set()
        t.join()
        p.flush(60)
        out.append(first - t_kill if first is not None else float("inf"))
        cluster.restart_broker(leader)
        time.sleep(3)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--rate", type=int, default=2000)
    ap.add_argument("--latency-s", type=float, default=10)
    ap.add_argument("--kills", type=int, default=3)
    ap.add_argument("--session-ms", type=int, help="controller broker.session.timeout.ms")
    ap.add_argument("--fence-ms", type=int,
                    help="controller raftka.controller.disconnect.fence.ms")
    ap.add_argument("--failover-only", action="store_true", help="only the failover rounds")
    args = ap.parse_args()
    overrides = {}
    with tempfile.TemporaryDirectory() as d:
        cluster = LiveCluster(Path(d), overrides)
        if args.session_ms or args.fence_ms is not None:
            old = cluster.layout
            cluster.layout = SessionLayout(old.data_dir, old.base_port, old.overrides,
                                           session_ms=args.session_ms, fence_ms=args.fence_ms)
        with cluster:
            b = cluster.bootstrap
            if args.failover_only:
                create(b, "failover", 3, 2)
                fo = failover(cluster, "failover", args.kills)
                print(f"leader SIGKILL -> first ack on the new leader: "
                      f"{', '.join(f'{x:.2f}' for x in fo)} s; median "
                      f"{statistics.median(fo):.2f} s (goal < 2 s)")
                return 0
            create(b, "rf1", 1, 1)
            create(b, "rf3", 3, 2)
            create(b, "e2e", 3, 2)
            create(b, "failover", 3, 2)
            throughput(b, "rf1", "1", 5000)                       # warm up both paths
            throughput(b, "rf3", "all", 5000)
            r1, r3 = [], []
            for _ in range(args.rounds):
                r1.append(throughput(b, "rf1", "1", args.records))
                r3.append(throughput(b, "rf3", "all", args.records))
            m1, m3 = statistics.median(r1), statistics.median(r3)
            print(f"produce RF=1 acks=1:   {m1:,.0f} rec/s  (rounds {[round(x) for x in r1]})")
            print(f"produce RF=3 acks=all: {m3:,.0f} rec/s  (rounds {[round(x) for x in r3]})")
            print(f"ratio RF=3 acks=all / RF=1 acks=1: {m3 / m1:.2f}  (goal >= 0.5)")
            lat = e2e_latency(b, "e2e", args.rate, args.latency_s)
            print(f"end-to-end at {args.rate} msg/s (RF=3 acks=all): {len(lat)} records, "
                  f"p50 {pct(lat, 0.5) * 1000:.1f} ms, p99 {pct(lat, 0.99) * 1000:.1f} ms "
                  f"(linger 5 ms; goal p99 <= 20 ms)")
            fo = failover(cluster, "failover", args.kills)
            print(f"leader SIGKILL -> first ack on the new leader: "
                  f"{', '.join(f'{x:.2f}' for x in fo)} s; median {statistics.median(fo):.2f} s "
                  f"(goal < 2 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
