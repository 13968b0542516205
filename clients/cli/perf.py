"""`raftka perf produce|consume`: load generators in the spirit of Kafka's perf-test tools.

The load comes from confluent-kafka (librdkafka), the fastest Python-reachable client, so the
figures measure the broker rather than our own (future) client; install it with
`pip install confluent-kafka`. Output: a final table of records/s, MB/s and, for produce, the
p50/p99/max delivery latency (send → acknowledgement). `--output json` prints one JSON object.
"""

from __future__ import annotations

import json
import sys
import time


def _require_confluent():
    try:
        import confluent_kafka  # noqa: F401
    except ImportError:
        raise SystemExit("raftka perf: needs confluent-kafka (pip install confluent-kafka)")


def ensure_topic(bootstrap: str, topic: str, partitions: int, replication_factor: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    if topic in admin.list_topics(timeout=10).topics:
        return
    for fut in admin.create_topics([NewTopic(topic, partitions, replication_factor)]).values():
        try:
            fut.result(30)
        except Exception as exc:  # noqa: BLE001 - report the broker's reason
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise SystemExit(f"raftka perf: cannot create topic {topic}: {exc}")
    time.sleep(0.5)


def _pct(sorted_values, q):
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def produce(bootstrap: str, topic: str, num_records: int, record_size: int, acks: str = "1",
            compression: str = "none", linger_ms: int = 5, batch_size: int = 1 << 20,
            partitions: int = 6, replication_factor: int = 1, progress: bool = True) -> dict:
    _require_confluent()
    from confluent_kafka import Producer
    ensure_topic(bootstrap, topic, partitions, replication_factor)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks,
                         "compression.type": compression, "linger.ms": linger_ms,
                         "batch.size": batch_size, "queue.buffering.max.messages": 1_000_000,
                         "queue.buffering.max.kbytes": 1 << 21, "enable.idempotence": False})
    payload = b"x" * record_size
    latencies: list[float] = []
    errors = [0]
    sample_every = max(1, num_records // 100_000)   # bounded latency samples

    def on_delivery(err, msg, sent=None):
        if err is not None:
            errors[0] += 1

    start = time.perf_counter()
    for i in range(num_records):
        if i % sample_every == 0:
            sent = time.perf_counter()
            cb = (lambda err, msg, s=sent: (latencies.append(time.perf_counter() - s),
                                            on_delivery(err, msg)))
        else:
            cb = on_delivery
        while True:
            try:
                producer.produce(topic, payload, on_delivery=cb)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 10_000 == 0:
            producer.poll(0)
            if progress and i % 100_000 == 0 and i:
                print(f"\r  produced {i:,}/{num_records:,}", end="", file=sys.stderr, flush=True)
    producer.flush(120)
    elapsed = time.perf_counter() - start
    if progress:
        print(file=sys.stderr)
    latencies.sort()
    return {"records": num_records, "errors": errors[0], "seconds": round(elapsed, 3),
            "records_per_s": round(num_records / elapsed), "mb_per_s": round(
                num_records * record_size / elapsed / 1e6, 2),
            "p50_ms": round(_pct(latencies, 0.5) * 1000, 2),
            "p99_ms": round(_pct(latencies, 0.99) * 1000, 2),
            "max_ms": round(latencies[-1] * 1000, 2) if latencies else None}


def consume(bootstrap: str, topic: str, num_records: int, timeout_s: float = 120,
            progress: bool = True) -> dict:
    _require_confluent()
    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "raftka-perf",
                         "enable.auto.commit": False, "fetch.max.bytes": 50 << 20,
                         "max.partition.fetch.bytes": 8 << 20, "queued.max.messages.kbytes": 1 << 20})
    md = consumer.list_topics(topic, timeout=10).topics[topic]
    consumer.assign([TopicPartition(topic, p, 0) for p in md.partitions])
    count = size = 0
    start = time.perf_counter()
    deadline = start + timeout_s
    while count < num_records and time.perf_counter() < deadline:
        for m in consumer.consume(10_000, 0.5):
            if m.error():
                continue
            count += 1
            size += len(m.value() or b"")
        if progress and count % 100_000 < 10_000 and count:
            print(f"\r  consumed {count:,}/{num_records:,}", end="", file=sys.stderr, flush=True)
    elapsed = time.perf_counter() - start
    consumer.close()
    if progress:
        print(file=sys.stderr)
    return {"records": count, "seconds": round(elapsed, 3),
            "records_per_s": round(count / elapsed), "mb_per_s": round(size / elapsed / 1e6, 2)}


def print_table(title: str, result: dict) -> None:
    print(title)
    for k, v in result.items():
        print(f"  {k:>14}: {v}")


def main(args) -> int:
    if args.perf_command == "produce":
        result = produce(args.bootstrap_server, args.topic, args.num_records, args.record_size,
                         args.acks, args.compression, args.linger_ms, partitions=args.partitions,
                         replication_factor=args.replication_factor,
                         progress=args.output != "json")
    else:
        result = consume(args.bootstrap_server, args.topic, args.num_records,
                         progress=args.output != "json")
    if args.output == "json":
        print(json.dumps(result))
    else:
        print_table(f"perf {args.perf_command} {args.topic}", result)
    return 0 if result.get("errors", 0) == 0 and result["records"] >= args.num_records else 1
