"""Our consumer vs confluent-kafka's, same cluster, same run (issue #8).

A local 3-broker cluster; one topic (6 partitions, RF 1) filled once with N records of 100 B
(confluent-kafka producer, no compression, and again with lz4 for a compressed round). Each
client then reads all N from the beginning with manual assignment, several rounds alternating,
and we report records/s and the ratio ours / confluent-kafka (median of the rounds).

    python3 bench/clients_consumer.py [--records 300000] [--rounds 3]

Runs (2026-11-23, 2 cores shared with other jobs):

| run | load avg | none: ours / confluent-kafka | ratio | lz4: ours / confluent-kafka | ratio |
|---|---|---|---|---|---|
| 200k x 2, before background fetch | ~20 | 49k / 117k | 0.42 | 57k / 315k | 0.18 |
| 200k x 3, background fetch | ~6 | 202k / 172k | 1.17 | 202k / 906k | 0.22 |
| 300k x 3, background fetch | ~5 | 181k / 261k | 0.69 | 197k / 1129k | 0.17 |
| 300k x 3, C record decoder (4th session) | ~5 | 297k / 209k | 1.42 | 424k / 718k | 0.59 |

Reading: uncompressed we are within a factor of ~1.5 of librdkafka; compressed, librdkafka
decompresses and parses in C on its own threads while we spend ~5 us per record decoding in
Python (wire.records.decode_records was ~85% of our wall time in a profile), so our rate stays
~200k rec/s whatever the codec.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import trio  # noqa: E402
from confluent_kafka import Consumer as CKConsumer  # noqa: E402
from confluent_kafka import Producer as CKProducer  # noqa: E402
from confluent_kafka import TopicPartition as CKTopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from clients.consumer import Consumer  # noqa: E402
from partition_server.testing import LiveCluster  # noqa: E402

PARTITIONS = 6


def fill(bootstrap: str, topic: str, n: int, codec: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
        f.result(30)
    p = CKProducer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 262144,
                    "compression.type": codec, "acks": "1"})
    value = b"x" * 100
    for i in range(n):
        while True:
            try:
                p.produce(topic, value=value, partition=i % PARTITIONS)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(60) == 0


def run_confluent(bootstrap: str, topic: str, n: int) -> float:
    c = CKConsumer({"bootstrap.servers": bootstrap, "group.id": "bench-unused",
                    "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.assign([CKTopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got = 0
    t0 = time.perf_counter()
    while got < n:
        for m in c.consume(10000, 1.0):
            if not m.error():
                got += 1
    elapsed = time.perf_counter() - t0
    c.close()
    return n / elapsed


def run_ours(bootstrap: str, topic: str, n: int) -> float:
    async def main():
        async with Consumer(bootstrap, {"auto.offset.reset": "earliest",
                                        "max.poll.records": 10000}) as c:
            c.assign([(topic, p) for p in range(PARTITIONS)])
            got = 0
            t0 = time.perf_counter()
            while got < n:
                got += len(await c.poll(1000))
            return n / (time.perf_counter() - t0)
    return trio.run(main)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d, LiveCluster(Path(d)) as cluster:
        rows = []
        for codec in ("none", "lz4"):
            topic = f"bench-{codec}"
            fill(cluster.bootstrap, topic, args.records, codec)
            ours, theirs = [], []
            for _ in range(args.rounds):
                theirs.append(run_confluent(cluster.bootstrap, topic, args.records))
                ours.append(run_ours(cluster.bootstrap, topic, args.records))
            o, t = statistics.median(ours), statistics.median(theirs)
            rows.append((codec, o, t, o / t))
            print(f"{codec}: ours {o:,.0f} rec/s  confluent-kafka {t:,.0f} rec/s  "
                  f"ratio {o / t:.2f}   (rounds ours {[round(x) for x in ours]}, "
                  f"theirs {[round(x) for x in theirs]})", flush=True)
        print("\n| codec | ours rec/s | confluent-kafka rec/s | ratio |\n|---|---|---|---|")
        for codec, o, t, r in rows:
            print(f"| {codec} | {o:,.0f} | {t:,.0f} | {r:.2f} |")


if __name__ == "__main__":
    main()
