"""Partition reassignment calls of the admin client (KIP-455), mixed into `AdminClient`:
AlterPartitionReassignments and ListPartitionReassignments, sent to the controller named in
metadata (a broker, which forwards them to the active controller)."""

from __future__ import annotations

from clients.admin.types import LogDirDescription, PartitionReassignment, ReplicaInfo
from clients.cluster import TopicPartition
from clients.errors import ClientError, check, error
from wire.errors import ErrorCode, KafkaError
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS


def _not_controller(resp) -> list[int]:
    return [resp.error_code] if resp.error_code == ErrorCode.NOT_CONTROLLER else []


class ReassignmentCalls:
    """Needs the host's `cluster` and `_retrying` (AdminClient)."""

    async def alter_partition_reassignments(
            self, reassignments: dict[TopicPartition, list[int] | None], *,
            timeout_ms: int = 60_000) -> dict[TopicPartition, KafkaError | None]:
        """Move each partition to its target replicas (first = preferred leader), or cancel
        the move in progress with None. Returns per partition None or the broker's error
        (INVALID_REPLICA_ASSIGNMENT, NO_REASSIGNMENT_IN_PROGRESS, UNKNOWN_TOPIC_OR_PARTITION)."""
        ar = REQUESTS[ApiKey.ALTER_PARTITION_REASSIGNMENTS]
        by_topic: dict[str, list] = {}
        for tp, target in reassignments.items():
            by_topic.setdefault(tp.topic, []).append(ar.ReassignablePartition(
                partition_index=tp.partition,
                replicas=None if target is None else [int(b) for b in target]))
        req = ar(timeout_ms=timeout_ms, topics=[ar.ReassignableTopic(name=t, partitions=ps)
                                                for t, ps in by_topic.items()])
        resp = await self._retrying(lambda: self.cluster.call_controller(req), _not_controller)
        check(resp.error_code, resp.error_message, "alter partition reassignments")
        return {TopicPartition(t.name, p.partition_index):
                error(p.error_code, p.error_message, f"{t.name}-{p.partition_index}")
                if p.error_code else None
                for t in resp.responses for p in t.partitions}

    async def list_partition_reassignments(
            self, partitions: list[TopicPartition] | None = None
    ) -> dict[TopicPartition, PartitionReassignment]:
        """Moves in progress among `partitions` (None: everywhere)."""
        lr = REQUESTS[ApiKey.LIST_PARTITION_REASSIGNMENTS]
        topics = None
        if partitions is not None:
            wanted: dict[str, list[int]] = {}
            for tp in partitions:
                wanted.setdefault(tp.topic, []).append(tp.partition)
            topics = [lr.ListPartitionReassignmentsTopics(name=t, partition_indexes=ps)
                      for t, ps in wanted.items()]
        req = lr(topics=topics)
        resp = await self._retrying(lambda: self.cluster.call_controller(req), _not_controller)
        check(resp.error_code, resp.error_message, "list partition reassignments")
        return {TopicPartition(t.name, p.partition_index): PartitionReassignment(
            tuple(p.replicas), tuple(p.adding_replicas), tuple(p.removing_replicas))
            for t in resp.topics for p in t.partitions}

    async def describe_log_dirs(
            self, brokers: list[int], partitions: list[TopicPartition] | None = None
    ) -> dict[int, list[LogDirDescription] | KafkaError]:
        """DescribeLogDirs asked of each broker (Kafka's Admin.describeLogDirs): per broker its
        log directories with the replicas each holds among `partitions` (None: all), or the
        error that kept the broker from answering (unreachable, not authorized). A failed
        directory is listed with its error and no replicas."""
        dl = REQUESTS[ApiKey.DESCRIBE_LOG_DIRS]
        topics = None
        if partitions is not None:
            wanted: dict[str, list[int]] = {}
            for tp in partitions:
                wanted.setdefault(tp.topic, []).append(tp.partition)
            topics = [dl.DescribableLogDirTopic(topic=t, partitions=ps) for t, ps in wanted.items()]
        out: dict = {}
        for broker in brokers:
            try:
                resp = await self.cluster.call(broker, dl(topics=topics), min_version=1)
            except (KafkaError, ClientError, OSError) as exc:
                out[broker] = exc if isinstance(exc, KafkaError) else \
                    KafkaError(f"broker {broker}: {exc}")
                continue
            if resp.error_code:                 # v3+: the whole request refused
                out[broker] = error(resp.error_code, None, f"broker {broker}")
                continue
            out[broker] = [LogDirDescription(
                path=r.log_dir,
                error=error(r.error_code, None, f"broker {broker} log dir {r.log_dir}")
                if r.error_code else None,
                replicas={TopicPartition(t.name, p.partition_index):
                          ReplicaInfo(p.partition_size, p.offset_lag, p.is_future_key)
                          for t in r.topics for p in t.partitions},
                total_bytes=getattr(r, "total_bytes", -1),
                usable_bytes=getattr(r, "usable_bytes", -1)) for r in resp.results]
        return out

    async def alter_replica_log_dirs(
            self, assignments: dict[tuple[TopicPartition, int], str]
    ) -> dict[tuple[TopicPartition, int], KafkaError | None]:
        """Move replicas between the log directories of their brokers (Kafka's
        Admin.alterReplicaLogDirs): {(partition, broker id): absolute log dir path}. Returns per
        replica None (moving, or already there) or the broker's error: LOG_DIR_NOT_FOUND,
        KAFKA_STORAGE_ERROR, REPLICA_NOT_AVAILABLE (not hosted there yet: the directory is
        used when it is), or why the broker could not be asked."""
        ar = REQUESTS[ApiKey.ALTER_REPLICA_LOG_DIRS]
        by_broker: dict[int, dict[str, dict[str, list[int]]]] = {}
        for (tp, broker), path in assignments.items():
            by_broker.setdefault(broker, {}).setdefault(path, {}).setdefault(
                tp.topic, []).append(tp.partition)
        out: dict = {}
        for broker, dirs in by_broker.items():
            req = ar(dirs=[ar.AlterReplicaLogDir(path=path, topics=[
                ar.AlterReplicaLogDirTopic(name=t, partitions=ps) for t, ps in topics.items()])
                for path, topics in dirs.items()])
            try:
                resp = await self.cluster.call(broker, req)
            except (KafkaError, ClientError, OSError) as exc:
                failure = exc if isinstance(exc, KafkaError) else KafkaError(f"broker {broker}: {exc}")
                for (tp, b) in assignments:
                    if b == broker:
                        out[(tp, b)] = failure
                continue
            for t in resp.results:
                for p in t.partitions:
                    out[(TopicPartition(t.topic_name, p.partition_index), broker)] = error(
                        p.error_code, None, f"{t.topic_name}-{p.partition_index} on broker "
                        f"{broker}") if p.error_code else None
        return out

    async def describe_replica_log_dirs(
            self, brokers: list[int], partitions: list[TopicPartition] | None = None
    ) -> dict[int, dict[TopicPartition, tuple[int, int]] | KafkaError]:
        """{broker: {tp: (size in bytes, offset lag)}} over all its log directories, or the
        error that broker gave (unreachable, a log directory failed). How reassignment progress
        is measured: the size of an adding replica's log against the leader's."""
        out: dict = {}
        for broker, dirs in (await self.describe_log_dirs(brokers, partitions)).items():
            if isinstance(dirs, KafkaError):
                out[broker] = dirs
                continue
            # JBOD: a failed directory's replicas are offline, the others still count
            failed = [d.error for d in dirs if d.error is not None]
            out[broker] = failed[0] if len(failed) == len(dirs) and failed else {
                tp: (info.size, info.offset_lag) for d in dirs for tp, info in d.replicas.items()
                if not info.is_future}
        return out
