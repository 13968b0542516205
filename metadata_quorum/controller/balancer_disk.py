"""The balancer's disk goal (issue 19 item 6b): once replica and preferred-leader counts are
even, even the bytes on disk per broker — without undoing the counts.

Sizes are per partition, from each partition's leader (the controller: load reports on
heartbeats, load_reports.py; `raftka cluster balance --status`: DescribeLogDirs); a broker's
bytes are the sum over the partitions it has a replica of (a move in progress counted at its
target, as the counts are). Skewed means max − min above both
`raftka.balancer.disk.threshold.percent` of the mean and `raftka.balancer.disk.min.skew.bytes`.

One step per decision, between the heaviest broker H and the lightest L:
- a *swap*: a replica of partition A moves H → L and a replica of partition B moves L → H, so
  replica counts do not change and the count goals never undo it; or
- a *single move* H → L, only where the replica counts stay within the threshold afterwards.
The step chosen leaves |bytes(H) − bytes(L)| smallest, and is taken only if that is smaller than
before by at least a quarter of the min skew (so sizes that drift while data is written cannot
make the balancer shuffle replicas back and forth). Each step lowers the sum of squared byte
deviations over brokers (two values with a fixed sum, brought closer), so steps end.
Rules as for count moves: healthy partitions only (not moving, full ISR, usable replicas), no
move lowers the number of racks a partition spans, no broker being drained receives a replica.
A swap is two reassignments and needs room for two.
"""

from __future__ import annotations

import bisect

DISK_PERCENT_CONFIG = "raftka.balancer.disk.threshold.percent"
DISK_MIN_SKEW_CONFIG = "raftka.balancer.disk.min.skew.bytes"
DEFAULT_DISK_PERCENT = 10
DEFAULT_DISK_MIN_SKEW = 256 << 20


def broker_bytes(brokers, parts: dict, sizes: dict) -> dict:
    out = {b: 0 for b in brokers}
    for key, p in parts.items():
        size = sizes.get(key, 0)
        for b in p.replicas:
            if b in out:
                out[b] += size
    return out


def skewed(by_broker: dict, percent: int, min_skew: int) -> bool:
    if len(by_broker) < 2:
        return False
    spread = max(by_broker.values()) - min(by_broker.values())
    mean = sum(by_broker.values()) / len(by_broker)
    return spread > min_skew and spread * 100 > percent * mean


def _moved(p, src, dst):
    return tuple(dst if b == src else b for b in p.replicas)


def _candidates(parts, sizes, src, dst, brokers, healthy, racks, draining) -> list:
    """(size, key, target) of healthy partitions with a replica on src, none on dst, that may
    move src → dst, by size."""
    if dst in draining:
        return []
    out = []
    for key in sorted(parts, key=repr):
        p = parts[key]
        if src in p.replicas and dst not in p.replicas and healthy(p, brokers):
            target = _moved(p, src, dst)
            if racks(target, brokers) >= racks(p.replicas, brokers):
                out.append((sizes.get(key, 0), key, target))
    out.sort(key=lambda c: c[0])
    return out


def step(brokers, parts, sizes, rc: dict, threshold: int, min_skew: int, room: int,
         healthy, racks, draining=frozenset()) -> list:
    """[(key, target, why), ...]: the one step described above, or [] when none narrows the
    gap enough (or no room)."""
    by = broker_bytes(brokers, parts, sizes)
    heavy = max(by, key=lambda b: (by[b], -b))
    light = min((b for b in by if b not in draining), key=lambda b: (by[b], b), default=None)
    if light is None or light == heavy or room < 1:
        return []
    gap = by[heavy] - by[light]
    need = gap - max(1, min_skew // 4)          # the new gap must be at most this
    ups = _candidates(parts, sizes, heavy, light, brokers, healthy, racks, draining)
    best = None                                 # (new gap, moves)
    after = {**rc, heavy: rc[heavy] - 1, light: rc[light] + 1}
    if max(after.values()) - min(after.values()) <= threshold:
        for a, key, target in ups:
            new = abs(gap - 2 * a)
            if best is None or new < best[0]:
                best = (new, [(key, target, f"disk: replica {heavy} -> {light}")])
    if room >= 2:
        downs = _candidates(parts, sizes, light, heavy, brokers, healthy, racks, draining)
        down_sizes = [c[0] for c in downs]
        for a, akey, atarget in ups:
            want = a - gap / 2                  # a B of this size closes the gap exactly
            i = bisect.bisect_left(down_sizes, want)
            for j in (i - 1, i):
                if 0 <= j < len(downs) and downs[j][1] != akey:
                    b, bkey, btarget = downs[j]
                    new = abs(gap - 2 * (a - b))
                    if best is None or new < best[0]:
                        best = (new, [(akey, atarget, f"disk: swap, replica {heavy} -> {light}"),
                                      (bkey, btarget, f"disk: swap, replica {light} -> {heavy}")])
    if best is None or best[0] > need:
        return []
    return best[1]
