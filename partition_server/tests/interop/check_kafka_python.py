"""Interop sequence with kafka-python (3.x, and 2.0.2 from its own venv).

Usage: check_kafka_python.py BOOTSTRAP TOPIC RF
"""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

import kafka  # noqa: E402
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition  # noqa: E402
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic  # noqa: E402

from common import (BASE_TS, CODECS, PARTITIONS, compare, deadline, done,  # noqa: E402
                    expected_by_partition, fail, plan)


def main(bootstrap: str, topic: str, rf: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    try:
        admin.create_topics([NewTopic(topic, PARTITIONS, rf)], timeout_ms=20000)
    except Exception as exc:  # noqa: BLE001 - report any client error as a failed step
        fail(f"create topic: {exc!r}")
    records = plan()
    acked = 0
    for codec in CODECS:
        producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5,
                                 compression_type=None if codec == "none" else codec,
                                 retries=5, request_timeout_ms=30000)
        futures = [producer.send(topic, value=v, key=k, partition=p, headers=h, timestamp_ms=ts)
                   for c, p, k, v, h, ts in records if c == codec]
        producer.flush(30)
        for f in futures:
            try:
                f.get(30)
                acked += 1
            except Exception as exc:  # noqa: BLE001
                fail(f"produce {codec}: {exc!r}")
        producer.close(5)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             auto_offset_reset="earliest", request_timeout_ms=30000)
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    expected = expected_by_partition()
    got = {p: [] for p in range(PARTITIONS)}
    expired = deadline(30)
    while sum(map(len, got.values())) < len(records) and not expired():
        for tp, msgs in consumer.poll(500).items():
            for m in msgs:
                got[tp.partition].append((m.key, m.value, [(a, b) for a, b in m.headers],
                                          m.timestamp))
    for p in range(PARTITIONS):
        compare(p, got[p], expected[p])
    begin = consumer.beginning_offsets(tps)
    end = consumer.end_offsets(tps)
    for tp in tps:
        if (begin[tp], end[tp]) != (0, len(expected[tp.partition])):
            fail(f"offsets of partition {tp.partition}: {(begin[tp], end[tp])}")
    target_ts = expected[0][3][3]
    found = consumer.offsets_for_times({tps[0]: target_ts})[tps[0]]
    if found is None or found.offset != 3:
        fail(f"offsets_for_times({target_ts}) gave {found}, expected offset 3")
    late = consumer.offsets_for_times({tps[0]: BASE_TS * 2})[tps[0]]
    if late is not None:
        fail(f"offsets_for_times(future) gave {late}, expected None")
    consumer.close()
    resource = ConfigResource(ConfigResourceType.TOPIC, topic)
    if int(kafka.__version__.split(".")[0]) >= 3:
        # 3.x returns {type: {name: {key: ...}}} and by default only modified keys
        described = admin.describe_configs([resource], config_filter="all")
        names = set(described["topic"][topic])
    else:
        names = _config_names(admin.describe_configs([resource]))
    if "cleanup.policy" not in names or "retention.ms" not in names:
        fail(f"describe configs lacks cleanup.policy/retention.ms: {sorted(names)[:10]}")
    admin.delete_topics([topic], timeout_ms=20000)
    admin.close()
    done(client=f"kafka-python {kafka.__version__}", acked=acked)


def _config_names(described) -> set:
    """kafka-python 2.x returns raw DescribeConfigsResponse objects."""
    names = set()
    for response in described if isinstance(described, list) else [described]:
        for resource in getattr(response, "resources", []):
            entries = resource[4] if isinstance(resource, tuple) else resource.configs
            for entry in entries:
                names.add(entry[0] if isinstance(entry, tuple) else entry.name)
    return names


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
