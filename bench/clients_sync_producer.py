"""The blocking SyncProducer vs our async Producer vs confluent-kafka's Producer (issue #8).

A local 3-broker cluster; one topic per round (6 partitions, RF 1). Each client writes N keyless
records of 100 B with acks=1, linger.ms 5, no idempotence, and a delivery callback per record
(as `raftka perf produce` and clients/cli/perf.py's confluent loop do); the rounds alternate
between the clients. We report records/s (send of the first record to the acknowledgement of
the last, flush included), the process CPU time per record (all threads: the caller, our loop
thread, librdkafka's threads), the ratios to confluent-kafka (median of the rounds) and the load
average before and after.

    python3 bench/clients_sync_producer.py [--records 200000] [--rounds 3]

`--no-callback` sends the SyncProducer's records without on_delivery (only the handles, checked
after flush), its cheapest use.
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

from clients.cli.perf import ensure_topic  # noqa: E402
from clients.cli.perf import produce as confluent_produce  # noqa: E402
from clients.cli.perf import produce_raftka  # noqa: E402
from partition_server.testing import LiveCluster  # noqa: E402

CONFIG = {"acks": "1", "linger.ms": 5, "batch.size": 1 << 18, "buffer.memory": 64 << 20,
          "enable.idempotence": False, "client.id": "bench-sync"}


def produce_sync(bootstrap: str, topic: str, n: int, record_size: int,
                 callback: bool = True) -> dict:
    from clients.sync import SyncProducer
    ensure_topic(bootstrap, topic, 6, 1)
    payload = b"x" * record_size
    errors = [0]

    def on_delivery(meta, exc):
        if exc is not None:
            errors[0] += 1

    with SyncProducer(bootstrap, CONFIG) as p:
        p._loop.run(p._producer.cluster.wait_for_topic, topic)
        send = p.send
        cpu = time.process_time()
        start = time.perf_counter()
        if callback:
            for _ in range(n):
                send(topic, payload, on_delivery=on_delivery)
            last = None
        else:
            for _ in range(n - 1):
                send(topic, payload)
            last = send(topic, payload)
        p.flush()
        elapsed = time.perf_counter() - start
        cpu = time.process_time() - cpu
        if last is not None and last.exception() is not None:
            errors[0] += 1
    return {"records_per_s": round(n / elapsed), "errors": errors[0],
            "cpu_us": round(cpu / n * 1e6, 2)}


def timed(fn, *args, **kwargs) -> dict:
    cpu = time.process_time()
    out = fn(*args, **kwargs)
    out.setdefault("cpu_us", None)
    if out["cpu_us"] is None:
        # includes topic creation and connecting: an upper bound
        out["cpu_us"] = round((time.process_time() - cpu) / args[2] * 1e6, 2)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--record-size", type=int, default=100)
    ap.add_argument("--no-callback", action="store_true")
    args = ap.parse_args()
    clients = ("confluent", "async", "sync")
    rate = {c: [] for c in clients}
    cpu = {c: [] for c in clients}
    load_before = os.getloadavg()
    with LiveCluster(Path(tempfile.mkdtemp(prefix="bench-sync-producer-"))) as cluster:
        bs = cluster.bootstrap
        for r in range(args.rounds):
            for client in clients:
                topic = f"bench-{client}-{r}"
                if client == "confluent":
                    out = timed(confluent_produce, bs, topic, args.records, args.record_size,
                                acks="1", linger_ms=5, partitions=6, replication_factor=1,
                                progress=False)
                elif client == "async":
                    out = timed(produce_raftka, bs, topic, args.records, args.record_size,
                                acks="1", linger_ms=5, batch_size=1 << 18, partitions=6,
                                replication_factor=1, progress=False,
                                extra={"enable.idempotence": False})
                else:
                    out = produce_sync(bs, topic, args.records, args.record_size,
                                       callback=not args.no_callback)
                assert out["errors"] == 0, out
                rate[client].append(out["records_per_s"])
                cpu[client].append(out["cpu_us"])
                print(f"round {r} {client}: {out['records_per_s']:,} rec/s, "
                      f"{out['cpu_us']} us CPU/record", flush=True)
    load_after = os.getloadavg()
    med = {c: statistics.median(rate[c]) for c in clients}
    print("\n| client | rec/s (median) | per round | CPU us/record | / confluent | / async |")
    print("|---|---|---|---|---|---|")
    for c in clients:
        print(f"| {c} | {med[c]:,.0f} | {', '.join(f'{x:,}' for x in rate[c])} | "
              f"{statistics.median(cpu[c])} | {med[c] / med['confluent']:.2f} | "
              f"{med[c] / med['async']:.2f} |")
    print(f"load average (1, 5, 15 min) before {load_before[0]:.1f} {load_before[1]:.1f} "
          f"{load_before[2]:.1f}, after {load_after[0]:.1f} {load_after[1]:.1f} "
          f"{load_after[2]:.1f} on {os.cpu_count()} CPUs")
    print(json.dumps({"records_per_s": med, "load_before": load_before,
                      "load_after": load_after}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
