"""Kept for imports inside `clients/`: the connection lives in `common.connection` (the layer
brokers and controllers share with clients)."""

from common.connection import RECV_BYTES, BrokerConnection, ConnectionClosed  # noqa: F401
