"""Interop sequence with confluent-kafka (librdkafka). Usage: check_confluent.py BOOTSTRAP TOPIC RF"""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic  # noqa: E402

from common import (BASE_TS, CODECS, PARTITIONS, compare, deadline, done,  # noqa: E402
                    expected_by_partition, fail, plan)


def main(bootstrap: str, topic: str, rf: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(topic, PARTITIONS, rf)], operation_timeout=20).values():
        try:
            fut.result(30)
        except KafkaException as exc:
            fail(f"create topic: {exc}")
    records = plan()
    acked = 0
    for codec in CODECS:
        producer = Producer({"bootstrap.servers": bootstrap, "compression.type": codec,
                             "acks": "all", "linger.ms": 5, "enable.idempotence": True,
                             "message.timeout.ms": 30000})
        errors = []

        def on_delivery(err, msg):
            nonlocal acked
            if err is not None:
                errors.append(str(err))
            else:
                acked += 1
        for c, p, k, v, h, ts in records:
            if c == codec:
                producer.produce(topic, value=v, key=k, partition=p, headers=h, timestamp=ts,
                                 on_delivery=on_delivery)
        if producer.flush(30) != 0 or errors:
            fail(f"produce {codec}: {errors[:3] or 'flush timed out'}")
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "interop-unused",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    expected = expected_by_partition()
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got = {p: [] for p in range(PARTITIONS)}
    expired = deadline(30)
    while sum(map(len, got.values())) < len(records) and not expired():
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            fail(f"consume: {msg.error()}")
        got[msg.partition()].append((msg.key(), msg.value(), list(msg.headers() or []),
                                     msg.timestamp()[1]))
    for p in range(PARTITIONS):
        compare(p, got[p], expected[p])
    low_high = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                for p in range(PARTITIONS)}
    for p, (low, high) in low_high.items():
        if (low, high) != (0, len(expected[p])):
            fail(f"watermarks of partition {p}: {(low, high)}")
    # by timestamp: the first record of partition 0 at or after its 4th record's timestamp
    target_ts = expected[0][3][3]
    found = consumer.offsets_for_times([TopicPartition(topic, 0, target_ts)], timeout=10)
    if found[0].offset != 3:
        fail(f"offsets_for_times({target_ts}) gave {found[0].offset}, expected 3")
    late = consumer.offsets_for_times([TopicPartition(topic, 0, BASE_TS * 2)], timeout=10)
    if late[0].offset != -1:
        fail(f"offsets_for_times(future) gave {late[0].offset}, expected -1 (none)")
    consumer.close()
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([res])[res].result(20)
    if "cleanup.policy" not in configs or "retention.ms" not in configs:
        fail(f"describe configs lacks cleanup.policy/retention.ms: {sorted(configs)[:10]}")
    for fut in admin.delete_topics([topic], operation_timeout=20).values():
        fut.result(30)
    done(client="confluent-kafka", acked=acked, watermarks=low_high,
         cleanup_policy=configs["cleanup.policy"].value)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
