"""The package import graph follows the layers (ARCHITECTURE.md): imports only go down.

Every import of every module is read with `ast` — module level and inside functions, absolute
and relative — and mapped to a node: its top-level package, except the few nodes below that sit
elsewhere in the tree. The test fails on an import the table does not allow (an upward or
sideways dependency) and on a cycle between nodes. To add a dependency, change the table here,
in review, and ARCHITECTURE.md with it.
"""

from __future__ import annotations

import ast
from collections import defaultdict

from tests_architecture import sources
from tests_architecture.sources import is_test, module_name, parse, source_files

TOP = "*"          # may import anything of ours (nothing may import it back)

# node -> the nodes it may import (besides itself), top of the stack first
ALLOWED = {
    # top: commands, test harnesses, benchmarks, examples, tests
    "clients.cli": TOP,                       # the `raftka` command: runs and drives everything
    "entry": TOP,                             # python -m partition_server (combined mode runs a controller too)
    "harness": TOP,                           # partition_server/testing.py: starts whole clusters
    "chaos_tests": TOP,
    "bench": TOP,
    "examples": TOP,
    "tests": TOP,
    # the two servers: the broker may read the controller's records and image (MAY_READ)
    "partition_server": {"metadata_quorum", "common", "wire"},
    "metadata_quorum": {"common", "wire"},
    # libraries: our clients, the Spark connector
    "clients": {"common", "wire"},
    "spark_connector": {"common", "wire"},
    # shared by every node and client: connection, listener, TLS/SASL, properties, clock, quotas
    "common": {"wire"},
    # sans-IO protocol
    "wire": set(),
}

# modules that are not in their top-level package's layer
SPECIAL = {
    "clients.cli": "clients.cli",
    # the web console is a command too (`raftka console`): it runs the balancer's pure
    # decision (metadata_quorum.controller.balancer) as `raftka cluster balance --status` does
    "clients.console": "clients.cli",
    "partition_server.__main__": "entry",
    # Test support that starts 3 controllers + 3 brokers with `raftka dev`'s layout (from
    # clients.cli.dev), so tests run exactly what users run. It stays at this path because ~50
    # tests, chaos_tests and bench import it; it is a harness above both servers, not part of
    # the broker, and nothing in partition_server imports it.
    "partition_server.testing": "harness",
}

# what partition_server may import from metadata_quorum: the records and the image it replays,
# and two of the controller's read-only queries over that image, which the broker answers from
# its own copy (DescribeAcls, DescribeClientQuotas)
MAY_READ = {
    "metadata_quorum.records", "metadata_quorum.image",
    "metadata_quorum.controller.acl_control",          # AclFilter, describe_acls
    "metadata_quorum.controller.quota_control",        # describe_client_quotas
}

OURS = {"wire", "common", "metadata_quorum", "partition_server", "clients", "spark_connector",
        "chaos_tests", "bench", "examples", "tests_architecture"}


def node_of(module: str, rel: str | None = None) -> str | None:
    if rel is not None and is_test(rel):
        return "tests"
    for prefix in sorted(SPECIAL, key=len, reverse=True):
        if module == prefix or module.startswith(prefix + "."):
            return SPECIAL[prefix]
    top = module.split(".")[0]
    return top if top in OURS else None


def imports_of(rel: str):
    """(imported module, line) for every import in the file, relative ones resolved."""
    module = module_name(rel)
    package = module if rel.endswith("__init__.py") else module.rpartition(".")[0]
    for node in ast.walk(parse(rel)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = ".".join(parts[:len(parts) - node.level + 1])
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:            # `from pkg import mod` may name a submodule
                yield _submodule_or(base, alias.name), node.lineno


def _submodule_or(base: str, name: str) -> str:
    """`base.name` when that is a module or package of ours, else `base`."""
    path = sources.ROOT.joinpath(*base.split("."), name)
    return f"{base}.{name}" if path.with_suffix(".py").exists() or path.is_dir() else base


def edges():
    """[(from node, to node, imported module, 'file:line')] between different nodes."""
    out = []
    for rel in source_files():
        src = node_of(module_name(rel), rel)
        for target, line in imports_of(rel):
            dst = node_of(target)
            if dst is not None and dst != src:
                out.append((src, dst, target, f"{rel}:{line}"))
    return out


def test_the_allowed_table_is_layered():
    """No node below the top may reach a top node, and the table itself has no cycle."""
    assert not [(a, b) for a, allowed in ALLOWED.items() if allowed != TOP
                for b in allowed if ALLOWED[b] == TOP]
    assert not _cycles({a: set() if b == TOP else set(b) for a, b in ALLOWED.items()})


def test_imports_only_go_down():
    bad = []
    for src, dst, target, where in edges():
        allowed = ALLOWED[src]
        if allowed != TOP and dst not in allowed:
            bad.append(f"{where}: {src} imports {target} ({dst} is not below {src})")
        if src == "partition_server" and dst == "metadata_quorum" and \
                not any(target == m or target.startswith(m + ".") for m in MAY_READ):
            bad.append(f"{where}: the broker imports {target}; it may read only "
                       f"{', '.join(sorted(MAY_READ))}")
    assert not bad, "imports against the layers (ARCHITECTURE.md):\n" + "\n".join(bad)


def test_no_cycles_between_nodes():
    graph = defaultdict(set)
    for src, dst, _, _ in edges():
        if src != "tests":                       # tests import each other's helpers freely
            graph[src].add(dst)
    assert not _cycles(graph), f"import cycle between packages: {_cycles(graph)}"


def _cycles(graph) -> list:
    """One cycle per strongly connected component larger than a node (Tarjan, iterative)."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]
    nodes = set(graph) | {b for bs in graph.values() for b in bs}

    def strongconnect(root):
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))

    for n in sorted(nodes):
        if n not in index:
            strongconnect(n)
    return found


def test_the_checker_sees_function_level_and_relative_imports(tmp_path):
    """The reader itself: an import inside a function and a relative one are both seen."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "sibling.py").write_text("")
    (tmp_path / "pkg" / "mod.py").write_text(
        "def f():\n    from partition_server import broker\nfrom . import sibling\n"
        "from .sub import thing\n")
    old_root = sources.ROOT
    sources.ROOT = tmp_path
    sources.parse.cache_clear()
    try:
        found = set(imports_of("pkg/mod.py"))
    finally:
        sources.ROOT = old_root
        sources.parse.cache_clear()
    assert found == {("partition_server", 2), ("pkg.sibling", 3), ("pkg.sub", 4)}
    assert node_of("clients.cli.users") == "clients.cli" and node_of("clients.admin") == "clients"
    assert node_of("partition_server.tests.test_x", "partition_server/tests/test_x.py") == "tests"
