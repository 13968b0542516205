"""`raftka quorum describe`: the metadata quorum's status, like
`kafka-metadata-quorum.sh describe --status --replication`.

Asks any broker (`--bootstrap-server`, which forwards to the active controller) or a controller
directly (`--bootstrap-controller`) with DescribeQuorum. Voters' log end offsets are pysyncobj Raft
log indexes as the leader sees them (known on the leader only); the high watermark and observers'
offsets are metadata offsets.
"""

from __future__ import annotations

import json
import sys

import trio

from clients.connection import BrokerConnection, ConnectionClosed
from wire.errors import ErrorCode
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS


async def describe(host: str, port: int) -> dict:
    conn = BrokerConnection(host, port, "raftka-cli")
    await conn.connect()
    try:
        cls = REQUESTS[ApiKey.DESCRIBE_QUORUM]
        resp = await conn.request(cls(topics=[cls.TopicData(
            topic_name="__cluster_metadata", partitions=[cls.PartitionData(partition_index=0)])]), 2)
    finally:
        await conn.aclose()
    if resp.error_code != 0:
        raise RuntimeError(ErrorCode(resp.error_code).name)
    p = resp.topics[0].partitions[0]
    endpoints = {n.node_id: f"{n.listeners[0].host}:{n.listeners[0].port}" for n in resp.nodes
                 if n.listeners}
    leader_leo = next((v.log_end_offset for v in p.current_voters if v.replica_id == p.leader_id), -1)
    return {
        "leader_id": p.leader_id, "leader_epoch": p.leader_epoch, "high_watermark": p.high_watermark,
        "voters": [{"id": v.replica_id, "endpoint": endpoints.get(v.replica_id),
                    "log_end_offset": v.log_end_offset} for v in p.current_voters],
        "observers": [{"id": o.replica_id, "log_end_offset": o.log_end_offset,
                       "lag": max(0, p.high_watermark - o.log_end_offset),
                       "last_fetch_timestamp": o.last_fetch_timestamp} for o in p.observers],
        "_leader_leo": leader_leo,
    }


def main(args) -> int:
    target = args.bootstrap_controller or args.bootstrap_server
    host, _, port = target.split(",")[0].rpartition(":")
    try:
        status = trio.run(describe, host, int(port))
    except (ConnectionClosed, OSError, trio.TooSlowError) as exc:
        print(f"raftka quorum describe: cannot reach {target}: {exc}", file=sys.stderr)
        return 1
    except RuntimeError as exc:
        print(f"raftka quorum describe: {exc}", file=sys.stderr)
        return 1
    status.pop("_leader_leo")
    if args.output == "json":
        print(json.dumps(status))
        return 0
    print(f"LeaderId:       {status['leader_id']}")
    print(f"LeaderEpoch:    {status['leader_epoch']}")
    print(f"HighWatermark:  {status['high_watermark']}")
    print(f"{'NodeId':>8} {'Role':<9} {'Endpoint':<22} {'LogEndOffset':>12}")
    for v in status["voters"]:
        role = "Leader" if v["id"] == status["leader_id"] else "Follower"
        print(f"{v['id']:>8} {role:<9} {v['endpoint'] or '-':<22} {v['log_end_offset']:>12}")
    for o in status["observers"]:
        print(f"{o['id']:>8} {'Observer':<9} {'-':<22} {o['log_end_offset']:>12}  lag {o['lag']}")
    return 0
