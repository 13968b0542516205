"""`raftka dev isolate NODE` / `raftka dev heal`: cut one node of the running dev cluster off the
other nodes with the kernel's packet filter, and undo it (issue 21 item 1, issue 20 item 1).

This needs each node at its own loopback address, listening and connecting from it
(`raftka dev --node-addresses`): on 127.0.0.1 every node's traffic looks the same to the
kernel. The fault is an nftables table of this cluster's own (`raftka_dev_<hash of the data
dir>`, netfaults/nft.py) dropping packets between the isolated nodes' addresses and the other
nodes' addresses, both ways; clients (from 127.0.0.1) still reach every node, as in a real
partition where the clients sit on the isolated node's side. Isolating a second node cuts it
off too; `heal` removes the table. `raftka dev` heals on its way out, so a stopped cluster
never leaves rules behind. Refused, with the reason, when the nodes share 127.0.0.1, when this
is not root, or when nftables is missing.
"""

from __future__ import annotations

import hashlib
import threading

from clients.cli.dev_supervisor import CommandRefused, resolve
from clients.cli.netfaults import nft

NET_OPS = ("isolate", "heal")


def table_name(data_dir) -> str:
    return "raftka_dev_" + hashlib.sha256(str(data_dir).encode()).hexdigest()[:12]


class DevNetFaults:
    """The isolated nodes of one dev cluster and the nftables table that holds them."""

    def __init__(self, layout, runner: nft.Nft | None = None):
        self.layout = layout
        self.table = table_name(layout.data_dir)
        self._nft = runner or nft.Nft()
        self._lock = threading.Lock()
        self.isolated: set[str] = set()

    def _refusal(self) -> str | None:
        if self.layout.node_prefix is None:
            return ("isolate needs every node at its own address, which this cluster's nodes "
                    "are not (all on 127.0.0.1, where the kernel cannot tell their traffic "
                    "apart): start it with `raftka dev --node-addresses`")
        try:
            self._nft.check()
        except nft.NetFaultUnavailable as exc:
            return f"isolate is not possible here: {exc}"
        return None

    def drops(self, isolated: set[str]) -> list[nft.Drop]:
        """Pure: the rules that cut each of `isolated` off every other node."""
        hosts = self.layout.node_hosts()
        out: list[nft.Drop] = []
        for name in sorted(isolated):
            out += nft.isolate(hosts[name], [h for n, h in hosts.items() if n != name])
        return out

    def command(self, op: str, node: str | None) -> str:
        """Apply `isolate NODE` or `heal`; the reply line. Raises CommandRefused."""
        with self._lock:
            if op == "heal":
                if not self.isolated:
                    return "no node is isolated"
                self._nft.remove(self.table)
                healed, self.isolated = sorted(self.isolated), set()
                return f"healed: {', '.join(healed)} reach the other nodes again"
            problem = self._refusal()
            if problem:
                raise CommandRefused(problem)
            name = resolve(list(self.layout.node_hosts()), node or "")
            if name in self.isolated:
                raise CommandRefused(f"{name} is isolated already")
            wanted = self.isolated | {name}
            try:
                self._nft.apply(self.table, self.drops(wanted))
            except (nft.NetFaultError, nft.NetFaultUnavailable) as exc:
                raise CommandRefused(f"nft refused the rules: {exc}") from None
            self.isolated = wanted
            return (f"{name} ({self.layout.node_hosts()[name]}) isolated from the other nodes "
                    f"(nftables table {self.table}); clients still reach it; "
                    f"`raftka dev heal` undoes it")

    def clear_leftovers(self) -> str | None:
        """At start: remove this data dir's table left by a `raftka dev` that was killed while
        a node was isolated (its nodes would otherwise start cut off); the line to report."""
        if self.layout.node_prefix is None:
            return None
        try:
            self._nft.check()
            if self.table not in self._nft.tables():
                return None
            self._nft.remove(self.table)
        except (OSError, nft.NetFaultUnavailable, nft.NetFaultError, ValueError):
            return None
        return (f"raftka dev: removed the nftables table {self.table} a previous run left "
                "(a node was still isolated when it was killed)")

    def close(self) -> None:
        """Heal on the way out, whatever was isolated (quietly: nft may be gone)."""
        with self._lock:
            if self.isolated:
                try:
                    self._nft.remove(self.table)
                except (OSError, nft.NetFaultError):
                    pass
                self.isolated = set()
