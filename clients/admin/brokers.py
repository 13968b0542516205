"""Broker calls of the admin client, mixed into `AdminClient`: UnregisterBroker (KIP-631), sent
to the controller named in metadata (a broker, which forwards it to the active controller), and
DescribeLogDirs, sent to each broker asked about."""

from __future__ import annotations

import dataclasses

from clients.cluster import TopicPartition
from clients.errors import KafkaConnectionError, KafkaTimeoutError, check, error
from wire.errors import ErrorCode, KafkaError
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS


def _not_controller(resp) -> list[int]:
    return [resp.error_code] if resp.error_code == ErrorCode.NOT_CONTROLLER else []


@dataclasses.dataclass(frozen=True)
class LogDirDescription:
    """One broker's log directory: its partitions' sizes and (DescribeLogDirs v4) its file
    system's total and usable bytes (-1: not told)."""
    path: str
    partitions: dict          # TopicPartition → bytes
    total_bytes: int = -1
    usable_bytes: int = -1


class BrokerCalls:
    """Needs the host's `cluster` and `_retrying` (AdminClient)."""

    async def unregister_broker(self, broker_id: int) -> None:
        """Remove broker `broker_id`'s registration: it leaves Metadata, its leaderships move
        and it leaves the ISRs (not the replica lists: drain it first). Raises
        BrokerIdNotRegisteredError for an id that is not registered; a running broker so
        removed stays out until its process restarts (as in Kafka)."""
        req = REQUESTS[ApiKey.UNREGISTER_BROKER](broker_id=int(broker_id))
        resp = await self._retrying(lambda: self.cluster.call_controller(req), _not_controller)
        check(resp.error_code, resp.error_message, f"unregister broker {broker_id}")

    async def describe_log_dirs(self, broker_ids=None
                                ) -> dict[int, list[LogDirDescription] | KafkaError]:
        """Each broker's log directories with every hosted partition's size (None: every broker
        in metadata). A broker that cannot be reached maps to its error."""
        req = REQUESTS[ApiKey.DESCRIBE_LOG_DIRS](topics=None)
        if broker_ids is None:
            await self.cluster.refresh_metadata(force=True)
            broker_ids = sorted(self.cluster.metadata.brokers)
        out: dict[int, list[LogDirDescription] | KafkaError] = {}
        for b in broker_ids:
            try:
                resp = await self.cluster.call(b, req, min_version=1)
            except (KafkaConnectionError, KafkaTimeoutError) as exc:
                out[b] = exc
                continue
            if getattr(resp, "error_code", 0):
                out[b] = error(resp.error_code, None, f"describe log dirs of broker {b}")
                continue
            out[b] = [LogDirDescription(
                r.log_dir, {TopicPartition(t.name, p.partition_index): p.partition_size
                            for t in r.topics for p in t.partitions},
                getattr(r, "total_bytes", -1), getattr(r, "usable_bytes", -1))
                for r in resp.results if not r.error_code]
        return out
