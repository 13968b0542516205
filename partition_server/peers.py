"""Connections from this broker to other brokers by node id (the lag monitor asking leaders,
the transaction coordinator writing markers): opened on first use from the metadata image's
registration, kept, and dropped after a failure so the next use reconnects."""

from __future__ import annotations

import trio

from common.connection import BrokerConnection, ConnectionClosed


class PeerConnections:
    def __init__(self, broker, client_id: str):
        self.broker = broker
        self.client_id = client_id
        self._conns: dict[int, BrokerConnection] = {}

    async def get(self, node: int) -> BrokerConnection:
        conn = self._conns.get(node)
        if conn is None:
            b = self.broker.image.brokers.get(node)
            if b is None:
                raise ConnectionClosed(f"broker {node} unknown")
            conn = BrokerConnection(b.host, b.port, client_id=self.client_id,
                                    security=self.broker.inter_broker_security)
            await conn.connect()
            self._conns[node] = conn
        return conn

    async def drop(self, node: int) -> None:
        conn = self._conns.pop(node, None)
        if conn is not None:
            with trio.CancelScope(shield=True):
                await conn.aclose()

    async def aclose(self) -> None:
        for node in list(self._conns):
            await self.drop(node)
