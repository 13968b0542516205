"""Loading wire's optional C extensions (wire/records/_speedups.c, wire/messages/_codec.c).

Each extension mirrors pure-Python code that stays the reference. It is used only when it is
built, when RAFTKA_PURE_PYTHON is not 1, and when its VERSION matches the one its Python side
expects: an in-place build from older sources may not do what the Python code now does.
"""

from __future__ import annotations

import importlib
import os


def load_extension(module: str, version: int):
    """(the extension module, None), or (None, why it is not used)."""
    if os.environ.get("RAFTKA_PURE_PYTHON") == "1":
        return None, "RAFTKA_PURE_PYTHON=1"
    try:
        ext = importlib.import_module(module)
    except ImportError as e:
        return None, f"not built ({e}; `pip install -e .` builds it)"
    if getattr(ext, "VERSION", None) != version:
        return None, "stale build (run `pip install -e .` to rebuild)"
    return ext, None
