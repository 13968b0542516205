"""Nemesis schedules: which faults a round injects, when, for how long, on which node. Pure and
seeded (the same seed gives the same schedule), plus delta debugging to shrink a failing one.

A round's schedule is a list of `FaultStep`s, by default one after another (a failing round
then points at one fault or a short sequence, and shrinking removes steps cleanly); with
`overlap=True` they come in pairs, the second injected while the first holds, on other nodes
(kill + isolate, pause + split, ...: what real outages look like).

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
| flap            | nftables: one link (two nodes) cut and restored  | drop the rules           |
|                 | every 0.5-2 s, seeded by `param`                 |                          |
| clock           | a node's wall clock jumps `param` s (±5 s-10 min) | its clock back to true  |
| disk-full       | a broker's log dir (its own tmpfs) filled up     | free it, restart broker  |
| time-jump       | a node's monotonic and wall clocks leap `param` s | (none: clocks stay ahead)|
|                 | forward (2-60 s; libfaketime, timejump.py)       |                          |

The nftables classes need root and nft; disk-full needs root and tmpfs mounts (the campaign
puts each broker's log dir on its own size-limited tmpfs); clock needs nothing (the nodes run
with `raftka.clock.offset.file`, common/clock.py); time-jump needs libfaketime (the nodes start
under its LD_PRELOAD). `check_available` says what is missing.
"""

from __future__ import annotations

import dataclasses
import json
import random

PROCESS_FAULTS = ("kill", "pause", "restart", "controller-kill")
NET_FAULTS = ("isolate", "split", "bridge", "oneway", "loss", "flap")
NEW_FAULTS = ("clock", "disk-full", "time-jump")
FAULT_CLASSES = PROCESS_FAULTS + NET_FAULTS + NEW_FAULTS
MAX_CLOCK_JUMP_S = 600
MAX_TIME_JUMP_S = 60               # a monotonic leap past every timeout the cluster has
BROKERS = ("broker-0", "broker-1", "broker-2")
CONTROLLERS = ("controller-3000", "controller-3001", "controller-3002")
NODES = CONTROLLERS + BROKERS


@dataclasses.dataclass(frozen=True)
class FaultStep:
    fault: str
    targets: tuple[str, ...]        # the node(s) it acts on (split/bridge: side A, bridge node)
    at: float                       # seconds after the round's workload started
    duration: float                 # how long it lasts before its heal
    param: float = 0.0              # clock, time-jump: the jump in seconds; flap: its timing seed

    @property
    def end(self) -> float:
        return self.at + self.duration

    def label(self) -> str:
        extra = f",{self.param:+.0f}s" if self.fault in ("clock", "time-jump") else ""
        return (f"{self.fault}({','.join(self.targets)}{extra})@{self.at:.1f}s"
                f"+{self.duration:.1f}s")

    def as_dict(self) -> dict:
        d = {"fault": self.fault, "targets": list(self.targets), "at": self.at,
             "duration": self.duration}
        if self.param:
            d["param"] = self.param
        return d


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
    if fault in ("kill", "pause", "restart", "disk-full"):
        return (rng.choice(BROKERS),)
    if fault == "controller-kill":
        return (rng.choice(CONTROLLERS),)
    if fault in ("isolate", "oneway", "loss", "clock", "time-jump"):
        return (rng.choice(NODES),)
    nodes = list(NODES)
    rng.shuffle(nodes)
    if fault == "flap":
        return tuple(sorted(nodes[:2]))                 # the link between these two
    if fault == "split":
        return tuple(sorted(nodes[:2]))                 # a minority of two against four
    return tuple(sorted(nodes[:2])) + (nodes[2],)       # bridge: side A, then the bridge node


