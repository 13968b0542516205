"""Connections from this broker to other brokers by node id (the lag monitor asking leaders,
the transaction coordinator writing markers): opened on first use from the metadata image's
registration, kept, and dropped after a failure so the next use reconnects.

Given what it uses, not the broker: the current metadata image (a callable: the broker replaces
its image as metadata arrives) and the inter-broker TLS/SASL settings."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import trio

from common.connection import BrokerConnection, ConnectionClosed
from common.security import ClientSecurity

if TYPE_CHECKING:
    from metadata_quorum.image import MetadataImage


class PeerConnections:
    def __init__(self, image: Callable[[], MetadataImage], security: ClientSecurity | None,
                 client_id: str):
        self._image = image
        self._security = security
        self.client_id = client_id
        self._conns: dict[int, BrokerConnection] = {}

    async def get(self, node: int) -> BrokerConnection:
        conn = self._conns.get(node)
        if conn is None:
            b = self._image().brokers.get(node)
            if b is None:
                raise ConnectionClosed(f"broker {node} unknown")
            conn = BrokerConnection(b.host, b.port, client_id=self.client_id,
                                    security=self._security)
            await conn.connect()
            self._conns[node] = conn
        return conn

    def sibling(self, purpose: str) -> "PeerConnections":
        """Connections of their own to the same brokers, for requests that must not queue
        behind this set's (a connection carries one request at a time)."""
        return PeerConnections(self._image, self._security, f"{self.client_id}-{purpose}")

    async def drop(self, node: int) -> None:
        conn = self._conns.pop(node, None)
        if conn is not None:
            with trio.CancelScope(shield=True):
                await conn.aclose()

    async def aclose(self) -> None:
        for node in list(self._conns):
            await self.drop(node)
