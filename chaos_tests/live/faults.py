"""The named fault table of the live harness (the process and network faults).

    FAULTS["sigkill"].inject(cluster, "broker-1"); ...; FAULTS["sigkill"].heal(cluster, "broker-1")

| name       | inject                                         | heal                          |
|------------|------------------------------------------------|-------------------------------|
| sigkill    | kill -9 the process                            | start it again (same data)    |
| sigstop    | SIGSTOP (a paused, zombie-to-be process)       | SIGCONT                       |
| restart    | clean restart: SIGTERM (controlled shutdown for a broker), wait, start | nothing |
| partition  | cut a broker from the controllers and its peers (ProxiedCluster) | heal every link |
| fence      | cut a broker from the controllers only (ProxiedCluster)          | heal every link |
| isolate    | cut any node off every other node in the kernel (nftables; nodes at their own addresses: `low_port_cluster(node_addresses=True)`, root) | drop the rules |

Targets are process names as `LiveCluster` knows them: "broker-<id>" or "controller-<id>".
"""

from __future__ import annotations

import dataclasses
import signal
from typing import Callable

from clients.cli.dev import CONTROLLER_IDS


def _restart(cluster, target: str) -> None:
    kind, ident = target.split("-", 1)
    if kind == "broker":
        cluster.restart_broker(int(ident))
    elif kind == "controller":
        cluster.restart_controller(CONTROLLER_IDS.index(int(ident)))
    else:
        raise ValueError(f"unknown process {target!r}: expected broker-<id> or controller-<id>")


def _broker_id(target: str) -> int:
    kind, ident = target.split("-", 1)
    if kind != "broker":
        raise ValueError(f"{target!r}: network faults apply to brokers")
    return int(ident)


def _need_proxies(cluster) -> None:
    if not hasattr(cluster, "proxies"):
        raise TypeError("network faults need a chaos_tests.live.cluster.ProxiedCluster")


def _partition(cluster, target: str) -> None:
    _need_proxies(cluster)
    cluster.isolate_broker(_broker_id(target))


def _fence(cluster, target: str) -> None:
    _need_proxies(cluster)
    cluster.fence_broker(_broker_id(target))


def nft_table(cluster) -> str:
    """The nftables table holding this cluster's kernel faults (one per cluster)."""
    return f"raftka_chaos{cluster.layout.base_port}"


def _kernel_isolate(cluster, target: str) -> None:
    from clients.cli.netfaults import nft
    if cluster.layout.node_prefix is None:
        raise TypeError("kernel network faults need nodes at their own addresses: "
                        "low_port_cluster(..., node_addresses=True)")
    hosts = cluster.layout.node_hosts()
    nft.Nft().apply(nft_table(cluster), nft.isolate(
        hosts[target], [h for name, h in hosts.items() if name != target]))


def _kernel_heal(cluster, target: str) -> None:
    from clients.cli.netfaults import nft
    nft.Nft().remove(nft_table(cluster))


def _clean_restart(cluster, target: str) -> None:
    cluster.kill(target, signal.SIGTERM)
    _restart(cluster, target)


@dataclasses.dataclass(frozen=True)
class Fault:
    name: str
    description: str
    inject: Callable[[object, str], None]
    heal: Callable[[object, str], None]


FAULTS: dict[str, Fault] = {f.name: f for f in [
    Fault("sigkill", "kill -9, restart later",
          lambda c, t: c.kill(t, signal.SIGKILL), _restart),
    Fault("sigstop", "SIGSTOP, SIGCONT later",
          lambda c, t: c.kill(t, signal.SIGSTOP), lambda c, t: c.kill(t, signal.SIGCONT)),
    Fault("restart", "SIGTERM and start again",
          _clean_restart, lambda c, t: None),
    Fault("partition", "cut from controllers and peers (clients still reach it directly)",
          _partition, lambda c, t: c.heal()),
    Fault("fence", "cut from the controllers only",
          _fence, lambda c, t: c.heal()),
    Fault("isolate", "cut off every other node by the kernel (nftables)",
          _kernel_isolate, _kernel_heal),
]}
