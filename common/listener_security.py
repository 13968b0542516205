"""Security of a node process, shared by brokers and controllers: listener security from config,
the credential store (metadata SCRAM records + the configured inter-node user), and the client
side of inter-node links (`inter_node_security`: TLS + SASL as the inter-node user).

The inter-node user's credential never enters the metadata log: every node derives it in memory
from `raftka.inter.node.sasl.password` at start-up (a fresh random salt per process), so brokers
can authenticate to controllers before any metadata exists — the bootstrap Kafka solves with
`kafka-storage format --add-scram`.
"""

from __future__ import annotations

from common import sasl, tls
from common.listeners import Listener, parse_protocol_map
from common.network import ConnectionLimiter, ListenerSecurity
from common.principal import parse_principal_list
from common.security import ClientSecurity


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


def controller_listener_security(props: dict, get_image) -> ListenerSecurity:
    """The controller listener: its protocol comes from `listener.security.protocol.map`'s
    CONTROLLER entry (default PLAINTEXT). On a SASL listener only the inter-node user and
    `super.users` may authenticate: brokers and admin tools, never ordinary clients."""
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


# -- the client side of inter-node links -----------------------------------------------------

def inter_node_security(config_get, protocol: str) -> ClientSecurity:
    """How this node's own connections log in: `protocol` is the inter-broker listener's (links
    to brokers) or `raftka.controller.security.protocol` (links to controllers); TLS trusts
    `ssl.truststore.location` (else the system CAs), SASL is the inter-node user."""
    if protocol == "PLAINTEXT":
        return ClientSecurity()
    return ClientSecurity(protocol=protocol,
                          sasl_mechanism=config_get("raftka.inter.node.sasl.mechanism")
                          or "SCRAM-SHA-512",
                          sasl_username=config_get("raftka.inter.node.sasl.username"),
                          sasl_password=config_get("raftka.inter.node.sasl.password"),
                          ssl_cafile=config_get("ssl.truststore.location") or None)


def controller_client_security(config_get) -> ClientSecurity:
    """A broker's links to the controllers (`raftka.controller.security.protocol`)."""
    return inter_node_security(
        config_get, config_get("raftka.controller.security.protocol") or "PLAINTEXT")
