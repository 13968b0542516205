"""DescribeLogDirs (v1–4) and AlterReplicaLogDirs (v0–2): this broker's log directories (JBOD,
partition_server/log_dirs.py) and moving a replica between them (log_dir_moves.py).

DescribeLogDirs answers one result per directory: its path, error, total/usable bytes (v4) and,
per replica placed there, its size on disk and offset lag — what `raftka log-dirs describe` and
`raftka reassign --watch` read (kafka-log-dirs.sh reads the same). `offset_lag` is Kafka's: for a
current log max(0, high watermark − log end offset), so a follower still copying shows how far it
is behind what the leader told it is committed; for a future log (isFuture, an
AlterReplicaLogDirs move in progress) how far it is behind the current log.

Codes, DescribeLogDirs: NONE; KAFKA_STORAGE_ERROR for an offline directory (no partitions
listed); CLUSTER_AUTHORIZATION_FAILED comes from the authorizer (Describe on the cluster).
AlterReplicaLogDirs, per partition: NONE, LOG_DIR_NOT_FOUND, KAFKA_STORAGE_ERROR,
REPLICA_NOT_AVAILABLE (ReplicaMover.alter says when); the authorizer checks Alter on the cluster.
"""

from __future__ import annotations

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


def _replicas_in(hctx: HandlerContext, d, wanted) -> list:
    """[(topic, partition, size, offset lag, is future)] of the replicas in directory `d`."""
    replicas, dirs = hctx.replicas, hctx.replicas.log_dirs
    moves = replicas.dir_moves
    out = []
    for (topic, partition), hosted in sorted(replicas.partitions.items()):
        if wanted is not None and partition not in wanted.get(topic, ()):
            continue
        if not hosted.offline and (dirs is None or dirs.placement.get((topic, partition)) is d):
            plog = hosted.log
            lag = max(0, hosted.state.high_watermark - plog.log_end_offset)
            out.append((topic, partition, plog.size_in_bytes, lag, False))
        move = moves.moves.get((topic, partition)) if moves is not None else None
        if move is not None and move.dest is d:
            out.append((topic, partition, move.future.size_in_bytes,
                        moves.lag((topic, partition)), True))
    return out


def _describe_dir(hctx: HandlerContext, cls, path: str, online: bool, d, wanted):
    result = cls.DescribeLogDirsResult(error_code=ErrorCode.NONE, log_dir=path, topics=[])
    if not online:
        result.error_code = ErrorCode.KAFKA_STORAGE_ERROR
        return result
    by_topic: dict[str, list] = {}
    for topic, partition, size, lag, future in _replicas_in(hctx, d, wanted):
        by_topic.setdefault(topic, []).append(cls.DescribeLogDirsPartition(
            partition_index=partition, partition_size=size, offset_lag=lag,
            is_future_key=future))
    result.topics = [cls.DescribeLogDirsTopic(name=t, partitions=ps) for t, ps in by_topic.items()]
    try:
        usage = shutil.disk_usage(path)
        result.total_bytes, result.usable_bytes = usage.total, usage.free
    except OSError:
        pass
    return result


async def handle_describe_log_dirs(hctx: HandlerContext, req):
    cls = RESPONSES[ApiKey.DESCRIBE_LOG_DIRS]
    wanted = _wanted(req)
    dirs = hctx.replicas.log_dirs
    if dirs is None:            # one unnamed directory (in-process tests)
        import os
        path = os.path.abspath(hctx.config["log.dirs"][0])
        results = [_describe_dir(hctx, cls, path, not hctx.replicas.log_dir_failed, None, wanted)]
    else:
        results = [_describe_dir(hctx, cls, d.path, d.online, d, wanted) for d in dirs.dirs]
    return cls(throttle_time_ms=0, error_code=0, results=results)


async def handle_alter_replica_log_dirs(hctx: HandlerContext, req):
    cls = RESPONSES[ApiKey.ALTER_REPLICA_LOG_DIRS]
    moves = hctx.replicas.dir_moves
    results: dict[str, list] = {}
    for d in req.body.dirs:
        for t in d.topics:
            for p in t.partitions:
                err = moves.alter((t.name, p), d.path) if moves is not None \
                    else ErrorCode.LOG_DIR_NOT_FOUND
                results.setdefault(t.name, []).append(cls.AlterReplicaLogDirPartitionResult(
                    partition_index=p, error_code=err))
    return cls(throttle_time_ms=0, results=[
        cls.AlterReplicaLogDirTopicResult(topic_name=name, partitions=ps)
        for name, ps in results.items()])
