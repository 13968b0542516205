"""`raftka dev --demo`: show a newcomer the cluster working, with nothing but Raftka's own code.

Creates topic `demo` (3 partitions, replication factor 3, min.insync.replicas 2), writes a few
records with acks=all to each partition's leader, reads them back, and prints what happened.
Run by `raftka dev --demo`, it then shows a leader failover (dev_demo.py).
"""

from __future__ import annotations

import time

import trio

from clients.connection import BrokerConnection
from common.security import PLAINTEXT, ClientSecurity
from wire.errors import ErrorCode
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS
from wire.records.batch import build_batch, decode_batch, iter_batches

TOPIC = "demo"


async def _demo(bootstrap: str, security: ClientSecurity) -> None:
    host, port = bootstrap.split(",")[0].split(":")
    conn = BrokerConnection(host, int(port), "raftka-demo", security=security)
    await conn.connect()
    ct = REQUESTS[ApiKey.CREATE_TOPICS]
    resp = await conn.request(ct(topics=[ct.CreatableTopic(
        name=TOPIC, num_partitions=3, replication_factor=3,
        configs=[ct.CreatableTopicConfig(name="min.insync.replicas", value="2")])],
        timeout_ms=10000), 5)
    code = resp.topics[0].error_code
    print(f"demo: create topic '{TOPIC}' (3 partitions, RF=3): "
          f"{'created' if code == 0 else ErrorCode(code).name}", flush=True)
    md = REQUESTS[ApiKey.METADATA]
    # After a restart the followers first catch up and rejoin the ISR: give them a moment so
    # acks=all with min.insync.replicas=2 is not refused while they do.
    with trio.move_on_after(15):
        while True:
            meta = await conn.request(md(topics=[md.MetadataRequestTopic(name=TOPIC)]), 12)
            parts = meta.topics[0].partitions
            if parts and all(len(p.isr_nodes) == 3 and p.leader_id >= 0 for p in parts):
                break
            await trio.sleep(0.5)
    brokers = {b.node_id: (b.host, b.port) for b in meta.brokers}
    leaders = {p.partition_index: p.leader_id for p in meta.topics[0].partitions}
    print(f"demo: leaders by partition {leaders}, ISR "
          f"{ {p.partition_index: list(p.isr_nodes) for p in meta.topics[0].partitions} }", flush=True)
    now = int(time.time() * 1000)
    for partition, leader in sorted(leaders.items()):
        lconn = BrokerConnection(*brokers[leader], "raftka-demo", security=security)
        await lconn.connect()
        records = [(f"key-{i}".encode(), f"hello {i} from partition {partition}".encode(), [], now)
                   for i in range(3)]
        pr = REQUESTS[ApiKey.PRODUCE]
        out = await lconn.request(pr(acks=-1, timeout_ms=10000, topic_data=[pr.TopicProduceData(
            name=TOPIC, partition_data=[pr.PartitionProduceData(
                index=partition, records=build_batch(records))])]), 9)
        res = out.responses[0].partition_responses[0]
        print(f"demo: produced 3 records to partition {partition} (leader {leader}, acks=all): "
              f"{ErrorCode(res.error_code).name} at offset {res.base_offset}", flush=True)
        fr = REQUESTS[ApiKey.FETCH]
        got = await lconn.request(fr(replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=1 << 20,
                                     topics=[fr.FetchTopic(topic=TOPIC, partitions=[fr.FetchPartition(
                                         partition=partition, fetch_offset=0,
                                         partition_max_bytes=1 << 20)])]), 12)
        data = got.responses[0].partitions[0]
        values = [r.value.decode() for h in iter_batches(bytes(data.records or b""))
                  for r in decode_batch(h.bytes()).records]
        print(f"demo: read back from partition {partition} (high watermark "
              f"{data.high_watermark}): {values}", flush=True)
        await lconn.aclose()
    await conn.aclose()


def run_demo(bootstrap: str, security: ClientSecurity = PLAINTEXT, supervisor=None) -> None:
    """The basic demo; then, with the dev cluster's supervisor, the failover demo (dev_demo.py)."""
    try:
        trio.run(_demo, bootstrap, security)
        if supervisor is not None:
            from clients.cli.dev_demo import run_failover
            run_failover(bootstrap, security, supervisor)
    except Exception as exc:  # noqa: BLE001 - the demo must not take the cluster down
        if supervisor is None or not supervisor.closing:     # not just the cluster stopping
            print(f"demo: failed: {exc}", flush=True)
