"""Network partitions made by the kernel (nftables) between nodes at their own loopback
addresses (DevLayout.node_prefix: 127.a.b.11, .12, ... each node listening and connecting from
its own address).

A fault is a list of `Drop(src, dst, percent)`: packets from any address of `src` to any of
`dst` are dropped (all of them, or `percent` of them at random: `numgen random`). The builders
give the shapes Jepsen uses: `isolate` one node, `split` into majority/minority, `bridge` (one
node sees both sides, the sides not each other), `one_way` (only one direction: TCP then
stalls both ways, yet the peers see different things), `loss` (random loss on a node's links).

`ruleset(table, drops)` is pure: the text `nft -f -` reads, one table of its own per fault
(`ip raftka_*`), hooked on output: every packet between two local addresses leaves through it,
so nothing on the input side is needed. The table is created, emptied and filled in one
transaction, so applying it again replaces the fault. `Nft` is the edge that runs `nft`. Only
the listed 127/8 addresses are ever matched: lo is shared with everything else on the machine
(other tests, other users), whose traffic to and from 127.0.0.1 is never touched. Rules count
what they drop (`dropped()`), so a test can show its fault had teeth.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import os
import re
import shutil
import subprocess
from contextlib import contextmanager

TABLE_PREFIX = "raftka_"
_TABLE_NAME = re.compile(r"^raftka_[a-z0-9_]{1,40}$")


class NetFaultUnavailable(RuntimeError):
    """The kernel facility or tool a network fault needs is missing here (the message names
    it and how to get it)."""


class NetFaultError(ValueError):
    """A fault asked for something this module refuses (an address outside 127/8, a bad
    table name, an empty side)."""


@dataclasses.dataclass(frozen=True)
class Drop:
    src: frozenset[str]
    dst: frozenset[str]
    percent: int = 100          # 1..100: 100 drops everything, less drops that share at random


def _addresses(side) -> frozenset[str]:
    out = frozenset(side)
    if not out:
        raise NetFaultError("a side of a network fault names no address")
    for a in out:
        try:
            ip = ipaddress.IPv4Address(a)
        except ValueError:
            raise NetFaultError(f"{a!r} is not an IPv4 address") from None
        if not ip.is_loopback or a == "127.0.0.1":
            # 127.0.0.1 is everyone's: clients, other tests, other programs on this machine
            raise NetFaultError(f"{a}: faults only match nodes' own loopback addresses "
                                "(127.x.y.z other than 127.0.0.1)")
    return out


def isolate(node: str, others) -> list[Drop]:
    """`node` cut off from every one of `others`, both ways."""
    return split([node], [o for o in others if o != node])


def split(side_a, side_b) -> list[Drop]:
    """Two sides that cannot reach each other (a majority/minority split)."""
    a, b = _addresses(side_a), _addresses(side_b)
    if a & b:
        raise NetFaultError(f"{', '.join(sorted(a & b))} on both sides of a split")
    return [Drop(a, b), Drop(b, a)]


def bridge(side_a, side_b, bridge_node: str) -> list[Drop]:
    """`side_a` and `side_b` cut from each other, `bridge_node` reaching both (it is on
    neither side's list of dropped peers)."""
    return split([x for x in side_a if x != bridge_node], [x for x in side_b if x != bridge_node])


def one_way(src, dst) -> list[Drop]:
    """Packets from `src` to `dst` dropped, the other direction left alone."""
    return [Drop(_addresses(src), _addresses(dst))]


def loss(node: str, others, percent: int) -> list[Drop]:
    """`percent` of the packets between `node` and `others` lost at random, both ways."""
    if not 1 <= percent <= 100:
        raise NetFaultError(f"loss percent {percent}: must be 1..100")
    return [dataclasses.replace(d, percent=percent) for d in isolate(node, others)]


def _set(addresses: frozenset[str]) -> str:
    return "{ " + ", ".join(sorted(addresses, key=ipaddress.IPv4Address)) + " }"


def ruleset(table: str, drops: list[Drop]) -> str:
    """The `nft -f -` script that (re)creates `table` holding exactly `drops`."""
    if not _TABLE_NAME.match(table):
        raise NetFaultError(f"table {table!r}: must match {_TABLE_NAME.pattern}")
    rules = []
    for d in drops:
        match = f"ip saddr {_set(_addresses(d.src))} ip daddr {_set(_addresses(d.dst))}"
        if d.percent < 100:
            match += f" numgen random mod 100 < {d.percent}"
        rules.append(f"        {match} counter drop")
    # `add` makes the table exist, so the delete cannot fail; then it is rebuilt, all in one
    # transaction: a second apply replaces the fault instead of adding to it
    return (f"add table ip {table}\n"
            f"delete table ip {table}\n"
            f"table ip {table} {{\n"
            f"    chain output {{\n"
            f"        type filter hook output priority filter; policy accept;\n"
            + "".join(r + "\n" for r in rules) +
            f"    }}\n}}\n")


class Nft:
    """Runs `nft`. Needs root (CAP_NET_ADMIN) and a kernel with nf_tables; `check()` says
    exactly which is missing."""

    def __init__(self, binary: str = "nft"):
        self.binary = binary

    def check(self) -> None:
        if shutil.which(self.binary) is None:
            raise NetFaultUnavailable(
                f"`{self.binary}` is not installed: network partitions need nftables "
                "(Debian: apt-get install -y nftables)")
        if os.geteuid() != 0:
            raise NetFaultUnavailable("network partitions change the kernel's packet filter: "
                                      "they need root (CAP_NET_ADMIN); this process is not root")
        probe = self._run(["list", "tables"], check=False)
        if probe.returncode != 0:
            raise NetFaultUnavailable(f"nftables does not work here (kernel without nf_tables, "
                                      f"or no CAP_NET_ADMIN): {probe.stderr.strip()}")

    def _run(self, args: list[str], stdin: str | None = None, check: bool = True):
        done = subprocess.run([self.binary, *args], input=stdin, capture_output=True,
                              text=True, timeout=30)
        if check and done.returncode != 0:
            raise NetFaultError(f"nft {' '.join(args)} failed: {done.stderr.strip()}")
        return done

    def apply(self, table: str, drops: list[Drop]) -> None:
        self._run(["-f", "-"], stdin=ruleset(table, drops))

    def remove(self, table: str) -> None:
        """Delete `table` if it is there (healing the fault it holds)."""
        if not _TABLE_NAME.match(table):
            raise NetFaultError(f"table {table!r}: must match {_TABLE_NAME.pattern}")
        self._run(["-f", "-"], stdin=f"add table ip {table}\ndelete table ip {table}\n")

    def tables(self) -> list[str]:
        """Our tables (raftka_*) now in the kernel."""
        out = json.loads(self._run(["-j", "list", "tables"]).stdout or "{}")
        return [t["table"]["name"] for t in out.get("nftables", [])
                if "table" in t and t["table"]["name"].startswith(TABLE_PREFIX)]

    def dropped(self, table: str) -> int:
        """Packets the rules of `table` dropped so far (0 when it is gone)."""
        done = self._run(["-j", "list", "table", "ip", table], check=False)
        if done.returncode != 0:
            return 0
        total = 0
        for item in json.loads(done.stdout).get("nftables", []):
            for expr in item.get("rule", {}).get("expr", []):
                if "counter" in expr:
                    total += expr["counter"]["packets"]
        return total

    @contextmanager
    def installed(self, table: str, drops: list[Drop]):
        """The fault in place for the `with` block; removed on the way out, whatever happens."""
        self.apply(table, drops)
        try:
            yield self
        finally:
            self.remove(table)
