"""DescribeLogDirs (API 35): the size of each partition this broker hosts, per log directory
(one: `log.dirs`' first entry, where every log lives), and from v4 the directory's file system
total and usable bytes. Used for reassignment and decommission progress (bytes to copy) and
per-broker disk usage. `Topics` null asks for every hosted partition; a named partition this
broker does not host is left out, as Kafka does. OffsetLag is 0 and IsFutureKey false: there
are no future replicas (moves between a broker's own log directories, JBOD) here.

Codes: NONE; CLUSTER_AUTHORIZATION_FAILED without Describe on the cluster (security/enforce.py,
top-level from v3, an empty answer before)."""

from __future__ import annotations

import os

from partition_server.handlers.context import HandlerContext
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import RESPONSES


def partition_sizes(hctx: HandlerContext, topics) -> dict[str, list[tuple[int, int]]]:
    """{topic: [(partition, bytes)]} of the hosted partitions `topics` names (None: all)."""
    wanted = None if topics is None else {(t.topic, p) for t in topics for p in t.partitions}
    out: dict[str, list[tuple[int, int]]] = {}
    for (topic, partition), hosted in sorted(hctx.replicas.partitions.items()):
        if wanted is not None and (topic, partition) not in wanted:
            continue
        if hosted.offline or hosted.log is None:
            continue                        # its directory failed: nothing to measure
        out.setdefault(topic, []).append((partition, hosted.log.size_in_bytes))
    return out


def _disk(path: str) -> tuple[int, int]:
    try:
        st = os.statvfs(path)
    except OSError:
        return -1, -1
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


async def handle_describe_log_dirs(hctx: HandlerContext, req):
    cls = RESPONSES[ApiKey.DESCRIBE_LOG_DIRS]
    log_dir = os.path.abspath(hctx.config["log.dirs"][0])
    total, usable = _disk(log_dir)
    topics = [cls.DescribeLogDirsTopic(name=name, partitions=[
        cls.DescribeLogDirsPartition(partition_index=p, partition_size=size, offset_lag=0,
                                     is_future_key=False) for p, size in parts])
        for name, parts in partition_sizes(hctx, req.body.topics).items()]
    return cls(error_code=0, results=[cls.DescribeLogDirsResult(
        error_code=0, log_dir=log_dir, topics=topics, total_bytes=total, usable_bytes=usable)])
