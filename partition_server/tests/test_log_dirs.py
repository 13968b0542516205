"""DescribeLogDirs (handlers/log_dirs.py): sizes and offset lag of the hosted replicas asked for,
all of them for a null topic list, and KAFKA_STORAGE_ERROR once the log directory failed."""

import types
import uuid

from partition_server.handlers.log_dirs import handle_describe_log_dirs
from partition_server.log.partition_log import PartitionLog
from partition_server.replica_manager import ReplicaManager
from wire.errors import ErrorCode
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS
from wire.records.batch import build_batch


def _request(topics):
    cls = REQUESTS[ApiKey.DESCRIBE_LOG_DIRS]
    body = cls(topics=None if topics is None else [
        cls.DescribableLogDirTopic(topic=t, partitions=ps) for t, ps in topics.items()])
    return types.SimpleNamespace(body=body, api_version=4)


def _sizes(resp):
    return {(t.name, p.partition_index): (p.partition_size, p.offset_lag)
            for r in resp.results for t in r.topics for p in t.partitions}


async def test_sizes_and_lag_of_hosted_replicas(tmp_path):
    replicas = ReplicaManager(1, lambda topic, partition, cfg: PartitionLog(
        str(tmp_path / f"{topic}-{partition}")))
    for p in (0, 1):                      # broker 1 follows broker 0
        replicas.apply_partition("t", uuid.uuid4(), p, [0, 1], [0, 1], 0, 1, 1, {}, 1, 0)
    plog = replicas.get("t", 0).log
    plog.append_as_follower(build_batch([(None, b"v" * 100, None, 0)] * 3, base_offset=0,
                                        partition_leader_epoch=1))
    replicas.get("t", 0).state.update_follower_high_watermark(3)
    replicas.get("t", 1).state.update_follower_high_watermark(0)
    hctx = types.SimpleNamespace(config={"log.dirs": [str(tmp_path)]}, replicas=replicas)

    resp = await handle_describe_log_dirs(hctx, _request({"t": [0], "u": [0]}))
    assert resp.results[0].error_code == 0 and resp.results[0].log_dir == str(tmp_path)
    size = sum(s.size for s in plog.segments)
    assert size > 300 and _sizes(resp) == {("t", 0): (size, 0)}
    resp = await handle_describe_log_dirs(hctx, _request(None))
    assert _sizes(resp) == {("t", 0): (size, 0), ("t", 1): (0, 0)}
    assert resp.results[0].total_bytes > 0

    replicas.log_dir_failed = True
    resp = await handle_describe_log_dirs(hctx, _request(None))
    assert resp.results[0].error_code == ErrorCode.KAFKA_STORAGE_ERROR and not _sizes(resp)
