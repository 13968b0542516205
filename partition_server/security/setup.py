"""Wiring security into a broker: its listeners' security (built with
`common.listener_security`, shared with the controller) and the ACL authorizer built from each
metadata image. The client side of its links is a `common.security.ClientSecurity` value
(`Broker.inter_broker_security`, `Broker.controller_security`).
"""

from __future__ import annotations

from common.listener_security import listener_security, super_users
from common.listeners import Listener, resolve
from common.network import ConnectionLimiter, ListenerSecurity
from partition_server.security.authorizer import Authorizer


def build_authorizer(image, config_get) -> Authorizer | None:
    if not config_get("authorizer.class.name"):
        return None
    return Authorizer.from_image(image, super_users(config_get),
                                 bool(config_get("allow.everyone.if.no.acl.found")))


def broker_listeners(config, lookup) -> list[tuple[Listener, ListenerSecurity]]:
    ls = resolve(config["listeners"], config["advertised.listeners"],
                 config["listener.security.protocol.map"], config["inter.broker.listener.name"])
    limiter = ConnectionLimiter(config["max.connections"], config["max.connections.per.ip"])
    return [(x, listener_security(x, config.listener_get(x.name), lookup, limiter))
            for x in ls.bound]
