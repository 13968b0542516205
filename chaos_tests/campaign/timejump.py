"""The time-jump fault class: a node's process clocks — CLOCK_REALTIME and CLOCK_MONOTONIC
both, for every library in it (trio's deadlines, pysyncobj's election and heartbeat timers,
our session and lag tracking) — jump forward at once.

The `clock` class moves only Raftka's own wall-clock reads (common/clock.py's offset file).
Linux never moves a running process's CLOCK_MONOTONIC, but a VM stopped and resumed, or moved
to another host, sees it leap: every deadline that was pending is past at once. libfaketime
(Debian package `libfaketime`) does that to one process: started under its LD_PRELOAD, the
node reads its offset from a file of its own (re-read at most once a second, to keep the cost
of every clock read low), and the nemesis writes a larger offset there. Offsets only grow: a
monotonic clock that went back would be a fault no kernel makes. A restarted node starts at
the offset its file holds, as a VM's processes would after the leap.
"""

from __future__ import annotations

import glob
import os
from pathlib import Path

TIME_FILE = "offset"                # in <cluster data>/faketime/<node>/: not in a broker's log
                                    # dir, which the disk-full class fills up
LIBRARY_GLOBS = ("/usr/lib/*/faketime/libfaketimeMT.so.1", "/usr/lib/faketime/libfaketimeMT.so.1",
                 "/usr/local/lib/faketime/libfaketimeMT.so.1")


def library() -> str | None:
    """libfaketime's multi-threaded variant (our nodes run threads: pysyncobj, syncers)."""
    for pattern in LIBRARY_GLOBS:
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    return None


def check() -> str | None:
    """None if time jumps can be made here, else why not."""
    if library() is None:
        return ("libfaketime is not installed (Debian: apt-get install libfaketime); it moves "
                "a node's monotonic and wall clocks, which nothing else can do to one process")
    return None


def node_dir(data_dir: Path, node: str) -> Path:
    """Where `node`'s offset file lives, under the cluster's data directory."""
    return data_dir / "faketime" / node


def offset_file(node_dir: Path) -> Path:
    return node_dir / TIME_FILE


def node_env(node_dir: Path) -> dict[str, str]:
    """The environment a node starts with to run under libfaketime at its file's offset."""
    lib = library()
    if lib is None:
        raise RuntimeError(check())
    path = offset_file(node_dir)
    if not path.exists():
        write_offset(node_dir, 0.0)
    return {"LD_PRELOAD": lib, "FAKETIME_TIMESTAMP_FILE": str(path),
            "FAKETIME_CACHE_DURATION": "1"}


def read_offset(node_dir: Path) -> float:
    try:
        return float(offset_file(node_dir).read_text().strip() or 0)
    except (OSError, ValueError):
        return 0.0


def write_offset(node_dir: Path, offset_s: float) -> None:
    """libfaketime's relative form ("+12.5": that many seconds ahead of the true time), written
    aside and renamed so the node never reads half a line."""
    node_dir.mkdir(parents=True, exist_ok=True)
    tmp = node_dir / (TIME_FILE + ".tmp")
    tmp.write_text(f"+{offset_s:.3f}\n")
    os.replace(tmp, offset_file(node_dir))


def jump(node_dir: Path, seconds: float) -> float:
    """Move the node's clocks `seconds` forward (> 0); returns its offset from now on."""
    if seconds <= 0:
        raise ValueError("a time jump goes forward only: a monotonic clock never goes back")
    total = read_offset(node_dir) + seconds
    write_offset(node_dir, total)
    return total
