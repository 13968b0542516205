"""Broker membership calls of the admin client, mixed into `AdminClient`: DescribeCluster (with
Raftka's tagged field for fenced brokers) and UnregisterBroker (KIP-631), sent to the controller
named in metadata (a broker, which forwards it to the active controller)."""

from __future__ import annotations

from clients.errors import check
from wire.errors import ErrorCode
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS


def _not_controller(resp) -> list[int]:
    return [resp.error_code] if resp.error_code == ErrorCode.NOT_CONTROLLER else []


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

    async def describe_cluster(self, include_fenced: bool = False) -> dict:
        """Brokers in Metadata; with `include_fenced`, also "fenced_brokers" (registered but
        fenced; None from a broker that does not know Raftka's tagged field)."""
        dc = REQUESTS[ApiKey.DESCRIBE_CLUSTER]
        resp = await self._retrying(lambda: self.cluster.call_any(
            dc(include_cluster_authorized_operations=False, endpoint_type=1,
               raftka_include_fenced_brokers=include_fenced)))
        check(resp.error_code, resp.error_message, "describe cluster")

        def rows(bs):
            return None if bs is None else [{"id": b.broker_id, "host": b.host, "port": b.port,
                                             "rack": b.rack} for b in sorted(
                                                 bs, key=lambda b: b.broker_id)]
        out = {"cluster_id": resp.cluster_id, "controller_id": resp.controller_id,
               "brokers": rows(resp.brokers)}
        return out | ({"fenced_brokers": rows(resp.raftka_fenced_brokers)} if include_fenced
                      else {})
