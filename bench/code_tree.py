"""Start a cluster's processes from another code tree, for benchmarks comparing trees side by side.

The nodes start with `python -m <package>`, which puts the working directory first on sys.path,
ahead of PYTHONPATH: setting PYTHONPATH alone leaves every cluster running the bench's own
checkout (bench/produce_partitions.py once compared a tree with itself that way). So both the
working directory and PYTHONPATH point at the tree while the processes start, and are restored
after.
"""

from __future__ import annotations

import contextlib
import os


@contextlib.contextmanager
def started_from(tree: str | os.PathLike | None):
    """Processes started inside this block run `tree`'s code (None: this checkout's)."""
    if not tree:
        yield
        return
    old_cwd, old_pp = os.getcwd(), os.environ.get("PYTHONPATH")
    os.chdir(tree)
    os.environ["PYTHONPATH"] = str(tree)
    try:
        yield
    finally:
        os.chdir(old_cwd)
        if old_pp is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old_pp
