"""Client-quota tables shared by the controller (validating AlterClientQuotas) and the broker
(enforcing them): entity types, quota keys, the canonical entity form and the checks.

A quota is configured on an entity, a tuple of (entity_type, name|None) pairs sorted by type,
where the types are `user` and `client-id` and a None name is the default ("<default>").
"""

from __future__ import annotations

import math

USER, CLIENT_ID, IP = "user", "client-id", "ip"
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"

# key -> must the value be integral?  (Kafka: the byte rates are LONG, request_percentage DOUBLE)
QUOTA_KEYS = {PRODUCER_BYTE_RATE: True, CONSUMER_BYTE_RATE: True, REQUEST_PERCENTAGE: False}
UNSUPPORTED_KEYS = {
    CONTROLLER_MUTATION_RATE: "controller_mutation_rate (KIP-599) is not supported by raftka",
    "connection_creation_rate": "connection_creation_rate (KIP-612, ip quotas) is not supported "
                                "by raftka",
}

DEFAULT_WINDOW_NUM = 11
DEFAULT_WINDOW_SIZE_MS = 1000


def entity(user: str | None = ..., client_id: str | None = ...) -> tuple:
    """The canonical entity tuple; leave a part out (...) to leave it unspecified, pass None
    for `<default>`."""
    parts = []
    if client_id is not ...:
        parts.append((CLIENT_ID, client_id))
    if user is not ...:
        parts.append((USER, user))
    return tuple(parts)


def canonical(pairs) -> tuple:
    return tuple(sorted(((t, n) for t, n in pairs), key=lambda p: p[0]))


def validate_entity(pairs) -> str | None:
    """Why an entity from a request is unacceptable, or None (ClientQuotaControlManager)."""
    if not pairs:
        return "invalid empty client quota entity"
    seen = set()
    for etype, name in pairs:
        if etype in seen:
            return f"entity type {etype} cannot appear more than once"
        seen.add(etype)
        if etype == IP:
            return "ip quotas (connection_creation_rate, KIP-612) are not supported by raftka"
        if etype not in (USER, CLIENT_ID):
            return f"unknown client quota entity type {etype!r} (expected user or client-id)"
        if name is not None and name == "":
            return f"empty {etype} name (use the default entity instead)"
    return None


def validate_value(key: str, value: float) -> str | None:
    """Why setting `key` to `value` is unacceptable, or None."""
    if key in UNSUPPORTED_KEYS:
        return UNSUPPORTED_KEYS[key]
    if key not in QUOTA_KEYS:
        return (f"unknown quota key {key!r} (expected one of "
                f"{', '.join(sorted(QUOTA_KEYS))})")
    if not isinstance(value, (int, float)) or math.isnan(value) or math.isinf(value):
        return f"{key} must be a finite number"
    if QUOTA_KEYS[key] and abs(value - round(value)) > 1e-6:
        return f"{key} must be a whole number of bytes per second"
    if value <= 0:
        return f"{key} must be positive"
    return None
