"""Telling the controller which replicas a failed log directory held (KIP-858's way, with
Kafka's own messages): the heartbeats name the offline directories (BrokerHeartbeat
OfflineLogDirs) and AssignReplicasToDirs names, under an offline directory's id, the replicas
it held. The controller (metadata_quorum/controller/log_dirs.py) moves their leadership away and
takes this broker out of their ISRs.

Kafka's brokers send an assignment for every replica as it is placed and the controller keeps
them in the metadata log; here only replicas of offline directories are sent, and sent again
each heartbeat interval while the metadata image still shows this broker leading one of them
or in its ISR beside others (the controller keeps a last ISR member: KIP-841). So the report
survives a controller failover or a lost request without the controller storing placements.
"""

from __future__ import annotations

import logging

import trio

from wire.errors import ErrorCode
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS

log = logging.getLogger(__name__)


def pending(replicas, image, broker_id: int) -> dict:
    """{offline dir id: {topic id: [partition]}} of offline replicas the image still shows
    this broker leading or sharing an ISR with others."""
    out: dict = {}
    for (topic, partition), hosted in replicas.partitions.items():
        if not hosted.offline:
            continue
        d = replicas.dir_of(hosted.log.directory)
        p = image.partition(topic, partition)
        if d is None or d.online or d.dir_id is None or p is None:
            continue
        if p.leader == broker_id or (broker_id in p.isr and len(p.isr) > 1):
            out.setdefault(d.dir_id, {}).setdefault(hosted.topic_id, []).append(partition)
    return out


def assignment_request(broker_id: int, broker_epoch: int, dirs: dict):
    cls = REQUESTS[ApiKey.ASSIGN_REPLICAS_TO_DIRS]
    return cls(broker_id=broker_id, broker_epoch=broker_epoch, directories=[
        cls.DirectoryData(id=dir_id, topics=[
            cls.TopicData(topic_id=tid, partitions=[cls.PartitionData(partition_index=p)
                                                    for p in sorted(ps)])
            for tid, ps in topics.items()])
        for dir_id, topics in dirs.items()])


async def report_loop(client, replicas, image_of, dir_failed: trio.Event,
                      interval_s: float) -> None:
    """From the first directory failure on: report until the image shows nothing pending."""
    from partition_server.controller_client import ControllerUnavailable
    await dir_failed.wait()
    wait_s = min(interval_s, 0.5)
    while True:
        # first a heartbeat names the directory offline (the broker sends one at once; the
        # controller reads the replicas assigned to it as offline only then), then the
        # assignment; again every interval while some are still pending
        await trio.sleep(wait_s)
        wait_s = interval_s
        dirs = pending(replicas, image_of(), client.broker_id)
        if dirs:
            req = assignment_request(client.broker_id, client.broker_epoch, dirs)
            try:
                resp = await client.call_active(req, error_of=lambda r: r.error_code, version=0)
                if resp.error_code != ErrorCode.NONE:
                    log.warning("AssignReplicasToDirs: %s", ErrorCode(resp.error_code).name)
            except ControllerUnavailable:
                pass
