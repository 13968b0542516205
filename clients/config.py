"""Client configuration: one typed mechanism, one table of Kafka keys per client kind.

Users bring configs written for Kafka's tools (`acks=all`, `linger.ms=5`...), so the keys are
Kafka's dotted names. Each client kind declares its keys as a `ConfigDefs` table of `ConfigDef`s
(Kafka key, type, default, validator, doc): the producer's in clients/producer/config.py, the
consumer's in clients/consumer/config.py, the admin client's in clients/admin/config.py, all
starting from `COMMON` below (bootstrap, timeouts, TLS/SASL). `ConfigDefs.parse` converts and
checks the values once — they arrive as strings (files, CLI) or Python values (API) — so the
rest of the client reads plain ints/bools/strs.

Errors read the same for every client, like Kafka's ConfigException:

    ConfigError: Invalid value abc for configuration fetch.min.bytes: not an integer
    ConfigError: Unknown configuration 'foo.bar'

`ConfigError` is `common.properties.ConfigError`, a `ValueError`, so callers catching either
keep working. Unknown keys are kept and ignored, as Kafka's clients do: one properties file is
often shared by a producer, a consumer and an admin client (the CLI passes `max.block.ms` to all
three), and a `security.protocol` line must not break a client that ignores it. A key that no
client kind knows (a typo: `lingr.ms`) is logged once per client, at WARNING, in Kafka's words:

    The configuration 'lingr.ms' was supplied but isn't a known config.

`parse(..., strict=True)` refuses unknown keys instead, and `unknown_keys` lists them.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Iterable, NamedTuple

from common.properties import ConfigError, load_properties, parse_properties  # noqa: F401
from common.security import ClientSecurity, SecurityConfigError

log = logging.getLogger(__name__)


class ConfigType(NamedTuple):
    """How a value becomes typed: `convert` raises ValueError(reason) on a value it refuses."""
    name: str
    convert: Callable[[Any], Any]


def _int(v) -> int:
    if isinstance(v, bool):
        raise ValueError("not an integer")
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    try:
        return int(str(v).strip())
    except ValueError:
        raise ValueError("not an integer") from None


def _bool(v) -> bool:
    # as Kafka's BOOLEAN: true or false, any case
    if isinstance(v, bool):
        return v
    s = str(v).strip().lower()
    if s in ("true", "false"):
        return s == "true"
    raise ValueError("must be true or false")


def _str(v) -> str:
    return str(v).strip()


INT = ConfigType("int", _int)
BOOLEAN = ConfigType("boolean", _bool)
STRING = ConfigType("string", _str)
RAW = ConfigType("string", str)         # kept as given (a password's spaces are its own)


def choice(*options: str, lower: bool = False) -> ConfigType:
    """A string that must be one of `options` (compared lower-cased when `lower`)."""
    def convert(v) -> str:
        s = str(v).strip()
        s = s.lower() if lower else s
        if s not in options:
            raise ValueError(f"must be one of {', '.join(options)}")
        return s
    return ConfigType("choice", convert)


def at_least(n: int) -> Callable[[Any], str | None]:
    """A validator: the reason a typed value is refused, or None."""
    return lambda v: None if v >= n else f"must be at least {n}"


class ConfigDef(NamedTuple):
    key: str                    # Kafka's name
    type: ConfigType
    default: Any                # already typed; None = not set
    validator: Callable[[Any], str | None] | None = None
    doc: str = ""


def _shown(value) -> str:
    s = str(value)
    return s if s and s == s.strip() else repr(value)


def invalid(key: str, value, reason: str) -> ConfigError:
    """The one shape of a bad-value error, for checks outside the tables too."""
    return ConfigError(f"Invalid value {_shown(value)} for configuration {key}: {reason}")


class Config(dict):
    """Every key of a table with its typed value, plus unknown keys as given. `explicit` holds
    the keys the caller set (Kafka changes some defaults depending on whether a key was given,
    e.g. idempotence vs acks)."""
    explicit: frozenset[str] = frozenset()


class ConfigDefs:
    """One client kind's table of config definitions."""

    def __init__(self, kind: str, *defs: ConfigDef | Iterable[ConfigDef]):
        self.kind = kind
        self.defs: dict[str, ConfigDef] = {}
        for d in defs:
            for one in (d if isinstance(d, ConfigDefs) else [d] if isinstance(d, ConfigDef)
                        else d):
                self.defs[one.key] = one

    def __iter__(self):
        return iter(self.defs.values())

    def __contains__(self, key: str) -> bool:
        return key in self.defs

    def known_key(self, key: str) -> str | None:
        """`key`, or its dotted form for a keyword-style `linger_ms`; None if not ours."""
        if key in self.defs:
            return key
        dotted = key.replace("_", ".")
        return dotted if dotted in self.defs else None

    def defaults(self) -> dict[str, Any]:
        return {d.key: d.default for d in self}

    def parse(self, props: dict | None, *, strict: bool = False) -> Config:
        """Defaults overlaid with `props`, converted and validated; ConfigError names the key.
        A value of None means the default. TLS/SASL keys are checked as `client_security`
        will read them, so a bad one fails here rather than at the first connection."""
        out = Config(self.defaults())
        explicit = set()
        for key, value in (props or {}).items():
            known = self.known_key(key)
            if known is None:
                if strict:
                    raise ConfigError(f"Unknown configuration {key!r}")
                if not known_to_some_client(key):
                    log.warning("The configuration %r was supplied but isn't a known config.", key)
                out[key] = value
                continue
            out[known] = self.convert(known, value)
            explicit.add(known)
        out.explicit = frozenset(explicit)
        client_security(out)
        return out

    def convert(self, key: str, value) -> Any:
        d = self.defs[key]
        if value is None:
            return d.default
        try:
            typed = d.type.convert(value)
        except (TypeError, ValueError) as exc:
            raise invalid(key, value, str(exc) or f"not a {d.type.name}") from None
        reason = d.validator(typed) if d.validator is not None else None
        if reason:
            raise invalid(key, value, reason)
        return typed

    def unknown_keys(self, props: dict) -> list[str]:
        return sorted(k for k in props if self.known_key(k) is None)


