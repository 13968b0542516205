"""A SPARK_HOME whose Python processes start fast: pip's pyspark directory minus `python/`.

Spark puts `$SPARK_HOME/python/lib/pyspark.zip` first on the PYTHONPATH of every Python process
it starts, and the zip pip installs holds no bytecode, so each new process compiles the pyspark
modules it imports (~1.25 s of CPU here, 0.43 s from the installed package). Spark starts a new
one for each streaming query over a Python data source (the planner behind initialOffset,
latestOffset and partitions), so a short query pays it every time: bench/spark_stream.py
measured raftka/Parquet 0.24-0.53 (median 0.41) with the stock layout and 0.51-0.70 with this
one. Without the zip, Spark's Python processes import the installed pyspark (same wheel, same
version) and py4j, whose bytecode is cached — which needs `PYSPARK_PYTHON` to be an interpreter
that has pyspark installed, as this connector needs anyway.

    from spark_connector.spark_home import use_compiled_pyspark
    use_compiled_pyspark()     # before the first SparkSession; a SPARK_HOME already set is kept;
                               # the shim goes to ~/.cache/raftka (XDG_CACHE_HOME)

    python -m spark_connector.spark_home DIR   # makes DIR, prints `export SPARK_HOME=DIR`
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def pip_spark_home() -> Path:
    """Where pip's pyspark keeps Spark (jars/, bin/, python/...)."""
    from pyspark.find_spark_home import _find_spark_home
    return Path(_find_spark_home())


def make_spark_home(target: Path, source: Path | None = None) -> Path:
    """`target` becomes a SPARK_HOME of symlinks to everything in `source` (pip's Spark by
    default) except `python/`. Idempotent: an existing complete one is kept."""
    source = Path(source) if source is not None else pip_spark_home()
    if not (source / "jars").is_dir():
        raise ValueError(f"{source} is not a Spark home (no jars/ in it)")
    target = Path(target)
    target.mkdir(parents=True, exist_ok=True)
    for entry in source.iterdir():
        link = target / entry.name
        if entry.name == "python" or link.is_symlink() or link.exists():
            continue
        link.symlink_to(entry.resolve())
    return target


def use_compiled_pyspark(cache_dir: Path | None = None) -> Path | None:
    """Point SPARK_HOME at a shim made by `make_spark_home` (one per pyspark version, in this
    user's cache directory — not a shared temp directory, where someone else could plant one —
    unless `cache_dir` is given), unless SPARK_HOME is already set: an operator's own Spark
    installation wins. Returns the SPARK_HOME now in use (None: left as it was)."""
    if os.environ.get("SPARK_HOME"):
        return None
    import pyspark
    base = Path(cache_dir) if cache_dir is not None else \
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "raftka"
    home = make_spark_home(base / f"spark-home-{pyspark.__version__}")
    os.environ["SPARK_HOME"] = str(home)
    return home


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m spark_connector.spark_home DIR", file=sys.stderr)
        return 2
    try:
        home = make_spark_home(Path(args[0]))
    except (ValueError, OSError, ImportError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"export SPARK_HOME={home}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
