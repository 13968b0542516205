"""Telling the controller where replicas are (KIP-858's AssignReplicasToDirs): the heartbeats
name the offline directories (BrokerHeartbeat OfflineLogDirs), and an assignment names, under a
directory's id, the replicas it holds. The controller (metadata_quorum/controller/log_dirs.py)
keeps both in the metadata log; a replica assigned to a directory its broker reported offline
is offline for every controller and broker, and is moved out of leadership and ISRs.

Kafka's brokers assign every replica as it is placed. Here a replica is assigned only when the
metadata image disagrees with where it is and that matters: a replica of an offline directory
the image does not place there, or any replica the image places in another directory than the
one holding it (moved by AlterReplicaLogDirs, re-created elsewhere after a restart without its
directory). Replicas never touched by a failure stay UNASSIGNED, which reads as online: no
assignment traffic for the many partitions of a healthy broker. Sent again each heartbeat
interval while the image still disagrees (a lost request, a controller failover).
"""

from __future__ import annotations

import logging

import trio

from metadata_quorum.image import UNASSIGNED_DIR
from wire.errors import ErrorCode
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS

log = logging.getLogger(__name__)


def pending(replicas, image, broker_id: int) -> dict:
    """{dir id: {topic id: [partition]}}: hosted replicas whose directory the image must learn."""
    out: dict = {}
    for (topic, partition), hosted in replicas.partitions.items():
        p = image.partition(topic, partition)
        if p is None or broker_id not in p.replicas:
            continue
        assigned = p.directory(broker_id)
        if assigned == UNASSIGNED_DIR and not hosted.offline:
            continue        # the common case, decided without looking up the directory
        d = replicas.dir_of(hosted.log.directory)
        if d is None or d.dir_id is None or assigned == d.dir_id:
            continue
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
    """Assign what `pending` finds; looks again when the image's topics, the placements or the
    directories' health changed, or while something is still pending."""
    from partition_server.controller_client import ControllerUnavailable
    seen, failed = None, False
    while True:
        with trio.move_on_after(interval_s):
            await (trio.sleep_forever() if failed else dir_failed.wait())
        if dir_failed.is_set() and not failed:
            failed = True
            # first a heartbeat names the directory offline (the broker sends one at once)
            await trio.sleep(min(interval_s, 0.5))
        image = image_of()
        if replicas.log_dirs is None or client.broker_epoch < 0:
            continue
        key = (image.topics, replicas.log_dirs.changes, failed)
        if key == seen:
            continue
        dirs = pending(replicas, image, client.broker_id)
        seen = None if dirs else key        # something pending: look again next interval
        if not dirs:
            continue
        req = assignment_request(client.broker_id, client.broker_epoch, dirs)
        try:
            resp = await client.call_active(req, error_of=lambda r: r.error_code, version=0)
            if resp.error_code != ErrorCode.NONE:
                log.warning("AssignReplicasToDirs: %s", ErrorCode(resp.error_code).name)
        except ControllerUnavailable:
            pass
