"""Opening a partition directory after a clean or an unclean shutdown.

Rules (see README.md, "Recovery"):
- leftovers of interrupted operations are settled first: `*.tmp` and `*.cleaned` files are
  deleted (never committed), a `*.log.swap` file is a committed compaction result and replaces
  its segment (whose indexes are deleted and rebuilt);
- after a clean shutdown (`.clean-shutdown` present) every segment is trusted: indexes are
  loaded (rebuilt if missing or structurally wrong) and only the last batch is read;
- after an unclean shutdown the segments from the one holding the recovery point onward are
  re-validated batch by batch (length, magic, CRC, increasing offsets) and cut at the first bad
  batch; segments after a cut one are deleted, so the log stays a prefix of what was appended.
  Segments wholly below the recovery point were fsynced and are trusted; their bytes are CRC
  checked once, when first served (`LogSegment.verified_position`).
"""

from __future__ import annotations

import logging
import os

from partition_server.log.segment import LogSegment, segment_name

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN = ".clean-shutdown"


def finish_interrupted_operations(directory: str, names: list[str] | None = None) -> list[str]:
    """Settle leftovers; returns the directory's names afterwards (`names`: a fresh listing)."""
    if names is None:
        names = os.listdir(directory)
    if not any(n.endswith((".log.swap", ".tmp", ".cleaned", ".deleted")) for n in names):
        return names                 # the usual case: nothing was interrupted
    for name in sorted(names):
        path = os.path.join(directory, name)
        if name.endswith(".log.swap"):
            stem = path[:-len(".log.swap")]
            for ext in (".index", ".timeindex"):
                _unlink(stem + ext)
            os.replace(path, stem + ".log")
            log.warning("%s: completed an interrupted compaction swap", stem)
        elif name.endswith((".tmp", ".cleaned", ".deleted")):
            _unlink(path)
    return os.listdir(directory)


def open_segments(directory: str, index_interval_bytes: int, recovery_point: int,
                  clean: bool, files=None, names: list[str] | None = None) -> list[LogSegment]:
    """`names`: the directory's listing after `finish_interrupted_operations`."""
    if names is None:
        names = finish_interrupted_operations(directory)
    bases = sorted(int(n[:-4]) for n in names if n.endswith(".log") and n[:-4].isdigit())
    segments: list[LogSegment] = []
    for i, base in enumerate(bases):
        seg = LogSegment(directory, base, index_interval_bytes, files)
        if segments and seg.base_offset < segments[-1].next_offset:
            # an earlier segment was cut short: everything after it is no longer a prefix
            seg.close()
            _delete_segment_files(directory, base)
            continue
        holds_recovery_point = i + 1 >= len(bases) or bases[i + 1] > recovery_point
        if clean or not holds_recovery_point:
            seg.load_trusted()
        elif seg.recover():
            # cut: later segments cannot follow a hole; drop them
            for later in bases[i + 1:]:
                _delete_segment_files(directory, later)
            segments.append(seg)
            break
        segments.append(seg)
    return segments


def _delete_segment_files(directory: str, base: int) -> None:
    stem = os.path.join(directory, segment_name(base))
    log.warning("%s: deleting a segment that follows a truncated one", stem)
    for ext in (".log", ".index", ".timeindex", ".txnindex"):
        _unlink(stem + ext)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
