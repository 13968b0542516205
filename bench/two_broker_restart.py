"""Two brokers down together at scale, under a keyed producer (issue 17): N idle partitions in
topics of 100 plus a 1,000-partition topic (RF 3, min.insync.replicas 2) written by librdkafka
(idempotent, acks=all, ~300 records/s, keys over every partition); then broker-0 is SIGKILLed
and broker-2 SIGTERMed at once, and both are started again. Prints when both were unfenced,
when the topic was writable again (every partition with an ISR of 2 or more), when every ISR
was full, and the produce latency of the records sent from the kill on (message.timeout.ms is
raised to 180 s so every record is measured, not timed out).

    python3 bench/two_broker_restart.py --idle 30000
    python3 bench/two_broker_restart.py --idle 30000 --tree /tmp/old --tree . --rounds 2

With several trees, rounds alternate between them (a cluster per round), so all see the same
machine noise. Heartbeats every 500 ms and replica.lag.time.max.ms 3 s, as the chaos
campaign's cluster.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from bench.code_tree import started_from  # noqa: E402
from chaos_tests.campaign.scale import create_idle_partitions  # noqa: E402
from partition_server.testing import LiveCluster  # noqa: E402

OVERRIDES = {"broker.heartbeat.interval.ms": "500", "replica.lag.time.max.ms": "3000"}


def _keyed_isr(admin) -> tuple[int, int]:
    """(smallest ISR, partitions with a leader and an ISR of 2 or more) of the keyed topic."""
    md = admin.list_topics("keyed", timeout=30).topics["keyed"].partitions
    return (min(len(p.isrs) for p in md.values()),
            sum(1 for p in md.values() if len(p.isrs) >= 2 and p.leader >= 0))


class KeyedLoad:
    """librdkafka writing keyed records in a thread; latencies of records sent after `since`."""

    def __init__(self, bootstrap: str):
        self.p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                           "acks": "all", "linger.ms": 5, "message.timeout.ms": 180000,
                           "log_level": 2})
        self.latencies: list[float] = []
        self.errors = 0
        self.since: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)
        self._thread.start()

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            sent = time.monotonic()

            def done(err, _msg, sent=sent):
                if err:
                    self.errors += 1
                elif self.since is not None and sent >= self.since:
                    self.latencies.append(time.monotonic() - sent)
            self.p.produce("keyed", key=str(i).encode(), value=b"v" * 100, on_delivery=done)
            i += 1
            self.p.poll(0)
            time.sleep(1 / 300)
        self.p.flush(200)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def one_round(tree: str | None, idle: int) -> str:
    data = Path(tempfile.mkdtemp(prefix="bench-2restart-"))
    with started_from(tree):
        c = LiveCluster(data, overrides=OVERRIDES).start()
        try:
            return _measure(c, idle, tree or ".")
        finally:
            c.stop()


def _measure(c: LiveCluster, idle: int, label: str) -> str:
    create_idle_partitions(c.bootstrap, idle)
    admin = AdminClient({"bootstrap.servers": c.bootstrap, "log_level": 2})
    for f in admin.create_topics([NewTopic("keyed", 1000, 3, config={
            "min.insync.replicas": "2"})]).values():
        f.result(60)
    deadline = time.monotonic() + 120
    while _keyed_isr(admin)[0] < 3:
        if time.monotonic() > deadline:
            raise RuntimeError("the keyed topic's ISRs never filled")
        time.sleep(0.5)
    load = KeyedLoad(c.bootstrap)
    time.sleep(5)
    t0 = time.monotonic()
    load.since = t0
    marks: dict[str, float] = {}
    c.kill("broker-0", signal.SIGKILL)
    c.kill("broker-2", signal.SIGTERM)

    def restart(b):
        c.restart_broker(b, timeout_s=300)
        marks[f"broker-{b} unfenced"] = time.monotonic() - t0
    threads = [threading.Thread(target=restart, args=(b,)) for b in (0, 2)]
    for t in threads:
        t.start()
    writable = full = shrunk = None
    while full is None and time.monotonic() - t0 < 300:
        try:
            smallest, writable_count = _keyed_isr(admin)
        except Exception:           # a Metadata answer may time out while brokers restart
            time.sleep(0.5)
            continue
        now = time.monotonic() - t0
        if shrunk is None and writable_count < 1000:
            shrunk = now
        if shrunk is not None and writable is None and writable_count == 1000:
            writable = now
        if smallest == 3:
            full = now
        time.sleep(0.5)
    for t in threads:
        t.join()
    time.sleep(3)
    load.stop()
    lat = sorted(load.latencies)

    def q(x):
        return f"{lat[min(len(lat) - 1, int(x * len(lat)))]:.1f}" if lat else "-"

    def s(v):
        return "-" if v is None else f"{v:.1f}"
    unfenced = " ".join(f"{k} {v:.1f} s," for k, v in sorted(marks.items()))
    return (f"{label}: {unfenced} writable {s(writable)} s, full ISR {s(full)} s; produce "
            f"after the kill n={len(lat)} p50 {q(.5)} p90 {q(.9)} max {q(1)} s, "
            f"errors {load.errors} (load {os.getloadavg()[0]:.1f})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--idle", type=int, default=30000)
    ap.add_argument("--tree", action="append", help="code tree(s) to compare, alternating")
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    trees = [os.path.abspath(t) for t in args.tree] if args.tree else [None]
    for _ in range(args.rounds):
        for tree in trees:
            print(one_round(tree, args.idle), flush=True)


if __name__ == "__main__":
    main()
