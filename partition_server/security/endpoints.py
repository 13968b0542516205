"""Answer each listener with that listener's addresses (Kafka's per-listener metadata).

Brokers register every advertised listener (name, host, port, protocol) with the controller; the
registration's plain host:port is the inter-broker listener's, which the brokers' own links use.
A client connected to listener X must be told the X addresses of every broker — else a client
on a SASL_PLAINTEXT port would be sent to the SASL_SSL one. `rewrite(image, listener, response)`
rewrites Metadata, DescribeCluster, FindCoordinator and Fetch (v16+ leader endpoints) answers in
place; a broker that did not
register X keeps its inter-broker address.
"""

from __future__ import annotations
from wire.messages.api_keys import ApiKey

SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}


def _endpoint(image, node_id: int, listener: str):
    b = image.brokers.get(node_id)
    if b is None:
        return None
    for entry in b.listeners:
        if entry[0] == listener:
            return entry[1], entry[2]
    return None


def rewrite(image, listener: str, api_key: int, response) -> None:
    if api_key == ApiKey.METADATA:
        nodes = [(b, "node_id") for b in response.brokers]
    elif api_key == ApiKey.DESCRIBE_CLUSTER:
        nodes = [(b, "broker_id") for b in response.brokers]
    elif api_key == ApiKey.FIND_COORDINATOR:
        nodes = [(c, "node_id") for c in getattr(response, "coordinators", None) or []]
        if getattr(response, "node_id", -1) is not None and getattr(response, "node_id", -1) >= 0:
            nodes.append((response, "node_id"))
    elif api_key == ApiKey.FETCH:
        nodes = [(n, "node_id") for n in getattr(response, "node_endpoints", None) or []]
    else:
        return
    for obj, id_field in nodes:
        found = _endpoint(image, getattr(obj, id_field), listener)
        if found is not None:
            obj.host, obj.port = found