def _param(rng: random.Random, fault: str) -> float:
    """Drawn only for the classes that have one, so older classes' schedules stay the same
    for the same seed (a seed in an old report still replays)."""
    if fault == "clock":                # seconds to minutes, forward or back
        return float(rng.choice((-1, 1)) * rng.randint(5, MAX_CLOCK_JUMP_S))
    if fault == "flap":
        return float(rng.getrandbits(31) or 1)
    if fault == "time-jump":            # forward only: a monotonic clock never goes back
        return float(rng.randint(2, MAX_TIME_JUMP_S))
    return 0.0


def _hold(fault: str, duration: float, room: float) -> float:
    """A flap holds 2.5 times longer (2.5-7.5 s), room allowing: with a toggle every 0.5-2 s,
    1-3 s would mostly be one cut and one restore, a short split rather than a flapping link."""
    return min(duration * 2.5 if fault == "flap" else duration, room)


def _step(rng: random.Random, fault: str, at: float, duration: float,
          avoid: frozenset[str] = frozenset()) -> FaultStep:
    targets = _targets(rng, fault)
    for _ in range(20):                 # an overlapping fault acts on other nodes
        if not avoid & set(targets):
            break
        targets = _targets(rng, fault)
    return FaultStep(fault, targets, round(at, 2), round(duration, 2), _param(rng, fault))


def make_schedule(seed: int, faults: list[str], round_s: float,
                  max_steps: int = 3, overlap: bool = False) -> list[FaultStep]:
    """One round's schedule: 1..max_steps faults drawn from `faults`, back to back with gaps,
    all healed before the last fifth of the round (so the round ends with a healthy cluster
    serving). `overlap`: each fault drawn is joined by a second one, on other nodes, injected
    while the first holds (the two windows overlap; either may heal first)."""
    rng = random.Random(seed)
    steps, t = [], rng.uniform(0.5, 1.5)
    horizon = round_s * 0.8
    for _ in range(rng.randint(1, max_steps)):
        duration = rng.uniform(1.0, 3.0)
        if t + duration > horizon:
            break
        fault = rng.choice(faults)
        duration = _hold(fault, duration, horizon - t)
        first = _step(rng, fault, t, duration)
        steps.append(first)
        end = t + duration              # unrounded, as before overlaps (same seed, same times)
        if overlap:
            at = t + rng.uniform(0.2, 0.8) * duration
            fault = rng.choice(faults)
            second = _step(rng, fault, at, _hold(fault, rng.uniform(1.0, 3.0), horizon - at),
                           frozenset(first.targets))
            steps.append(second)
            end = max(end, second.end)
        t = end + rng.uniform(0.5, 1.5)
    return steps


def round_seed(campaign_seed: int, round_no: int) -> int:
    return random.Random(campaign_seed * 1_000_003 + round_no).getrandbits(32)


def dumps(steps: list[FaultStep]) -> str:
    return json.dumps([s.as_dict() for s in steps])


def loads(text: str) -> list[FaultStep]:
    try:
        raw = json.loads(text)
        steps = [FaultStep(s["fault"], tuple(s["targets"]), float(s["at"]), float(s["duration"]),
                           float(s.get("param", 0.0))) for s in raw]
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
    """Refuse fault classes this machine cannot make, clearly (NetFaultUnavailable)."""
    from clients.cli.netfaults.nft import Nft, NetFaultUnavailable
    wanted = [f for f in faults if f in NET_FAULTS]
    if wanted:
        try:
            Nft().check()
        except NetFaultUnavailable as exc:
            raise NetFaultUnavailable(f"fault classes {', '.join(dict.fromkeys(wanted))} need "
                                      f"kernel packet filtering: {exc}") from None
    if "time-jump" in faults:
        from chaos_tests.campaign.timejump import check
        problem = check()
        if problem:
            raise NetFaultUnavailable(f"fault class time-jump: {problem}")
    if "disk-full" in faults:
        from chaos_tests.campaign.disk import check_tmpfs
        problem = check_tmpfs()
        if problem:
            raise NetFaultUnavailable(f"fault class disk-full needs a size-limited tmpfs per "
                                      f"broker: {problem}")
