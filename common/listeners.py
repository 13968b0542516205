"""Kafka's listener configuration, parsed and checked (pure).

- `listeners`: `NAME://host:port,...`; each NAME is unique.
- `advertised.listeners`: what goes into metadata per listener name (default: the bound ones).
- `listener.security.protocol.map`: `NAME:PROTOCOL,...`; a listener named like a protocol
  (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL) maps to it by default, as in Kafka.
- `inter.broker.listener.name`: the listener followers use to fetch from leaders (default: the
  first one).

Per-listener settings use Kafka's prefix `listener.name.<name lowercase>.<key>` and fall back to
the plain key (e.g. `listener.name.sasl_ssl.sasl.enabled.mechanisms`).
"""

from __future__ import annotations

import dataclasses

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


class ListenerConfigError(ValueError):
    pass


@dataclasses.dataclass(frozen=True)
class Listener:
    name: str
    host: str
    port: int
    protocol: str            # one of PROTOCOLS

    @property
    def uses_sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")


def parse_endpoint(text: str) -> tuple[str, str, int]:
    name, sep, rest = text.strip().partition("://")
    host, colon, port = rest.rpartition(":")
    if not sep or not name or not colon or not port.isdigit() or int(port) > 65535:
        raise ListenerConfigError(f"listener {text!r}: expected NAME://host:port")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return name.upper(), host, int(port)


def parse_protocol_map(value) -> dict[str, str]:
    entries = value if isinstance(value, list) else (value or "").split(",")
    result = {p: p for p in PROTOCOLS}
    for entry in entries:
        entry = entry.strip()
        if not entry:
            continue
        name, colon, protocol = entry.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not colon or not name or protocol not in PROTOCOLS:
            raise ListenerConfigError(
                f"listener.security.protocol.map entry {entry!r}: expected NAME:PROTOCOL with "
                f"PROTOCOL one of {', '.join(PROTOCOLS)}")
        result[name] = protocol
    return result


def parse_listeners(listeners, protocol_map=None, exclude=()) -> list[Listener]:
    pmap = parse_protocol_map(protocol_map)
    entries = listeners if isinstance(listeners, list) else (listeners or "").split(",")
    out: list[Listener] = []
    for entry in entries:
        if not entry.strip():
            continue
        name, host, port = parse_endpoint(entry)
        if name in exclude:
            continue
        if name not in pmap:
            raise ListenerConfigError(f"listener {name}: not in listener.security.protocol.map")
        if any(x.name == name for x in out):
            raise ListenerConfigError(f"listener {name} is named twice")
        out.append(Listener(name, host, port, pmap[name]))
    return out


@dataclasses.dataclass(frozen=True)
class ListenerSet:
    bound: list[Listener]
    advertised: list[Listener]
    inter_broker: str

    def advertised_for(self, name: str) -> Listener:
        return next(x for x in self.advertised if x.name == name)

    def bound_for(self, name: str) -> Listener:
        return next(x for x in self.bound if x.name == name)


def resolve(listeners, advertised=None, protocol_map=None, inter_broker_name=None,
            exclude=("CONTROLLER",)) -> ListenerSet:
    """Check the four keys together; `exclude` drops the controller listener in combined files."""
    bound = parse_listeners(listeners, protocol_map, exclude)
    if not bound:
        raise ListenerConfigError("listeners: no broker listener")
    adv = parse_listeners(advertised, protocol_map, exclude) if advertised else []
    names = {x.name for x in bound}
    for x in adv:
        if x.name not in names:
            raise ListenerConfigError(f"advertised.listeners names {x.name}, which is not bound")
    by_name = {x.name: x for x in adv}
    advertised_all = [by_name.get(x.name, x) for x in bound]
    inter = (inter_broker_name or bound[0].name).upper()
    if inter not in names:
        raise ListenerConfigError(f"inter.broker.listener.name={inter}: not one of the listeners")
    return ListenerSet(bound, advertised_all, inter)


def listener_setting(props: dict, listener_name: str, key: str, default=None):
    """Kafka's `listener.name.<name>.<key>` override, else the plain key, else `default`."""
    specific = f"listener.name.{listener_name.lower()}.{key}"
    if specific in props:
        return props[specific]
    return props.get(key, default)
