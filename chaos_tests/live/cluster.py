"""A `LiveCluster` whose broker links can be cut: every broker advertises a proxy port (so
followers, and clients that follow metadata, reach it through `in-<id>`) and reaches each
controller through its own proxy (`b<id>-c<index>`). Clients that need to talk to a broker
directly (a zombie leader, say) use its real port, `layout.broker_port(id)`.

No broker-side option is needed: `advertised.listeners` (published in the broker's registration,
hence in metadata) and a per-broker `controller.quorum.voters` are enough. Raft traffic between
controllers is not proxied.
"""

from __future__ import annotations

import dataclasses
import os
import random
import time
from pathlib import Path

from chaos_tests.live.proxy import ProxyThread
from clients.cli.dev import BROKER_IDS, CONTROLLER_IDS, DevLayout
from partition_server.testing import LiveCluster, _ports_free, port_range


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def low_base_port() -> int:
    """A base port whose whole block (base .. base+1202) lies below the kernel's ephemeral
    range: outgoing connections (ours, the proxies', other tests') take ephemeral ports, and a
    broker that starts a moment later cannot bind one of those ("Address already in use")."""
    low, high = port_range(10000, max(11400, _ephemeral_low()))
    rng = random.Random(os.getpid() ^ time.time_ns())
    for _ in range(200):
        base = rng.randrange(low, max(low + 1, high - 1300))
        ports = [base + b for b in BROKER_IDS] + [base + 1000 + i for i in range(3)] + \
                [base + 1100 + i for i in range(3)] + [base + 1200 + b for b in BROKER_IDS]
        if _ports_free(ports):
            return base
    raise RuntimeError("no free port range below the ephemeral ports on 127.0.0.1")


def low_port_cluster(data_dir: Path, overrides: dict[str, str] | None = None,
                     node_addresses: bool = False) -> LiveCluster:
    """A plain LiveCluster on `low_base_port()`; `node_addresses`: each node at its own
    loopback address (faults by address: chaos_tests/net)."""
    c = LiveCluster(data_dir, overrides, node_addresses=node_addresses)
    c.layout = DevLayout(c.layout.data_dir, low_base_port(), c.layout.overrides,
                         node_prefix=c.layout.node_prefix)
    return c


@dataclasses.dataclass(frozen=True)
class ProxiedLayout(DevLayout):
    inbound: dict = dataclasses.field(default_factory=dict)          # broker id → proxy port
    to_controller: dict = dataclasses.field(default_factory=dict)    # (broker, index) → port
    controller_overrides: dict = dataclasses.field(default_factory=dict)

    def broker_properties(self, broker_id: int) -> dict[str, str]:
        props = super().broker_properties(broker_id)
        props["advertised.listeners"] = f"PLAINTEXT://127.0.0.1:{self.inbound[broker_id]}"
        props["controller.quorum.voters"] = ",".join(
            f"{cid}@127.0.0.1:{self.to_controller[(broker_id, i)]}"
            for i, cid in enumerate(CONTROLLER_IDS))
        return props

    def controller_properties(self, index: int) -> dict[str, str]:
        props = super().controller_properties(index)
        props.update(self.controller_overrides)
        return props


def inbound_link(broker_id: int) -> str:
    return f"in-{broker_id}"


def controller_links(broker_id: int) -> list[str]:
    return [f"b{broker_id}-c{i}" for i in range(len(CONTROLLER_IDS))]


class ProxiedCluster(LiveCluster):
    def __init__(self, data_dir: Path, overrides: dict[str, str] | None = None,
                 controller_overrides: dict[str, str] | None = None):
        super().__init__(data_dir, overrides)
        base = self.layout = DevLayout(self.layout.data_dir, low_base_port(), self.layout.overrides)
        # The proxies listen on ports the kernel picks; one of those may be a port the cluster
        # is about to bind (free_base_port only checked they were free): pick again if so.
        reserved = {base.broker_port(b) for b in BROKER_IDS} | \
            {base.metrics_port(b) for b in BROKER_IDS} | \
            {p for i in range(len(CONTROLLER_IDS))
             for p in (base.controller_port(i), base.raft_port(i))}
        for _ in range(10):
            self.proxies = ProxyThread()
            for b in BROKER_IDS:
                self.proxies.add(inbound_link(b), "127.0.0.1", base.broker_port(b))
                for i, name in enumerate(controller_links(b)):
                    self.proxies.add(name, "127.0.0.1", base.controller_port(i))
            self.proxies.start()
            if not {link.port for link in self.proxies.group.links.values()} & reserved:
                break
            self.proxies.stop()
        else:
            raise RuntimeError("the fault proxies kept landing on the cluster's ports")
        self.layout = ProxiedLayout(
            base.data_dir, base.base_port, base.overrides,
            inbound={b: self.proxies.port(inbound_link(b)) for b in BROKER_IDS},
            to_controller={(b, i): self.proxies.port(name) for b in BROKER_IDS
                           for i, name in enumerate(controller_links(b))},
            controller_overrides=dict(controller_overrides or {}))

    def isolate_broker(self, broker_id: int) -> None:
        """Cut the broker off from the controllers and from its peers (who reach it only
        through its advertised proxy). Clients using its real port still reach it."""
        self.proxies.cut(inbound_link(broker_id), *controller_links(broker_id))

    def fence_broker(self, broker_id: int) -> None:
        """Cut only the broker's controller links: it stops heartbeating and gets fenced."""
        self.proxies.cut(*controller_links(broker_id))

    def heal(self) -> None:
        self.proxies.heal()

    def stop(self) -> None:
        try:
            super().stop()
        finally:
            self.proxies.stop()