# Shared by the producer, the consumer and the admin client.
COMMON = ConfigDefs(
    "common",
    ConfigDef("bootstrap.servers", STRING, None, None, "host:port[,host:port...] to bootstrap from"),
    ConfigDef("client.id", STRING, "raftka", None, "sent with every request (logs, quotas)"),
    ConfigDef("request.timeout.ms", INT, 30_000, at_least(1),
              "ms to wait for a broker's answer before retrying or failing"),
    ConfigDef("socket.connection.setup.timeout.ms", INT, 10_000, None,
              "ms to wait for a connection (TCP, TLS, SASL) to a broker"),
    ConfigDef("retry.backoff.ms", INT, 100, at_least(0), "ms to wait before a retry"),
    ConfigDef("metadata.max.age.ms", INT, 300_000, None,
              "ms after which metadata is refreshed even without a reason"),
    # TLS and SASL, read by common.security.ClientSecurity.from_properties
    ConfigDef("security.protocol", RAW, None, None,
              "PLAINTEXT (default), SSL, SASL_PLAINTEXT or SASL_SSL"),
    ConfigDef("sasl.mechanism", RAW, None, None, "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"),
    ConfigDef("sasl.mechanisms", RAW, None, None, "librdkafka's name for sasl.mechanism"),
    ConfigDef("sasl.username", RAW, None, None, "SASL user"),
    ConfigDef("sasl.password", RAW, None, None, "SASL password"),
    ConfigDef("ssl.ca.location", RAW, None, None, "CA certificates (PEM file) to trust"),
    ConfigDef("ssl.truststore.location", RAW, None, None, "Java's name for ssl.ca.location"),
    ConfigDef("ssl.certificate.location", RAW, None, None, "client certificate (PEM)"),
    ConfigDef("ssl.key.location", RAW, None, None, "client private key (PEM)"),
)


def client_security(props: dict) -> ClientSecurity:
    """The TLS/SASL settings of a client's connections, from its properties (`security.protocol`,
    `sasl.mechanism`, `sasl.username`, `sasl.password`, `ssl.ca.location` ...): a value each
    client passes to its own connections, never a process-wide setting."""
    try:
        return ClientSecurity.from_properties(props)
    except SecurityConfigError as exc:
        raise ConfigError(str(exc)) from None


def known_to_some_client(key: str) -> bool:
    """Whether the producer's, the consumer's or the admin client's table has `key`: a key
    meant for another client of a shared file is not worth a warning, a typo is."""
    # the tables import this module, so they are looked up at first use, not at import
    from clients.admin.config import ADMIN
    from clients.consumer.config import CONSUMER
    from clients.producer.config import PRODUCER
    return any(table.known_key(key) is not None for table in (PRODUCER, CONSUMER, ADMIN))


def unknown_keys(props: dict, schema: ConfigDefs) -> list[str]:
    return schema.unknown_keys(props)
