"""Wiring security into a node process: listener security from config, the credential store
(metadata SCRAM records + the configured inter-node user), the authorizer built from each
metadata image, and the client side of inter-node links (TLS + SASL as the inter-node user).

The inter-node user's credential never enters the metadata log: every node derives it in memory
from `raftka.inter.node.sasl.password` at start-up (a fresh random salt per process), so brokers
can authenticate to controllers before any metadata exists — the bootstrap Kafka solves with
`kafka-storage format --add-scram`.
"""

from __future__ import annotations

import logging

import trio

from partition_server.network import ConnectionLimiter, ListenerSecurity
from partition_server.security import sasl, tls
from partition_server.security.authorizer import Authorizer, parse_principal_list
from partition_server.security.listeners import Listener, resolve
from wire.errors import ErrorCode
from wire.messages.index_generated import REQUESTS

log = logging.getLogger(__name__)


class InterNodeAuthError(ConnectionError):
    """This node could not authenticate to another one."""


def static_credentials(user: str | None, password: str | None) -> dict:
    if not user or not password:
        return {}
    return {(user, m): sasl.make_credential(m, password, 4096)
            for m in (sasl.SCRAM_SHA_256, sasl.SCRAM_SHA_512)}


def credential_lookup(get_image, static: dict):
    """(user, mechanism) → credential: the inter-node user first, then SCRAM metadata records
    (read from the *current* image, so a credential added or removed applies to the next login)."""
    def lookup(user: str, mechanism: int):
        cred = static.get((user, mechanism))
        if cred is not None:
            return cred
        image = get_image()
        return image.scram.get((user, mechanism)) if image is not None else None
    return lookup


def inter_node_principal(config_get) -> str | None:
    user = config_get("raftka.inter.node.sasl.username")
    return f"User:{user}" if user else None


def super_users(config_get) -> list[str]:
    users = parse_principal_list(config_get("super.users"))
    inter = inter_node_principal(config_get)
    return users + ([inter] if inter else [])


def build_authorizer(image, config_get) -> Authorizer | None:
    if not config_get("authorizer.class.name"):
        return None
    return Authorizer.from_image(image, super_users(config_get),
                                 bool(config_get("allow.everyone.if.no.acl.found")))


def listener_security(listener: Listener, config_get, lookup, limiter) -> ListenerSecurity:
    ctx = None
    if listener.uses_tls:
        ctx = tls.server_context(config_get("ssl.keystore.location"),
                                 config_get("ssl.key.password"),
                                 config_get("ssl.truststore.location"),
                                 config_get("ssl.client.auth") or "none")
    mechanisms = config_get("sasl.enabled.mechanisms") or list(sasl.SUPPORTED_MECHANISMS)
    if isinstance(mechanisms, str):
        mechanisms = [m.strip() for m in mechanisms.split(",") if m.strip()]
    unknown = [m for m in mechanisms if m not in sasl.SUPPORTED_MECHANISMS]
    if unknown:
        raise ValueError(f"sasl.enabled.mechanisms: unsupported {', '.join(unknown)}")
    return ListenerSecurity(listener.protocol, ctx, tuple(mechanisms), lookup,
                            int(config_get("connections.max.reauth.ms") or 0),
                            int(config_get("sasl.server.max.receive.size") or 524288),
                            limiter=limiter)


def broker_listeners(config, lookup) -> list[tuple[Listener, ListenerSecurity]]:
    ls = resolve(config["listeners"], config["advertised.listeners"],
                 config["listener.security.protocol.map"], config["inter.broker.listener.name"])
    limiter = ConnectionLimiter(config["max.connections"], config["max.connections.per.ip"])
    return [(x, listener_security(x, config.listener_get(x.name), lookup, limiter))
            for x in ls.bound]


# -- the client side of inter-node links -----------------------------------------------------

