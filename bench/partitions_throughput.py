"""Produce/consume throughput over many partitions vs few, for bench/partitions.py (split out
of it to keep modules small): the same records, acks=all, 100 B, side by side in one run."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, Producer, TopicPartition


class StepFailed(Exception):
    """A measured step did not complete; the bench records the reason and goes on."""

class Throughput:
    """Produce then consume `records` x 100 B over a fixed set of partitions; remembers where
    each partition's previous rounds ended so every round reads exactly its own records."""

    def __init__(self, bootstrap: str, tps: list[tuple[str, int]]):
        self.bootstrap = bootstrap
        self.tps = tps
        self.next_offset = {tp: 0 for tp in tps}

    def round(self, records: int, timeout_s: float, consume: bool = True,
              producer_config: dict | None = None) -> dict:
        """`producer_config` overrides the headline configuration (a linger sweep, say)."""
        p = Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "linger.ms": 5,
                      "queue.buffering.max.messages": 1_000_000, "batch.num.messages": 10000,
                      "enable.idempotence": False} | (producer_config or {}))
        payload = b"x" * 100
        errors, acked = [], {tp: [] for tp in self.tps}

        def cb(err, msg):
            if err is not None:
                errors.append(err.str())
            else:
                acked[(msg.topic(), msg.partition())].append(msg.offset())
        n = len(self.tps)
        t0 = time.perf_counter()
        for i in range(records):
            topic, part = self.tps[i % n]
            while True:
                try:
                    p.produce(topic, payload, partition=part, on_delivery=cb)
                    break
                except BufferError:
                    p.poll(0.01)
        enqueue_s = time.perf_counter() - t0
        left = p.flush(timeout_s)
        produce_s = time.perf_counter() - t0
        if "stats_cb" in (producer_config or {}):
            time.sleep(0.3)          # one more statistics interval, covering the whole round
            p.poll(0)
        if left or errors:
            raise StepFailed(f"produce: {left} undelivered, {len(errors)} errors "
                             f"(first: {errors[:1]})")
        start = dict(self.next_offset)
        for tp, offs in acked.items():
            if offs:
                self.next_offset[tp] = max(offs) + 1
        expected = sum(self.next_offset[tp] - start[tp] for tp in self.tps)
        if not consume:
            return {"produce_rps": round(records / produce_s), "enqueue_s": round(enqueue_s, 3)}
        # queued.min.messages: librdkafka stops fetching for fetch.queue.backoff.ms (1 s) once
        # 100,000 messages wait in its queue, which a round over 6 partitions reaches at once
        # (1 MiB a partition a fetch): that second, not the brokers, set the 6-partition rate
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "bench-partitions",
                      "enable.auto.commit": False, "fetch.wait.max.ms": 100,
                      "queued.min.messages": 10_000_000})
        try:
            c.assign([TopicPartition(t, q, start[(t, q)]) for t, q in self.tps])
            got = 0
            t1 = time.perf_counter()
            deadline = time.monotonic() + timeout_s
            while got < expected and time.monotonic() < deadline:
                # a short timeout: consume() waits for all 10,000 or the timeout, and the
                # round's last call gets fewer
                for m in c.consume(10000, 0.05):
                    if m.error() is None:
                        got += 1
            consume_s = time.perf_counter() - t1
        finally:
            c.close()
        if got < expected:
            raise StepFailed(f"consume: read {got} of {expected} within {timeout_s:.0f}s")
        return {"produce_rps": round(records / produce_s), "consume_rps": round(got / consume_s)}
