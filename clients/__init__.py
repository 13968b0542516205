"""Our Kafka clients, trio-native: Producer, Consumer, AdminClient (and sync wrappers).

Layer: a library over `common/` and `wire/`; never imports a server. Each client's connection
security (`common.security.ClientSecurity`) comes from its own properties or `security=`.
`clients/cli/` (the `raftka` command) is the top layer and may use anything.
"""
