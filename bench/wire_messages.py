"""Protocol message codec speed: a 1 MiB Produce request for 6 partitions decodes in time that
depends on the partition count, not the record count (record batches stay opaque memoryviews);
Metadata response encode/decode rates.

    python3 bench/wire_messages.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from wire.messages.index_generated import ALL  # noqa: E402
from wire.records.batch import build_batch  # noqa: E402

Produce = ALL["ProduceRequest"]
MetadataResponse = ALL["MetadataResponse"]
FetchResponse = ALL["FetchResponse"]


def produce_request(record_size: int, partitions: int = 6, total: int = 1 << 20) -> bytes:
    per_partition = total // partitions
    n = max(1, per_partition // (record_size + 20))
    batch = build_batch([(None, b"x" * record_size, [], 1_700_000_000_000)] * n)
    return Produce(acks=-1, timeout_ms=1000, topic_data=[Produce.TopicProduceData(
        name="t", partition_data=[Produce.PartitionProduceData(index=p, records=batch)
                                  for p in range(partitions)])]).encode(9), n * partitions


def rate(fn, seconds=1.0):
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        fn()
        n += 1
    return (time.perf_counter() - start) / n


def main() -> None:
    for size in (100, 100 * 1024):
        data, records = produce_request(size)
        t = rate(lambda: Produce.decode(data, 9))
        print(f"decode 1 MiB Produce v9, 6 partitions, {records:>6} records of {size:>6} B: "
              f"{t * 1e6:8.1f} µs")
    md = MetadataResponse(brokers=[MetadataResponse.MetadataResponseBroker(
        node_id=i, host="127.0.0.1", port=9092 + i) for i in range(3)], topics=[
        MetadataResponse.MetadataResponseTopic(name=f"topic-{t}", partitions=[
            MetadataResponse.MetadataResponsePartition(partition_index=p, leader_id=p % 3,
                                                       replica_nodes=[0, 1, 2], isr_nodes=[0, 1, 2])
            for p in range(10)]) for t in range(100)])
    enc = md.encode(12)
    t_enc = rate(lambda: md.encode(12))
    t_dec = rate(lambda: MetadataResponse.decode(enc, 12))
    print(f"Metadata v12 response, 100 topics x 10 partitions ({len(enc)} B): "
          f"encode {t_enc * 1e3:.2f} ms, decode {t_dec * 1e3:.2f} ms")
    # a follower's fetch answer while 1,000 partitions take produce (issue #17): a small batch
    # each; every PartitionData v12 carries three tagged structs
    batch = build_batch([(None, b"x" * 100, [], 1_700_000_000_000)] * 3)
    fr = FetchResponse(responses=[FetchResponse.FetchableTopicResponse(
        topic=f"topic-{t}", partitions=[FetchResponse.PartitionData(
            partition_index=p, high_watermark=1000, last_stable_offset=1000, log_start_offset=0,
            records=batch) for p in range(100)]) for t in range(10)])
    enc = fr.encode(12)
    t_enc = rate(lambda: fr.encode(12))
    t_dec = rate(lambda: FetchResponse.decode(enc, 12))
    print(f"Fetch v12 response, 10 topics x 100 partitions x 3 records ({len(enc)} B): "
          f"encode {t_enc * 1e3:.2f} ms, decode {t_dec * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
