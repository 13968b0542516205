"""`raftka perf produce|consume`: load generators in the spirit of Kafka's perf-test tools.

`perf produce` drives our own producer (clients/producer/) by default, with a live progress
line on stderr; `--client confluent` uses confluent-kafka (librdkafka) instead, to measure the
broker rather than our client. `perf consume` likewise reads with our consumer
(clients/consumer/, manual assignment from offset 0) or, with `--client confluent`, with
confluent-kafka. Output: a final table of
records/s, MB/s and, for produce, the p50/p99/max delivery latency (send → acknowledgement).
`--output json` prints one JSON object.
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
            partitions: int = 6, replication_factor: int = 1, progress: bool = True,
            flush_timeout_s: float = 120) -> dict:
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
    delivered = [0] * partitions        # by partition: readers of a share know where it ends
    sample_every = max(1, num_records // 100_000)   # bounded latency samples

    def on_delivery(err, msg, sent=None):
        if err is not None:
            errors[0] += 1
        elif 0 <= msg.partition() < partitions:
            delivered[msg.partition()] += 1

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
    # what is still queued after the flush's 2 minutes was not delivered: an error each, not a
    # silent success (acks=all under min.insync.replicas retries until delivery.timeout.ms)
    errors[0] += producer.flush(flush_timeout_s)
    elapsed = time.perf_counter() - start
    if progress:
        print(file=sys.stderr)
    latencies.sort()
    return {"records": num_records, "errors": errors[0], "seconds": round(elapsed, 3),
            "records_per_s": round(num_records / elapsed), "mb_per_s": round(
                num_records * record_size / elapsed / 1e6, 2),
            "p50_ms": round(_pct(latencies, 0.5) * 1000, 2),
            "p99_ms": round(_pct(latencies, 0.99) * 1000, 2),
            "max_ms": round(latencies[-1] * 1000, 2) if latencies else None,
            "delivered_by_partition": delivered}


def consume(bootstrap: str, topic: str, num_records: int, timeout_s: float = 120,
            progress: bool = True, config: dict | None = None,
            partitions: list[int] | None = None) -> dict:
    """`config`: librdkafka settings over the ones below (bench/broker_vs_tansu.py's
    `--fetch-shape`); `partitions`: read only these (default every partition of `topic`)."""
    _require_confluent()
    from confluent_kafka import Consumer, TopicPartition
    # librdkafka's fetch sizes (1 MiB a partition, 50 MiB a fetch): 8 MiB a partition (as
    # before) made a broker that honours it answer 48 MB at a time, which librdkafka parses with
    # less overlap with the application: 1.62M rec/s against 2.0M with 1 MiB from the same
    # broker. Its queue bounds too (queued.min.messages 100,000 a partition,
    # queued.max.messages.kbytes 64 MiB), with fetch.queue.backoff.ms 10 ms instead of its 1 s:
    # past a bound librdkafka stops fetching the partition for that long, and a whole second
    # was most of a 1M-record read. Unbounded instead (10M messages, 1 GiB: this consumer until
    # 2026-11-28), the client buffers as far ahead as the broker answers, so the faster broker
    # made it touch more fresh memory: 1.3-1.45x the page faults and 1.08-1.2x the client CPU
    # per record against ours as against Tansu, which answers 3-4x slower per megabyte; bounded,
    # both 1.0 (bench/README.md, "The consumer's queue").
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "raftka-perf",
                         "enable.auto.commit": False, "fetch.queue.backoff.ms": 10,
                         **(config or {})})
    md = consumer.list_topics(topic, timeout=10).topics[topic]
    consumer.assign([TopicPartition(topic, p, 0) for p in md.partitions
                     if partitions is None or p in partitions])
    count = size = 0
    start = time.perf_counter()
    deadline = start + timeout_s
    while count < num_records and time.perf_counter() < deadline:
        for m in consumer.consume(10_000, 0.1):     # returns at 10,000 or the timeout
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


async def _consume_raftka(bootstrap: str, topic: str, num_records: int, timeout_s: float = 120,
                          progress: bool = True, extra: dict | None = None) -> dict:
    """Read `num_records` from offset 0 of every partition with our consumer."""
    import trio

    from clients.consumer import Consumer
    cfg = {"auto.offset.reset": "earliest", "enable.auto.commit": False,
           "max.poll.records": 10_000, "client.id": "raftka-perf", **(extra or {})}
    count = size = 0
    async with Consumer(bootstrap, cfg) as consumer:
        info = await consumer.cluster.wait_for_topic(topic)      # UnknownTopicError: one line
        consumer.assign([(topic, p) for p in sorted(info.partitions)])
        start = time.perf_counter()
        last_report = start
        with trio.move_on_after(timeout_s):
            while count < num_records:
                for rec in await consumer.poll(500):
                    count += 1
                    size += len(rec.value or b"")
                now = time.perf_counter()
                if progress and now - last_report >= 0.5:
                    last_report = now
                    print(f"\r  consumed {count:,}/{num_records:,}, "
                          f"{count / (now - start):,.0f} records/s", end="", file=sys.stderr,
                          flush=True)
        elapsed = time.perf_counter() - start
    if progress:
        print(file=sys.stderr)
    return {"client": "raftka", "records": count, "seconds": round(elapsed, 3),
            "records_per_s": round(count / elapsed) if elapsed else 0,
            "mb_per_s": round(size / elapsed / 1e6, 2) if elapsed else 0}


def print_table(title: str, result: dict) -> None:
    print(title)
    for k, v in result.items():
        print(f"  {k:>14}: {v}")


async def _produce_raftka(bootstrap: str, topic: str, num_records: int, record_size: int,
                          acks: str, compression: str, linger_ms: int, batch_size: int,
                          partitions: int, replication_factor: int, progress: bool,
                          extra: dict | None = None) -> dict:
    import trio

    from clients.admin import AdminClient, NewTopic
    from clients.producer import Producer
    from wire.errors import TopicAlreadyExistsError
    cfg = {"bootstrap.servers": bootstrap, "acks": acks, "compression.type": compression,
           "linger.ms": linger_ms, "batch.size": batch_size, "buffer.memory": 64 << 20,
           "client.id": "raftka-perf", **(extra or {})}
    async with AdminClient(config={k: v for k, v in cfg.items()
                                   if k in ("bootstrap.servers", "client.id")}) as admin:
        if topic not in await admin.list_topics():
            err = (await admin.create_topics([NewTopic(topic, partitions,
                                                       replication_factor)]))[topic]
            if err is not None and not isinstance(err, TopicAlreadyExistsError):
                raise err
    payload = b"x" * record_size
    latencies: list[float] = []
    errors = [0]
    sample_every = max(1, num_records // 100_000)
    done = [0]

    def on_delivery(meta, exc):
        done[0] += 1
        if exc is not None:
            errors[0] += 1

    async with Producer(config=cfg) as producer:
        await producer.cluster.wait_for_topic(topic)
        start = time.perf_counter()

        async def report():
            while True:
                await trio.sleep(0.5)
                el = time.perf_counter() - start
                print(f"\r  sent {done[0]:,}/{num_records:,} acknowledged, "
                      f"{done[0] / el:,.0f} records/s", end="", file=sys.stderr, flush=True)

        async with trio.open_nursery() as nursery:
            if progress:
                nursery.start_soon(report)
            send_nowait = producer.send_nowait
            for i in range(num_records):
                if i % sample_every == 0:
                    sent = time.perf_counter()
                    cb = (lambda m, e, s=sent: (latencies.append(time.perf_counter() - s),
                                                on_delivery(m, e)))
                else:
                    cb = on_delivery
                if send_nowait(topic, payload, on_delivery=cb) is None:
                    await producer.send(topic, payload, on_delivery=cb)
                if i % 2000 == 0:
                    await trio.sleep(0)     # let the sender run between bursts
            await producer.flush()
            elapsed = time.perf_counter() - start
            nursery.cancel_scope.cancel()
    if progress:
        print(file=sys.stderr)
    latencies.sort()
    return {"client": "raftka", "records": num_records, "errors": errors[0],
            "seconds": round(elapsed, 3), "records_per_s": round(num_records / elapsed),
            "mb_per_s": round(num_records * record_size / elapsed / 1e6, 2),
            "p50_ms": round(_pct(latencies, 0.5) * 1000, 2),
            "p99_ms": round(_pct(latencies, 0.99) * 1000, 2),
            "max_ms": round(latencies[-1] * 1000, 2) if latencies else None}


def produce_raftka(bootstrap: str, topic: str, num_records: int, record_size: int,
                   acks: str = "1", compression: str = "none", linger_ms: int = 5,
                   batch_size: int = 1 << 18, partitions: int = 6, replication_factor: int = 1,
                   progress: bool = True, extra: dict | None = None) -> dict:
    """Our producer's throughput (blocking; runs its own trio loop)."""
    import trio
    return trio.run(_produce_raftka, bootstrap, topic, num_records, record_size, acks,
                    compression, linger_ms, batch_size, partitions, replication_factor, progress,
                    extra)


