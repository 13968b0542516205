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
after flush), its cheapest use. CPU per record is the process's CPU time (all threads) from the
first send to the end of the flush, divided by N.

Results (2026-11-23, shared 2-core machine, 200k x 100 B, 3 rounds, medians):

| run (load average 1 min, before-after) | confluent-kafka | async Producer | SyncProducer | sync / async | sync / confluent |
|---|---|---|---|---|---|
| 16:06 (9.1-8.0) | 402,699 rec/s, 2.0 us CPU | 269,789, 2.5 us | 157,461, 4.9 us | 0.58 | 0.39 |
| 16:06 (7.3-5.8) | 461,648, 2.4 us | 298,097, 3.3 us | 163,212, 5.9 us | 0.55 | 0.35 |
| 16:07 --no-callback (5.4-4.4) | 335,312, 3.2 us | 272,737, 3.6 us | 164,337, 5.7 us | 0.60 | 0.49 |

Before (the SyncProducer of 8b35522: a concurrent.futures.Future per send, a lock and notify
per record in the drain, a closure + callback per record), same machine, same run as the new
one (/tmp script, 3 rounds, load 10-13): 17,370 rec/s and 31-36 us CPU per record, against
87,092 (new, with on_delivery) and 159,105 (new, no callback) at 4-7 us. Where the
SyncProducer's ~5 us go (thread CPU clocks, one run): ~1.7 us in the caller's `send` (the
SendFuture, one lock, the queue) and ~2.6 us on the loop thread (send_nowait ~1.3, the drain
loop, sender and completion), the rest switching the GIL between the two threads; the async
producer does the loop thread's part only. Both threads need the GIL, so their costs add up
rather than overlap, and the machine's load hurts the two-thread design more (a thread that
waits for the GIL also waits for a CPU).
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


def produce_async(bootstrap: str, topic: str, n: int, record_size: int) -> dict:
    """Our async Producer as `raftka perf produce` drives it (send_nowait, falling back to
    send under back-pressure), with the same callback as the others."""
    import trio

    from clients.producer import Producer
    ensure_topic(bootstrap, topic, 6, 1)
    payload = b"x" * record_size
    errors = [0]

    def on_delivery(meta, exc):
        if exc is not None:
            errors[0] += 1

    async def run():
        async with Producer(bootstrap, CONFIG) as p:
            await p.cluster.wait_for_topic(topic)
            send_nowait = p.send_nowait
            cpu = time.process_time()
            start = time.perf_counter()
            for i in range(n):
                if send_nowait(topic, payload, on_delivery=on_delivery) is None:
                    await p.send(topic, payload, on_delivery=on_delivery)
                if i % 2000 == 0:
                    await trio.sleep(0)     # let the sender run between bursts
            await p.flush()
            return time.perf_counter() - start, time.process_time() - cpu
    elapsed, cpu = trio.run(run)
    return {"records_per_s": round(n / elapsed), "errors": errors[0],
            "cpu_us": round(cpu / n * 1e6, 2)}


def produce_confluent(bootstrap: str, topic: str, n: int, record_size: int) -> dict:
    """librdkafka with the settings of clients/cli/perf.py's loop."""
    from confluent_kafka import Producer
    ensure_topic(bootstrap, topic, 6, 1)
    p = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5,
                  "batch.size": 1 << 20, "queue.buffering.max.messages": 1_000_000,
                  "queue.buffering.max.kbytes": 1 << 21, "enable.idempotence": False})
    p.list_topics(topic, timeout=10)
    payload = b"x" * record_size
    errors = [0]

    def on_delivery(err, msg):
        if err is not None:
            errors[0] += 1

    cpu = time.process_time()
    start = time.perf_counter()
    for i in range(n):
        while True:
            try:
                p.produce(topic, payload, on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.01)
        if i % 10_000 == 0:
            p.poll(0)
    left = p.flush(120)
    elapsed = time.perf_counter() - start
    cpu = time.process_time() - cpu
    return {"records_per_s": round(n / elapsed), "errors": errors[0] + left,
            "cpu_us": round(cpu / n * 1e6, 2)}


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
                    out = produce_confluent(bs, topic, args.records, args.record_size)
                elif client == "async":
                    out = produce_async(bs, topic, args.records, args.record_size)
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
