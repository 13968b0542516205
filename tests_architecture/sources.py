"""The repository's Python sources, as the architecture tests see them."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# top-level packages and script folders whose sources the tests read
PACKAGES = ("wire", "common", "metadata_quorum", "partition_server", "clients", "spark_connector",
            "chaos_tests", "bench", "examples", "tests_architecture")
SKIP_DIRS = {"__pycache__", "build", ".venv", ".hypothesis", ".pytest_cache"}


def is_test(rel: str) -> bool:
    """Tests and what only tests load: `tests/` folders, test_*.py, conftest.py."""
    parts = rel.split("/")
    return ("tests" in parts[:-1] or parts[0] == "tests_architecture"
            or parts[-1].startswith("test_") or parts[-1] == "conftest.py")


def is_generated(rel: str) -> bool:
    """Generated protocol code (wire/codegen writes it; a --check test keeps it in sync)."""
    return rel.startswith("wire/messages/") and rel.endswith("_generated.py")


@functools.cache
def source_files() -> tuple[str, ...]:
    """Paths relative to the repository root, with '/'."""
    out = ["conftest.py"] if (ROOT / "conftest.py").exists() else []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if not SKIP_DIRS.intersection(path.relative_to(ROOT).parts):
                out.append(path.relative_to(ROOT).as_posix())
    return tuple(out)


def module_name(rel: str) -> str:
    name = rel[:-3].replace("/", ".")
    return name[:-len(".__init__")] if name.endswith(".__init__") else name


@functools.cache
def parse(rel: str) -> ast.Module:
    return ast.parse((ROOT / rel).read_text(), rel)
