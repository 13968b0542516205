"""What a broker request handler may touch: `HandlerContext`, built once by the broker and passed
to every handler (and the helpers they call) in place of the whole broker (ARCHITECTURE.md: handlers
get a typed context). A newcomer reads here what handlers use; a handler needing more adds a
field here, in review.

The collaborators live as long as the broker and are plain fields. What changes under a running
broker is read through it on every access: the metadata image and the authorizer (both replaced
with each image), the effective topic config (image + broker defaults) and the client quota
manager (created on first use; the metrics endpoint reads the same one from the broker).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Protocol

from partition_server.handlers.metadata_cache import MetadataCache

if TYPE_CHECKING:
    from metadata_quorum.image import MetadataImage
    from partition_server.config import BrokerConfig
    from partition_server.controller_client import ControllerClient
    from partition_server.fetch_session import FetchSessionCache
    from partition_server.group.coordinator import GroupCoordinator
    from partition_server.handlers.producer_id import ProducerIdBlock
    from partition_server.purgatory import Purgatory
    from partition_server.quotas import QuotaManager
    from partition_server.replica_manager import ReplicaManager
    from partition_server.replication.throttle import ReplicationQuotas
    from partition_server.security.authorizer import Authorizer
    from partition_server.txn.coordinator import TransactionCoordinator


class _ChangingState(Protocol):
    """The part of the broker that is replaced while it runs (the Broker satisfies it)."""
    image: MetadataImage
    authorizer: Authorizer | None

    def topic_config(self, topic: str) -> dict[str, str]: ...


@dataclasses.dataclass(eq=False)
class HandlerContext:
    broker_id: int
    config: BrokerConfig
    replicas: ReplicaManager                # hosted partitions: append, read, leadership checks
    purgatory: Purgatory                    # long-poll fetches and acks=all produces wait here
    groups: GroupCoordinator                # classic and KIP-848 consumer groups, offsets
    txn: TransactionCoordinator             # transactions (and their offsets, markers, peers)
    fetch_sessions: FetchSessionCache       # KIP-227 incremental fetch sessions
    producer_ids: ProducerIdBlock           # InitProducerId's block from the controller
    client: ControllerClient                # the link to the active controller (forwarding)
    replication_quotas: ReplicationQuotas   # leader/follower replication throttles (KIP-73)
    _changing: _ChangingState = dataclasses.field(repr=False)
    # Metadata answer pieces, one per topic, rebuilt when the topic changes (metadata_cache.py)
    metadata_cache: MetadataCache = dataclasses.field(default_factory=MetadataCache, repr=False)

    @classmethod
    def of(cls, broker) -> HandlerContext:
        return cls(broker.broker_id, broker.config, broker.replicas, broker.purgatory,
                   broker.groups, broker.txn, broker.fetch_sessions, broker.producer_ids,
                   broker.client, broker.replication_quotas, broker)

    @property
    def image(self) -> MetadataImage:
        return self._changing.image

    @property
    def authorizer(self) -> Authorizer | None:
        """None when no authorizer is configured (everything allowed)."""
        return self._changing.authorizer

    @property
    def client_quotas(self) -> QuotaManager | None:
        return getattr(self._changing, "client_quotas", None)

    @client_quotas.setter
    def client_quotas(self, manager: QuotaManager) -> None:
        self._changing.client_quotas = manager          # type: ignore[attr-defined]

    def topic_config(self, topic: str) -> dict[str, str]:
        """Effective topic config: broker defaults overridden by dynamic and topic configs."""
        return self._changing.topic_config(topic)
