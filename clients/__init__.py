"""Our Kafka clients, trio-native: Producer, Consumer, AdminClient (and blocking facades).

    producer/     Producer: accumulator, partitioner, sender, pipelined connections, transactions
    consumer/     Consumer: fetcher, offsets, group membership (classic and KIP-848), assignors
    admin/        AdminClient and the nouns its calls take and return
    cli/          the `raftka` command (top layer: may use anything)

and what the three share:

    cluster.py      bootstrap, the Metadata cache, pooled connections per node (`Cluster`)
    config.py       typed configuration: one table of Kafka keys per client kind, one mechanism
    errors.py       client-side errors and the retry classification every retry loop asks
    loop_thread.py  the trio loop thread behind the blocking facades (SyncProducer...)
    connection.py   BrokerConnection, re-exported from common.connection
    sync.py         the three blocking facades in one import

Layer: a library over `common/` and `wire/`; never imports a server. Each client's connection
security (`common.security.ClientSecurity`) comes from its own properties or `security=`.

`from clients import Producer` works too; the names are loaded on first use, so importing one
client (or the CLI) does not load the others.
"""

import importlib

_EXPORTS = {
    "Producer": "clients.producer", "SyncProducer": "clients.producer",
    "Consumer": "clients.consumer", "SyncConsumer": "clients.consumer",
    "TopicPartition": "clients.cluster",
    "AdminClient": "clients.admin", "SyncAdmin": "clients.admin",
    "ConfigError": "clients.config",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'clients' has no attribute {name!r}")
