"""DescribeLogDirs (v1–4): this broker's log directory and, per hosted partition, its size on
disk and offset lag — what `raftka reassign --watch` reads to show how far a new replica has
copied (kafka-log-dirs.sh reads the same).

One log directory per broker. `offset_lag` is Kafka's for a current log:
max(0, high watermark − log end offset), so a follower still copying shows how far it is behind
what the leader told it is committed. No future (AlterReplicaLogDirs) logs exist here.

Codes: NONE; KAFKA_STORAGE_ERROR for the directory when it has failed (no partitions listed);
CLUSTER_AUTHORIZATION_FAILED comes from the authorizer (Describe on the cluster, Kafka's rule).
"""

from __future__ import annotations

import os
import shutil

from partition_server.handlers.context import HandlerContext
from wire.errors import ErrorCode
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import RESPONSES


def _wanted(req):
    """None: every hosted partition; else {topic: set of partitions}."""
    if req.body.topics is None:
        return None
    return {t.topic: set(t.partitions) for t in req.body.topics}


async def handle_describe_log_dirs(hctx: HandlerContext, req):
    cls = RESPONSES[ApiKey.DESCRIBE_LOG_DIRS]
    log_dir = os.path.abspath(hctx.config["log.dirs"][0])
    result = cls.DescribeLogDirsResult(error_code=ErrorCode.NONE, log_dir=log_dir, topics=[])
    if hctx.replicas.log_dir_failed:
        result.error_code = ErrorCode.KAFKA_STORAGE_ERROR
        return cls(throttle_time_ms=0, error_code=0, results=[result])
    wanted = _wanted(req)
    by_topic: dict[str, list] = {}
    for (topic, partition), hosted in sorted(hctx.replicas.partitions.items()):
        if wanted is not None and partition not in wanted.get(topic, ()):
            continue
        if hosted.offline:
            continue
        plog = hosted.log
        lag = max(0, hosted.state.high_watermark - plog.log_end_offset)
        by_topic.setdefault(topic, []).append(cls.DescribeLogDirsPartition(
            partition_index=partition, partition_size=sum(s.size for s in plog.segments),
            offset_lag=lag, is_future_key=False))
    result.topics = [cls.DescribeLogDirsTopic(name=t, partitions=ps) for t, ps in by_topic.items()]
    try:
        usage = shutil.disk_usage(log_dir)
        result.total_bytes, result.usable_bytes = usage.total, usage.free
    except OSError:
        pass
    return cls(throttle_time_ms=0, error_code=0, results=[result])
