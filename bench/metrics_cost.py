"""What the per-API request metrics cost (issue #22): common/request_metrics.py's timing and
counting around every request, on vs off (`RAFTKA_REQUEST_METRICS=0`).

1. In process: a trivial async dispatch called N times bare and through `RequestStats.wrap`
   (counts, errors, the queue/local/remote/total histograms and the remote-time context
   variable), in CPU time; the difference is the cost per request (µs). The send-time record
   of the socket edge is one more histogram observation (`record_send`), timed alone.
2. Live: a 3-broker cluster started with the metrics off, then on, alternating; each round
   produces `--records` records of 100 B to 6 partitions (RF 1, acks=1) with confluent-kafka
   and small batches (`batch.num.messages`), so that requests, not records, dominate; records/s
   per round, and the ratio on / off of the medians.

    python3 bench/metrics_cost.py [--calls 200000] [--records 60000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import types
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common.request_metrics import RequestStats  # noqa: E402


def in_process(calls: int) -> tuple[float, float]:
    answer = types.SimpleNamespace(error_code=0)
    request = types.SimpleNamespace(api_key=0)

    async def dispatch(ctx, req):
        return answer

    async def loop(fn):
        # CPU time of this process: on a loaded machine (load 10-30 while others test) the
        # wall clock mostly measures waiting for a core
        started = time.process_time()
        for _ in range(calls):
            await fn(None, request)
        return (time.process_time() - started) / calls * 1e6
    bare = min(trio.run(loop, dispatch) for _ in range(3))
    timed = min(trio.run(loop, RequestStats().wrap(dispatch)) for _ in range(3))
    stats = RequestStats()
    started = time.process_time()
    for _ in range(calls):
        stats.record_send(0, 0.0001)
    send = (time.process_time() - started) / calls * 1e6
    return bare, timed + send


def live_round(records: int, metrics_on: bool) -> float:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    from partition_server.testing import LiveCluster
    os.environ["RAFTKA_REQUEST_METRICS"] = "1" if metrics_on else "0"
    with LiveCluster(Path(tempfile.mkdtemp(prefix="bench-metrics-"))) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic("m", 6, 1)])["m"].result(30)
        p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "1", "linger.ms": 0,
                      "batch.num.messages": 20, "enable.idempotence": False,
                      "log_level": 0})
        value = b"x" * 100
        p.produce("m", value)
        p.flush(30)                                         # metadata known, connections up
        started = time.perf_counter()
        for i in range(records):
            while True:
                try:
                    p.produce("m", value, partition=i % 6)
                    break
                except BufferError:
                    p.poll(0.01)
            p.poll(0)
        p.flush(120)
        return records / (time.perf_counter() - started)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=200_000)
    ap.add_argument("--records", type=int, default=60_000)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    bare, timed = in_process(args.calls)
    print(f"in process: {bare:.3f} µs bare, {timed:.3f} µs timed: "
          f"+{timed - bare:.3f} µs per request")
    rates: dict[bool, list[float]] = {False: [], True: []}
    for r in range(args.rounds):
        for on in (False, True):
            rate = live_round(args.records, on)
            rates[on].append(rate)
            print(f"round {r + 1} metrics {'on ' if on else 'off'}: {rate:,.0f} rec/s", flush=True)
    off, on = statistics.median(rates[False]), statistics.median(rates[True])
    print(f"median: off {off:,.0f} rec/s, on {on:,.0f} rec/s, ratio on/off {on / off:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
