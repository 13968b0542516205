"""Per-log-directory offset checkpoint files, in Kafka's text format:

    0                 <- version
    2                 <- number of entries
    orders 0 1234     <- topic partition offset
    orders 1 99

The broker keeps its high watermarks in `replication-offset-checkpoint`. Without it a restarted
broker starts every high watermark at 0: if it became leader before its followers fetched, a
consumer asking for the latest offset (ListOffsets -1) would be told 0 and re-read a whole
partition, and the high watermark would appear to move backwards. A checkpointed value is never
above what was committed (a replica only ever learns committed high watermarks), so starting
from it is safe; the log clamps it to its end offset.

Writes are atomic (temporary file, fsync, rename, fsync of the directory): a crash leaves the
old or the new file, never a torn one. A file that does not parse is ignored (logged), which only
costs the restart-from-0 behaviour above — never data.
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)

HIGH_WATERMARK_FILE = "replication-offset-checkpoint"
VERSION = 0


def write_checkpoint(path: str, offsets: dict[tuple[str, int], int]) -> None:
    lines = [str(VERSION), str(len(offsets))]
    lines += [f"{topic} {partition} {offset}" for (topic, partition), offset in sorted(offsets.items())]
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def read_checkpoint(path: str) -> dict[tuple[str, int], int]:
    """The offsets in `path`; {} when it is missing or unreadable."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        log.warning("cannot read %s (%s): ignoring it", path, exc)
        return {}
    try:
        return parse_checkpoint(text)
    except ValueError as exc:
        log.warning("ignoring malformed %s: %s", path, exc)
        return {}


def parse_checkpoint(text: str) -> dict[tuple[str, int], int]:
    lines = text.splitlines()
    if len(lines) < 2:
        raise ValueError("missing header")
    if int(lines[0]) != VERSION:
        raise ValueError(f"unknown version {lines[0]!r}")
    count = int(lines[1])
    entries = lines[2:]
    if len(entries) != count:
        raise ValueError(f"expected {count} entries, found {len(entries)}")
    out: dict[tuple[str, int], int] = {}
    for line in entries:
        parts = line.split(" ")
        if len(parts) != 3:
            raise ValueError(f"bad entry {line!r}")
        topic, partition, offset = parts[0], int(parts[1]), int(parts[2])
        if partition < 0 or offset < 0:
            raise ValueError(f"bad entry {line!r}")
        out[(topic, partition)] = offset
    return out