async def authenticate_connection(conn, mechanism: str, user: str, password: str) -> None:
    """SaslHandshake v1 + SaslAuthenticate on a fresh BrokerConnection."""
    hs = await conn.request(REQUESTS[17](mechanism=mechanism), 1, timeout_s=5)
    if hs.error_code != ErrorCode.NONE:
        raise InterNodeAuthError(f"{conn.host}:{conn.port} refused mechanism {mechanism}: "
                                 f"{ErrorCode(hs.error_code).name}")
    auth_cls = REQUESTS[36]

    async def step(token: bytes) -> bytes:
        resp = await conn.request(auth_cls(auth_bytes=token), 1, timeout_s=5)
        if resp.error_code != ErrorCode.NONE:
            raise InterNodeAuthError(f"{conn.host}:{conn.port}: {resp.error_message}")
        return bytes(resp.auth_bytes)

    if mechanism == "PLAIN":
        await step(b"\x00" + user.encode() + b"\x00" + password.encode())
        return
    client = sasl.ScramClient(sasl.MECHANISM_NAMES[mechanism], user, password)
    server_first = await step(client.first())
    try:
        client.verify(await step(client.final(server_first)))
    except sasl.SaslAuthenticationError as exc:
        raise InterNodeAuthError(f"{conn.host}:{conn.port}: {exc}") from None


def install_inter_node_client(config_get, controller_addresses: set, broker_protocol: str) -> None:
    """Make every BrokerConnection this process opens speak the right protocol: the
    controllers' (`raftka.controller.security.protocol`) towards controller addresses, the
    inter-broker listener's towards brokers."""
    from clients.connection import BrokerConnection
    controller_protocol = config_get("raftka.controller.security.protocol") or "PLAINTEXT"
    if controller_protocol == "PLAINTEXT" and broker_protocol == "PLAINTEXT":
        return
    cafile = config_get("ssl.truststore.location")
    client_ctx = tls.client_context(cafile) if cafile else None
    user = config_get("raftka.inter.node.sasl.username")
    password = config_get("raftka.inter.node.sasl.password")
    mechanism = config_get("raftka.inter.node.sasl.mechanism") or "SCRAM-SHA-512"

    async def hook(conn) -> None:
        protocol = controller_protocol if (conn.host, conn.port) in controller_addresses \
            else broker_protocol
        try:
            if protocol in ("SSL", "SASL_SSL"):
                ctx = client_ctx or tls.client_context(None)
                conn._stream = trio.SSLStream(conn._stream, ctx, server_hostname=conn.host)
                await conn._stream.do_handshake()
            if protocol.startswith("SASL_"):
                if not user:
                    raise InterNodeAuthError("raftka.inter.node.sasl.username is not set")
                await authenticate_connection(conn, mechanism, user, password)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise InterNodeAuthError(f"{conn.host}:{conn.port}: {exc}") from None

    BrokerConnection.connect_hook = hook


def controller_listener_security(props: dict, get_image) -> ListenerSecurity:
    """The controller listener: its protocol comes from `listener.security.protocol.map`'s
    CONTROLLER entry (default PLAINTEXT). On a SASL listener only the inter-node user and
    `super.users` may authenticate: brokers and admin tools, never ordinary clients."""
    from partition_server.security.listeners import parse_protocol_map
    protocol = parse_protocol_map(props.get("listener.security.protocol.map")).get(
        "CONTROLLER", "PLAINTEXT")
    get = props.get
    lookup = credential_lookup(get_image, static_credentials(
        get("raftka.inter.node.sasl.username"), get("raftka.inter.node.sasl.password")))
    limiter = ConnectionLimiter(int(get("max.connections", 2**31 - 1)),
                                int(get("max.connections.per.ip", 2**31 - 1)))
    sec = listener_security(Listener("CONTROLLER", "", 0, protocol), get, lookup, limiter)
    if sec.uses_sasl:
        sec.allowed_principals = frozenset(super_users(get))
    return sec
