"""Slow and lossy links made by the kernel's traffic control on lo, for the packets of chosen
node addresses only (see nft.py for the addresses).

lo is shared with everything on the machine, so the shaping sits behind a filter: the root
qdisc is an HTB (handle 5a7f:, ours) with no default class, so unclassified traffic (everyone
else's, 127.0.0.1) is sent directly, unshaped; u32 filters send packets from or to the chosen
addresses into one class, limited to `rate_kbit` (a slow link: packets queue, so they are
delayed, and a full queue drops) with a `netem` qdisc under it for delay/jitter/loss/reordering.

`commands(...)` is pure (the tc argument lists); `Tc` runs them. Kernels built without netem
(CONFIG_NET_SCH_NETEM) exist, this test machine's among them: asking for delay, loss or
reordering there raises NetFaultUnavailable saying so; a rate limit needs only HTB, and random
loss is available from nftables (nft.loss) instead.
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from contextlib import contextmanager

from clients.cli.netfaults.nft import NetFaultError, NetFaultUnavailable, _addresses

DEVICE = "lo"
ROOT = "5a7f:"          # our root qdisc's handle: only a root with this handle is ever removed
CLASS = "5a7f:1"
NETEM = "5a80:"
FULL_RATE_KBIT = 10_000_000      # "no limit" for a class that only carries netem


@dataclasses.dataclass(frozen=True)
class Shape:
    """What the links of the chosen addresses suffer (all optional but at least one)."""
    rate_kbit: int | None = None         # bandwidth both ways together (HTB)
    delay_ms: int = 0                    # netem
    jitter_ms: int = 0
    loss_percent: float = 0.0
    reorder_percent: float = 0.0         # netem: needs a delay (the others wait, these don't)

    @property
    def uses_netem(self) -> bool:
        return bool(self.delay_ms or self.jitter_ms or self.loss_percent or self.reorder_percent)

    def netem_args(self) -> list[str]:
        args = []
        if self.delay_ms or self.jitter_ms:
            args += ["delay", f"{self.delay_ms}ms"] + ([f"{self.jitter_ms}ms"] if self.jitter_ms
                                                       else [])
        if self.loss_percent:
            args += ["loss", f"{self.loss_percent:g}%"]
        if self.reorder_percent:
            if not self.delay_ms:
                raise NetFaultError("netem reorders by letting some packets skip a delay: "
                                    "reorder needs delay_ms")
            args += ["reorder", f"{self.reorder_percent:g}%"]
        return args


def commands(addresses, shape: Shape) -> list[list[str]]:
    """The `tc` argument lists that install `shape` for packets from or to `addresses`."""
    addrs = sorted(_addresses(addresses))
    if shape.rate_kbit is None and not shape.uses_netem:
        raise NetFaultError("a shape needs a rate limit or a netem delay/loss/reorder")
    if shape.rate_kbit is not None and shape.rate_kbit < 8:
        raise NetFaultError(f"rate {shape.rate_kbit} kbit/s: at least 8")
    rate = f"{shape.rate_kbit or FULL_RATE_KBIT}kbit"
    out = [["qdisc", "add", "dev", DEVICE, "root", "handle", ROOT, "htb"],
           ["class", "add", "dev", DEVICE, "parent", ROOT, "classid", CLASS, "htb",
            "rate", rate, "ceil", rate]]
    if shape.uses_netem:
        out.append(["qdisc", "add", "dev", DEVICE, "parent", CLASS, "handle", NETEM, "netem",
                    *shape.netem_args()])
    for a in addrs:
        for direction in ("src", "dst"):
            out.append(["filter", "add", "dev", DEVICE, "parent", ROOT, "protocol", "ip",
                        "prio", "1", "u32", "match", "ip", direction, f"{a}/32",
                        "flowid", CLASS])
    return out


class Tc:
    """Runs `tc` on lo. Root and a kernel with HTB and u32 (and netem for delay/loss/reorder)."""

    def __init__(self, binary: str = "tc"):
        self.binary = binary

    def _run(self, args: list[str], check: bool = True):
        if shutil.which(self.binary) is None:
            raise NetFaultUnavailable(f"`{self.binary}` is not installed: link shaping needs "
                                      "iproute2 (Debian: apt-get install -y iproute2)")
        done = subprocess.run([self.binary, *args], capture_output=True, text=True, timeout=30)
        if check and done.returncode != 0:
            err = done.stderr.strip()
            if "netem" in args and "unknown" in err.lower():
                raise NetFaultUnavailable(
                    "this kernel has no netem qdisc (CONFIG_NET_SCH_NETEM / module sch_netem): "
                    "tc netem delay, loss and reordering are unavailable here; a rate limit "
                    "(HTB) and random loss from nftables (nft.loss) still work")
            if "Operation not permitted" in err:
                raise NetFaultUnavailable(f"tc needs root (CAP_NET_ADMIN): {err}")
            if "unknown" in err.lower():
                raise NetFaultUnavailable(f"the kernel lacks a qdisc or filter tc needs "
                                          f"(tc {' '.join(args[:4])}...): {err}")
            raise NetFaultError(f"tc {' '.join(args)} failed: {err}")
        return done

    def root_is_ours(self) -> bool | None:
        """True: our shaping is on lo; None: lo has no root qdisc of anyone's; False: another's
        (never touched)."""
        shown = self._run(["qdisc", "show", "dev", DEVICE, "root"]).stdout
        if f" {ROOT} root" in shown or f" {ROOT.rstrip(':')}: root" in shown:
            return True
        if not shown.strip() or "noqueue" in shown:
            return None
        return False

    def apply(self, addresses, shape: Shape) -> None:
        cmds = commands(addresses, shape)
        mine = self.root_is_ours()
        if mine is False:
            raise NetFaultUnavailable(f"{DEVICE} already has a root qdisc that is not ours "
                                      f"(handle {ROOT}); not replacing someone else's shaping")
        if mine:
            self.remove()
        try:
            for c in cmds:
                self._run(c)
        except BaseException:
            self.remove()
            raise

    def remove(self) -> None:
        """Remove our root qdisc (and all under it) if it is there; anyone else's stays."""
        if self.root_is_ours():
            self._run(["qdisc", "del", "dev", DEVICE, "root", "handle", ROOT])

    @contextmanager
    def installed(self, addresses, shape: Shape):
        self.apply(addresses, shape)
        try:
            yield self
        finally:
            self.remove()
