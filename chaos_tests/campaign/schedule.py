"""Nemesis schedules: which faults a round injects, when, for how long, on which node. Pure and
seeded (the same seed gives the same schedule), plus delta debugging to shrink a failing one.

A round's schedule is a list of `FaultStep`s, one after another (never two at once: a failing
round then points at one fault or a short sequence, and shrinking removes steps cleanly).

| class           | inject                                           | heal                     |
|-----------------|--------------------------------------------------|--------------------------|
| kill            | SIGKILL a broker                                 | start it again           |
| pause           | SIGSTOP a broker                                 | SIGCONT                  |
| restart         | SIGTERM a broker (controlled shutdown), start it | (nothing)                |
| controller-kill | SIGKILL a controller                             | start it again           |
| isolate         | nftables: one node cut off from every other      | drop the rules           |
| split           | nftables: two nodes cut from the other four      | drop the rules           |
| bridge          | nftables: two sides cut, one node reaching both  | drop the rules           |
| oneway          | nftables: one node's packets to the others lost  | drop the rules           |
| loss            | nftables: 30 % of one node's packets lost        | drop the rules           |

The nftables classes need root and nft (`check_available` says which is missing).
"""

from __future__ import annotations

import dataclasses
import json
import random

PROCESS_FAULTS = ("kill", "pause", "restart", "controller-kill")
NET_FAULTS = ("isolate", "split", "bridge", "oneway", "loss")
FAULT_CLASSES = PROCESS_FAULTS + NET_FAULTS
BROKERS = ("broker-0", "broker-1", "broker-2")
CONTROLLERS = ("controller-3000", "controller-3001", "controller-3002")
NODES = CONTROLLERS + BROKERS


@dataclasses.dataclass(frozen=True)
class FaultStep:
    fault: str
    targets: tuple[str, ...]        # the node(s) it acts on (split/bridge: side A, bridge node)
    at: float                       # seconds after the round's workload started
    duration: float                 # how long it lasts before its heal

    @property
    def end(self) -> float:
        return self.at + self.duration

    def label(self) -> str:
        return f"{self.fault}({','.join(self.targets)})@{self.at:.1f}s+{self.duration:.1f}s"


def parse_faults(text: str) -> list[str]:
    """`kill,pause,...` (or `all`) → fault classes; unknown names are a clear error."""
    names = list(FAULT_CLASSES) if text.strip() == "all" else \
        [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in FAULT_CLASSES]
    if unknown or not names:
        raise ValueError(f"unknown fault class(es) {unknown or text!r}: choose from "
                         f"{', '.join(FAULT_CLASSES)} (or all)")
    return names


def _targets(rng: random.Random, fault: str) -> tuple[str, ...]:
    if fault in ("kill", "pause", "restart"):
        return (rng.choice(BROKERS),)
    if fault == "controller-kill":
        return (rng.choice(CONTROLLERS),)
    if fault in ("isolate", "oneway", "loss"):
        return (rng.choice(NODES),)
    nodes = list(NODES)
    rng.shuffle(nodes)
    if fault == "split":
        return tuple(sorted(nodes[:2]))                 # a minority of two against four
    return tuple(sorted(nodes[:2])) + (nodes[2],)       # bridge: side A, then the bridge node


def make_schedule(seed: int, faults: list[str], round_s: float,
                  max_steps: int = 3) -> list[FaultStep]:
    """One round's schedule: 1..max_steps faults drawn from `faults`, back to back with gaps,
    all healed before the last fifth of the round (so the round ends with a healthy cluster
    serving)."""
    rng = random.Random(seed)
    steps, t = [], rng.uniform(0.5, 1.5)
    horizon = round_s * 0.8
    for _ in range(rng.randint(1, max_steps)):
        duration = rng.uniform(1.0, 3.0)
        if t + duration > horizon:
            break
        fault = rng.choice(faults)
        steps.append(FaultStep(fault, _targets(rng, fault), round(t, 2), round(duration, 2)))
        t += duration + rng.uniform(0.5, 1.5)
    return steps


def round_seed(campaign_seed: int, round_no: int) -> int:
    return random.Random(campaign_seed * 1_000_003 + round_no).getrandbits(32)


def dumps(steps: list[FaultStep]) -> str:
    return json.dumps([dataclasses.asdict(s) for s in steps])


def loads(text: str) -> list[FaultStep]:
    try:
        raw = json.loads(text)
        steps = [FaultStep(s["fault"], tuple(s["targets"]), float(s["at"]), float(s["duration"]))
                 for s in raw]
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"not a schedule (a JSON list of faults): {exc}") from None
    parse_faults(",".join(s.fault for s in steps) or "kill")
    return steps


def ddmin(items: list, fails, budget: int = 12) -> tuple[list, int]:
    """Zeller's delta debugging: a small sublist of `items` for which `fails(sublist)` still
    holds (1-minimal when the budget allows). Returns (sublist, runs used). `fails(items)` is
    assumed true (the caller saw it fail); each call of `fails` is one re-run."""
    runs, n = 0, 2
    while len(items) >= 2 and runs < budget:
        size = len(items) // n
        chunks = [items[i:i + size] for i in range(0, len(items), size)]
        reduced = False
        for i in range(len(chunks)):
            for candidate in (chunks[i], [x for j, c in enumerate(chunks) if j != i for x in c]):
                if runs >= budget or not candidate or len(candidate) == len(items):
                    continue
                runs += 1
                if fails(candidate):
                    items, n, reduced = candidate, max(n - 1, 2), True
                    break
            if reduced:
                break
        if not reduced:
            if n >= len(items):
                break
            n = min(n * 2, len(items))
    if len(items) == 1 and runs < budget:
        runs += 1
        if fails([]):
            items = []
    return items, runs


def check_available(faults: list[str]) -> None:
    """Refuse nftables fault classes clearly when this machine cannot make them."""
    wanted = [f for f in faults if f in NET_FAULTS]
    if not wanted:
        return
    from clients.cli.netfaults.nft import Nft, NetFaultUnavailable
    try:
        Nft().check()
    except NetFaultUnavailable as exc:
        raise NetFaultUnavailable(f"fault classes {', '.join(wanted)} need kernel packet "
                                  f"filtering: {exc}") from None
