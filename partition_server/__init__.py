"""The partition server (broker): logs, replication, groups, transactions, request handlers.

`broker.py` owns listeners, fetchers, heartbeats and flushers; `handlers/` answer one API each;
the pure cores (`replication/`, `group/`, `txn/`, `log/`) are fed decoded messages and times.

Layer: a server. Imports `common/` and `wire/`, and reads `metadata_quorum`'s records and image;
never `clients/`. Its own links (followers, markers, the controller client) are
`common.connection.BrokerConnection`s with `inter_broker_security` / `controller_security`.
`testing.py` (a live-cluster harness) and `__main__.py` (which can also run a controller) sit
above both servers.
"""
