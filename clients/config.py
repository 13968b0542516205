"""Client properties: Kafka's names and defaults, typed; `--command-config` files.

Users bring configs written for Kafka's tools (`acks=all`, `linger.ms=5`...), so the keys are
Kafka's dotted names. Values arrive as strings (files, CLI) or Python values (API); `resolve`
checks and converts them once, so the rest of the client reads plain ints/bools. Unknown keys are
kept (a `security.protocol=PLAINTEXT` line in a shared file must not break us) and reported by
`unknown_keys`.
"""

from __future__ import annotations

from common.properties import ConfigError, load_properties, parse_properties  # noqa: F401
from common.security import ClientSecurity, SecurityConfigError


def _bool(v) -> bool:
    if isinstance(v, bool):
        return v
    s = str(v).strip().lower()
    if s in ("true", "1", "yes"):
        return True
    if s in ("false", "0", "no"):
        return False
    raise ValueError(f"not a boolean: {v!r}")


def _int(v) -> int:
    if isinstance(v, bool):
        raise ValueError("not an integer")
    return int(str(v).strip())


def _str(v) -> str:
    return str(v).strip()


def _acks(v) -> int:
    s = str(v).strip().lower()
    if s in ("all", "-1"):
        return -1
    if s in ("0", "1"):
        return int(s)
    raise ValueError(f"acks must be 0, 1, all or -1, got {v!r}")


COMPRESSION = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def _compression(v) -> str:
    s = str(v).strip().lower()
    if s not in COMPRESSION:
        raise ValueError(f"compression.type must be one of {', '.join(COMPRESSION)}, got {v!r}")
    return s


COMMON = {
    "bootstrap.servers": (_str, None),
    "client.id": (_str, "raftka"),
    "request.timeout.ms": (_int, 30_000),
    "socket.connection.setup.timeout.ms": (_int, 10_000),
    "retry.backoff.ms": (_int, 100),
    "metadata.max.age.ms": (_int, 300_000),
}

PRODUCER = {
    **COMMON,
    "acks": (_acks, -1),
    "batch.size": (_int, 16_384),
    "linger.ms": (_int, 5),
    "buffer.memory": (_int, 32 * 1024 * 1024),
    "max.block.ms": (_int, 60_000),
    "max.request.size": (_int, 1_048_576),
    "compression.type": (_compression, "none"),
    "retries": (_int, 2_147_483_647),
    "delivery.timeout.ms": (_int, 120_000),
    "enable.idempotence": (_bool, True),
    "max.in.flight.requests.per.connection": (_int, 5),
    "partitioner.ignore.keys": (_bool, False),
}

ADMIN = {**COMMON, "default.api.timeout.ms": (_int, 60_000)}


def resolve(props: dict | None, schema: dict) -> dict:
    """Defaults overlaid with `props` (strings or values), converted; ConfigError on bad values.
    Keys set by the caller are listed under "_explicit" (Kafka changes some defaults depending on
    whether a key was given, e.g. idempotence vs acks)."""
    out = {k: default for k, (_, default) in schema.items()}
    explicit = set()
    for key, value in (props or {}).items():
        key = key.replace("_", ".") if key not in schema and key.replace("_", ".") in schema else key
        if key in schema:
            conv = schema[key][0]
            try:
                out[key] = conv(value) if value is not None else schema[key][1]
            except (TypeError, ValueError) as exc:
                raise ConfigError(f"invalid value for {key}: {exc}") from None
            explicit.add(key)
        else:
            out[key] = value
    client_security(out)        # security.protocol, sasl.*, ssl.*: usable values or ConfigError
    for key in ("batch.size", "buffer.memory", "max.request.size", "request.timeout.ms"):
        if key in out and out[key] is not None and out[key] <= 0:
            raise ConfigError(f"{key} must be positive")
    for key in ("linger.ms", "retries", "retry.backoff.ms"):
        if key in out and out[key] is not None and out[key] < 0:
            raise ConfigError(f"{key} must not be negative")
    out["_explicit"] = explicit
    return out


def client_security(props: dict) -> ClientSecurity:
    """The TLS/SASL settings of a client's connections, from its properties (`security.protocol`,
    `sasl.mechanism`, `sasl.username`, `sasl.password`, `ssl.ca.location` ...): a value each
    client passes to its own connections, never a process-wide setting."""
    try:
        return ClientSecurity.from_properties(props)
    except SecurityConfigError as exc:
        raise ConfigError(str(exc)) from None


def unknown_keys(props: dict, schema: dict) -> list[str]:
    return sorted(k for k in props if k not in schema and k.replace("_", ".") not in schema)