# -- a client path through the proxies ------------------------------------------------------------

CLIENT_LISTENER = "CLIENT"


def client_link(broker_id: int) -> str:
    return f"client-{broker_id}"


@dataclasses.dataclass(frozen=True)
class ClientProxiedLayout(ProxiedLayout):
    client_ports: dict = dataclasses.field(default_factory=dict)     # broker id → real port
    client_proxies: dict = dataclasses.field(default_factory=dict)   # broker id → proxy port

    def broker_properties(self, broker_id: int) -> dict[str, str]:
        props = super().broker_properties(broker_id)
        props["listeners"] = (f"PLAINTEXT://127.0.0.1:{self.broker_port(broker_id)},"
                              f"{CLIENT_LISTENER}://127.0.0.1:{self.client_ports[broker_id]}")
        props["advertised.listeners"] = (
            f"{props['advertised.listeners']},"
            f"{CLIENT_LISTENER}://127.0.0.1:{self.client_proxies[broker_id]}")
        props["listener.security.protocol.map"] = f"PLAINTEXT:PLAINTEXT,{CLIENT_LISTENER}:PLAINTEXT"
        props["inter.broker.listener.name"] = "PLAINTEXT"
        return props


class ClientProxiedCluster(ProxiedCluster):
    """A `ProxiedCluster` whose brokers also listen on a second listener, CLIENT, reached only
    through a client proxy per broker (`client-<id>`, on a proxy thread of its own). Metadata
    asked on CLIENT names the client proxies (the broker rewrites addresses per listener), so a
    client library bootstrapped with `bootstrap` sends every request through them while
    replication and controller traffic keep their own links: `drop_responses(b)` loses only
    what broker b answers to clients, the situation where a client retries a batch the broker
    already appended."""

    def __init__(self, data_dir: Path, overrides: dict[str, str] | None = None,
                 controller_overrides: dict[str, str] | None = None):
        super().__init__(data_dir, overrides, controller_overrides)
        base = self.layout
        taken = {link.port for link in self.proxies.group.links.values()}
        for offset in range(1300, 5000, 100):
            ports = {b: base.base_port + offset + b for b in BROKER_IDS}
            if not set(ports.values()) & taken and _ports_free(ports.values()):
                break
        else:
            raise RuntimeError("no free ports for the CLIENT listeners")
        self.client_proxy = ProxyThread()
        for b in BROKER_IDS:
            self.client_proxy.add(client_link(b), "127.0.0.1", ports[b])
        self.client_proxy.start()
        if {link.port for link in self.client_proxy.group.links.values()} & \
                (set(ports.values()) | taken):
            self.client_proxy.stop()
            self.proxies.stop()
            raise RuntimeError("a client proxy landed on a cluster port; try again")
        self.layout = ClientProxiedLayout(
            base.data_dir, base.base_port, base.overrides, inbound=base.inbound,
            to_controller=base.to_controller, controller_overrides=base.controller_overrides,
            client_ports=ports,
            client_proxies={b: self.client_proxy.port(client_link(b)) for b in BROKER_IDS})

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self.layout.client_proxies[b]}" for b in BROKER_IDS)

    @property
    def direct_bootstrap(self) -> str:
        """The brokers' real PLAINTEXT ports (no proxy): for verification reads and admin."""
        return self.layout.bootstrap_servers

    def drop_responses(self, *broker_ids: int) -> None:
        """Whatever these brokers answer clients vanishes; requests still arrive (and are
        acted on). `heal_clients` closes those connections, so clients reconnect and retry."""
        self.client_proxy.blackhole(*(client_link(b) for b in broker_ids), direction="from_target")

    def cut_clients(self, *broker_ids: int) -> None:
        """Clients lose these brokers: open connections reset, new ones refused."""
        self.client_proxy.cut(*(client_link(b) for b in broker_ids or BROKER_IDS))

    def blackhole_clients(self, *broker_ids: int) -> None:
        """Clients' traffic to and from these brokers vanishes silently (both ways)."""
        self.client_proxy.blackhole(*(client_link(b) for b in broker_ids or BROKER_IDS))

    def heal_clients(self) -> None:
        self.client_proxy.heal()

    def heal(self) -> None:
        super().heal()
        self.client_proxy.heal()

    def stop(self) -> None:
        try:
            super().stop()
        finally:
            self.client_proxy.stop()
