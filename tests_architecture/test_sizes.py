"""Small pieces (ARCHITECTURE.md): a module at most 600 lines, a function at most 70, outside
tests and generated protocol code.

Today's larger pieces are listed below with their current size. They may only shrink: the test
fails when one grows, when a new piece crosses a limit, and when a listed piece is back within
its limit or gone (then delete its line — the list only ever gets shorter). Lower a number when
you shrink a piece, so it cannot grow back unnoticed.
"""

from __future__ import annotations

import ast

from tests_architecture.sources import ROOT, is_generated, is_test, parse, source_files

MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 70

# path -> lines today
MODULE_EXCEPTIONS: dict[str, int] = {}

# "path::qualified.name" -> lines today (def line to last line, decorators excluded)
FUNCTION_EXCEPTIONS: dict[str, int] = {}


def checked_files():
    return [rel for rel in source_files() if not is_test(rel) and not is_generated(rel)]


def module_sizes() -> dict[str, int]:
    return {rel: len((ROOT / rel).read_text().splitlines()) for rel in checked_files()}


def function_sizes() -> dict[str, int]:
    sizes = {}
    for rel in checked_files():
        def visit(node, prefix):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    name = f"{prefix}{child.name}"
                    sizes[f"{rel}::{name}"] = child.end_lineno - child.lineno + 1
                    visit(child, name + ".")
                elif isinstance(child, ast.ClassDef):
                    visit(child, f"{prefix}{child.name}.")
                else:
                    visit(child, prefix)
        visit(parse(rel), "")
    return sizes


def _ratchet(kind: str, sizes: dict[str, int], limit: int, exceptions: dict[str, int]) -> list:
    problems = []
    for key, size in sorted(sizes.items()):
        allowed = exceptions.get(key)
        if allowed is None and size > limit:
            problems.append(f"{key}: {size} lines, over the {kind} limit of {limit}: split it")
        elif allowed is not None and size > allowed:
            problems.append(f"{key}: grew to {size} lines (listed at {allowed}); it may only "
                            f"shrink — split it rather than raise the number")
    for key, allowed in sorted(exceptions.items()):
        size = sizes.get(key)
        if size is None:
            problems.append(f"{key}: listed as a {kind} exception but gone: remove its line")
        elif size <= limit:
            problems.append(f"{key}: {size} lines, within the {kind} limit of {limit} now: "
                            f"remove it from the exceptions")
    return problems


def test_module_sizes():
    problems = _ratchet("module", module_sizes(), MAX_MODULE_LINES, MODULE_EXCEPTIONS)
    assert not problems, "\n".join(problems)


def test_function_sizes():
    problems = _ratchet("function", function_sizes(), MAX_FUNCTION_LINES, FUNCTION_EXCEPTIONS)
    assert not problems, "\n".join(problems)


def test_the_ratchet_reports_growth_new_pieces_and_removable_exceptions():
    sizes = {"a.py": 650, "b.py": 700, "c.py": 500}
    problems = _ratchet("module", sizes, 600, {"a.py": 640, "c.py": 610, "d.py": 900})
    assert [p.split(":")[0] for p in problems] == ["a.py", "b.py", "c.py", "d.py"]
    assert "grew" in problems[0] and "split it" in problems[1]
    assert "remove it" in problems[2] and "gone" in problems[3]
    assert not _ratchet("module", {"a.py": 630}, 600, {"a.py": 640})    # shrinking is fine
