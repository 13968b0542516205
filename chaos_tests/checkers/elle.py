"""An Elle-style dependency-cycle check for the transactional workload (after Kingsbury and
Alvaro's Elle, as Jepsen used it on Redpanda and Bufstream), reduced to Kafka's shape.

A partition is an append-only list. A transaction (`TxnOp`) appends values to partitions and
may read (poll) a run of a partition: what it read ends at some value. The final
read_committed log gives each partition's *version order* (the order its values were
committed in). From it, between committed transactions:

    ww  T1 → T2  T2's value follows T1's directly in a partition's log (T2 wrote after T1)
    wr  T1 → T2  T2 read, as the last value of its poll of a partition, a value T1 wrote
    rw  T1 → T2  T1's poll of a partition ended right before a value T2 wrote: T1 did not see
                 T2's write, so T1 must come before T2 (an anti-dependency)

A serializable history has an acyclic graph. A cycle is classified as Adya does:
    G0        only ww edges (write cycle: two transactions' appends interleaved both ways)
    G1c       ww and wr edges (circular information flow: each saw the other's effect)
    G-single  exactly one rw edge (read skew: a transaction saw part of another's effects)
    G2        two or more rw edges (anti-dependency cycle, e.g. write skew)
Each strongly connected component of the graph yields one cycle, of the worst class found.
Aborted reads (G1a) and partial transactions are txn.py's; values not in the final log (aborted
or lost) place no transaction in the version order here.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict, deque

from chaos_tests.checkers.checks import CheckResult

WW, WR, RW = "ww", "wr", "rw"


@dataclasses.dataclass
class TxnOp:
    id: str
    writes: list[tuple[int, str]] = dataclasses.field(default_factory=list)   # (partition, value)
    reads: list[tuple[int, list[str]]] = dataclasses.field(default_factory=list)
    committed: bool = True          # False: aborted or never committed (not a graph node)


def dependency_graph(txns: list[TxnOp], final_log: dict[int, list[str]]):
    """{(a, b): {edge kinds}} between committed transactions, from the version orders."""
    writer = {v: t.id for t in txns if t.committed for _, v in t.writes}
    edges: dict[tuple[str, str], set[str]] = defaultdict(set)

    def add(a, b, kind):
        if a is not None and b is not None and a != b:
            edges[(a, b)].add(kind)
    position = {}
    for partition, values in final_log.items():
        for i, v in enumerate(values):
            position[v] = (partition, i)
            if i:
                add(writer.get(values[i - 1]), writer.get(v), WW)
    for t in txns:
        if not t.committed:
            continue
        for partition, seen in t.reads:
            log = final_log.get(partition, [])
            at = -1
            if seen:
                if seen[-1] not in position:
                    continue            # a value outside the final log: other checkers
                add(writer.get(seen[-1]), t.id, WR)
                at = position[seen[-1]][1]
            if at + 1 < len(log):
                add(t.id, writer.get(log[at + 1]), RW)
    return edges


def _sccs(nodes, succ) -> list[list[str]]:
    """Tarjan's strongly connected components (iterative: histories can be long)."""
    index, low, on, stack, out, n = {}, {}, set(), [], [], 0
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(succ[root]))]
        index[root] = low[root] = n
        n += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = n
                    n += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(succ[w])))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(comp)
    return out


def _path(src, dst, comp, adj, kinds) -> list[str] | None:
    """A shortest path src → dst inside `comp` using only edges of `kinds` (BFS)."""
    prev, queue = {src: None}, deque([src])
    while queue:
        v = queue.popleft()
        if v == dst:
            break
        for w, k in adj[v]:
            if w in comp and k & kinds and w not in prev:
                prev[w] = v
                queue.append(w)
    if dst not in prev:
        return None
    path, v = [], dst
    while v is not None:
        path.append(v)
        v = prev[v]
    return path[::-1]


def _cycle_in(comp: set, edges) -> tuple[str, list[str]]:
    """The worst-class cycle in a strongly connected component: G0 before G1c before
    G-single before G2 (a weaker isolation level already forbids the earlier ones)."""
    adj = defaultdict(list)
    for (a, b), k in edges.items():
        adj[a].append((b, k))
    inside = [(a, b, k) for (a, b), k in sorted(edges.items()) if a in comp and b in comp]
    for name, kinds in (("G0", {WW}), ("G1c", {WW, WR})):
        for a, b, k in inside:
            back = _path(b, a, comp, adj, kinds) if k & kinds else None
            if back:
                return name, [a] + back
    best = None
    for a, b, k in inside:
        if RW in k:
            back = _path(b, a, comp, adj, {WW, WR})
            if back:
                return "G-single", [a] + back
            back = _path(b, a, comp, adj, {WW, WR, RW})
            if back and best is None:
                best = [a] + back
    return "G2", best or sorted(comp)


def _describe(cycle: list[str], edges) -> str:
    steps = [f"{a} -{'/'.join(sorted(edges[(a, b)]))}-> " for a, b in zip(cycle, cycle[1:])]
    return "".join(steps) + cycle[-1]


def check_cycles(txns: list[TxnOp], final_log: dict[int, list[str]]) -> CheckResult:
    result = CheckResult("txn-cycles")
    edges = dependency_graph(txns, final_log)
    succ = defaultdict(list)
    nodes = [t.id for t in txns if t.committed]
    for a, b in edges:
        succ[a].append(b)
    for comp in _sccs(nodes, succ):
        kind, cycle = _cycle_in(set(comp), edges)
        result.add(f"{kind}: {_describe(cycle, edges)}")
    return result


def final_log_of(history) -> dict[int, list[str]]:
    """A History's final reads as {partition: values in offset order}."""
    log = defaultdict(list)
    for op in sorted(history.final_reads, key=lambda o: (o.partition, o.offset)):
        log[op.partition].append(op.value)
    return dict(log)
