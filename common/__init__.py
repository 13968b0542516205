"""What every node and client shares, below the servers and the client library.

A connection to a Kafka-protocol server (`connection`) with its security as a value
(`security.ClientSecurity`); serving a listener (`network`) with TLS/SASL server side (`tls`,
`sasl` — the one SCRAM implementation — `listeners`, `listener_security`, `principal`); the
answer to a failed request (`error_response`); `.properties` files (`properties`); the clocks
(`clock`); entry-point helpers (`process`); the client-quota tables (`quotas`) and the topic
config table and name rule (`topic_configs`).

Layer: imports only `wire/`, the standard library and third-party packages. `partition_server`,
`metadata_quorum`, `clients` and `spark_connector` build on it.
"""
