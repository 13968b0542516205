"""The client side of a secured connection, as a value: `ClientSecurity`.

Every `BrokerConnection` gets one (PLAINTEXT by default) and applies it itself right after the
TCP connect: TLS first (SSL, SASL_SSL), then SaslHandshake v1 + SaslAuthenticate (PLAIN or
SCRAM-SHA-256/512 with `common.sasl.ScramClient`) for SASL_PLAINTEXT / SASL_SSL. Two connections
in one process may use different protocols or users: nothing here is process-wide.

Who builds one:
- a client (admin, producer, consumer, CLI) from its Kafka client properties,
  `ClientSecurity.from_properties(props)`: `security.protocol`, `sasl.mechanism`,
  `sasl.username`, `sasl.password`, `ssl.ca.location` (or `ssl.truststore.location`),
  `ssl.certificate.location` / `ssl.key.location`;
- a node for its own links (`common.listener_security.inter_node_security`): towards brokers
  the inter-broker listener's protocol, towards controllers `raftka.controller.security.protocol`,
  both as the inter-node user.
"""

from __future__ import annotations

import dataclasses
import functools
import ssl

from common import sasl, tls
from wire.errors import ErrorCode
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_HANDSHAKE, SASL_AUTHENTICATE = ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE


class SecurityConfigError(ValueError):
    """Client security properties that cannot be used (unknown protocol or mechanism)."""


class AuthenticationError(ConnectionError):
    """The server refused our TLS or SASL login (a ConnectionError: the link is unusable)."""


@dataclasses.dataclass(frozen=True)
class ClientSecurity:
    protocol: str = "PLAINTEXT"
    sasl_mechanism: str = "SCRAM-SHA-512"
    sasl_username: str | None = None
    sasl_password: str | None = dataclasses.field(default=None, repr=False)
    ssl_cafile: str | None = None             # None: the system's CAs
    ssl_certfile: str | None = None           # a client certificate (mutual TLS), PEM
    ssl_keyfile: str | None = None

    def __post_init__(self):
        if self.protocol not in PROTOCOLS:
            raise SecurityConfigError(f"security.protocol={self.protocol}: not supported")
        if self.uses_sasl and self.sasl_mechanism not in sasl.SUPPORTED_MECHANISMS:
            raise SecurityConfigError(f"sasl.mechanism={self.sasl_mechanism}: not supported (use "
                                      f"one of {', '.join(sasl.SUPPORTED_MECHANISMS)})")

    @classmethod
    def from_properties(cls, props: dict) -> "ClientSecurity":
        """From Kafka client properties (Java and librdkafka spellings)."""
        def get(*keys):
            return next((str(props[k]) for k in keys if props.get(k) is not None), None)
        return cls(protocol=(get("security.protocol") or "PLAINTEXT").strip().upper(),
                   sasl_mechanism=(get("sasl.mechanism", "sasl.mechanisms")
                                   or "SCRAM-SHA-512").strip().upper(),
                   sasl_username=get("sasl.username"), sasl_password=get("sasl.password"),
                   ssl_cafile=get("ssl.ca.location", "ssl.truststore.location"),
                   ssl_certfile=get("ssl.certificate.location"),
                   ssl_keyfile=get("ssl.key.location"))

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @functools.cached_property
    def ssl_context(self) -> ssl.SSLContext:
        return tls.client_context(self.ssl_cafile, self.ssl_certfile, self.ssl_keyfile)


PLAINTEXT = ClientSecurity()


async def authenticate(conn, mechanism: str, user: str | None, password: str | None) -> None:
    """SaslHandshake v1 + SaslAuthenticate on a fresh connection (anything with `request`,
    `host` and `port`); AuthenticationError when the server refuses."""
    where = f"{conn.host}:{conn.port}"
    if not user or password is None:
        raise AuthenticationError(f"{where}: SASL needs a user name and a password")
    hs = await conn.request(REQUESTS[SASL_HANDSHAKE](mechanism=mechanism), 1, timeout_s=5)
    if hs.error_code != ErrorCode.NONE:
        raise AuthenticationError(f"{where} refused mechanism {mechanism}: "
                                  f"{ErrorCode(hs.error_code).name}")
    auth_cls = REQUESTS[SASL_AUTHENTICATE]

    async def step(token: bytes) -> bytes:
        resp = await conn.request(auth_cls(auth_bytes=token), 1, timeout_s=5)
        if resp.error_code != ErrorCode.NONE:
            raise AuthenticationError(f"{where}: {resp.error_message}")
        return bytes(resp.auth_bytes)

    if mechanism == "PLAIN":
        await step(b"\x00" + user.encode() + b"\x00" + password.encode())
        return
    client = sasl.ScramClient(sasl.MECHANISM_NAMES[mechanism], user, password)
    try:
        server_first = await step(client.first())
        client.verify(await step(client.final(server_first)))
    except sasl.SaslAuthenticationError as exc:
        raise AuthenticationError(f"{where}: {exc}") from None
