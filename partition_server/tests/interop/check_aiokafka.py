"""Interop sequence with aiokafka. Usage: check_aiokafka.py BOOTSTRAP TOPIC RF"""

import asyncio
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition  # noqa: E402
from aiokafka.admin import AIOKafkaAdminClient, NewTopic  # noqa: E402
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType  # noqa: E402

from common import (BASE_TS, CODECS, PARTITIONS, compare, deadline, done,  # noqa: E402
                    expected_by_partition, fail, plan)


async def run(bootstrap: str, topic: str, rf: int) -> dict:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, PARTITIONS, rf)], timeout_ms=20000)
    except Exception as exc:  # noqa: BLE001
        fail(f"create topic: {exc!r}")
    records = plan()
    acked = 0
    for codec in CODECS:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5,
                                    compression_type=None if codec == "none" else codec,
                                    request_timeout_ms=30000)
        await producer.start()
        try:
            futs = [await producer.send(topic, value=v, key=k, partition=p, headers=h,
                                        timestamp_ms=ts)
                    for c, p, k, v, h, ts in records if c == codec]
            for f in futs:
                await asyncio.wait_for(f, 30)
                acked += 1
        except Exception as exc:  # noqa: BLE001
            fail(f"produce {codec}: {exc!r}")
        finally:
            await producer.stop()
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                auto_offset_reset="earliest", request_timeout_ms=30000)
    await consumer.start()
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    consumer.assign(tps)
    await consumer.seek_to_beginning(*tps)
    expected = expected_by_partition()
    got = {p: [] for p in range(PARTITIONS)}
    expired = deadline(30)
    while sum(map(len, got.values())) < len(records) and not expired():
        batch = await consumer.getmany(timeout_ms=500)
        for tp, msgs in batch.items():
            for m in msgs:
                got[tp.partition].append((m.key, m.value, [(a, b) for a, b in m.headers],
                                          m.timestamp))
    for p in range(PARTITIONS):
        compare(p, got[p], expected[p])
    begin = await consumer.beginning_offsets(tps)
    end = await consumer.end_offsets(tps)
    for tp in tps:
        if (begin[tp], end[tp]) != (0, len(expected[tp.partition])):
            fail(f"offsets of partition {tp.partition}: {(begin[tp], end[tp])}")
    target_ts = expected[0][3][3]
    found = (await consumer.offsets_for_times({tps[0]: target_ts}))[tps[0]]
    if found is None or found.offset != 3:
        fail(f"offsets_for_times({target_ts}) gave {found}, expected offset 3")
    late = (await consumer.offsets_for_times({tps[0]: BASE_TS * 2}))[tps[0]]
    if late is not None:
        fail(f"offsets_for_times(future) gave {late}, expected None")
    await consumer.stop()
    described = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    names = set()
    for response in described:
        for resource in response.resources:
            for entry in resource[4]:
                names.add(entry[0])
    if "cleanup.policy" not in names or "retention.ms" not in names:
        fail(f"describe configs lacks cleanup.policy/retention.ms: {sorted(names)[:10]}")
    await admin.delete_topics([topic], timeout_ms=20000)
    await admin.close()
    return {"client": "aiokafka", "acked": acked}


if __name__ == "__main__":
    done(**asyncio.run(run(sys.argv[1], sys.argv[2], int(sys.argv[3]))))