def main(args) -> int:
    if args.perf_command == "produce" and getattr(args, "client", "confluent") == "raftka":
        from clients.cli.output import client_config, run
        extra = client_config(args) if getattr(args, "command_config", None) else {}
        extra.pop("bootstrap.servers", None)
        rc = [1]

        async def go():
            result = await _produce_raftka(
                args.bootstrap_server, args.topic, args.num_records, args.record_size, args.acks,
                args.compression, args.linger_ms, args.batch_size, args.partitions,
                args.replication_factor, args.output != "json", extra)
            if args.output == "json":
                print(json.dumps(result))
            else:
                print_table(f"perf produce {args.topic} (raftka producer)", result)
            rc[0] = 0 if result["errors"] == 0 else 1
            return rc[0]
        return run("raftka perf produce", args, go)
    if args.perf_command == "consume" and getattr(args, "client", "confluent") == "raftka":
        from clients.cli.output import client_config, run
        extra = client_config(args) if getattr(args, "command_config", None) else {}
        extra.pop("bootstrap.servers", None)
        rc = [1]

        async def go_consume():
            result = await _consume_raftka(args.bootstrap_server, args.topic, args.num_records,
                                           progress=args.output != "json", extra=extra)
            if args.output == "json":
                print(json.dumps(result))
            else:
                print_table(f"perf consume {args.topic} (raftka consumer)", result)
            rc[0] = 0 if result["records"] >= args.num_records else 1
            return rc[0]
        return run("raftka perf consume", args, go_consume)
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
