"""Stray partition logs: directories in the log dir for partitions this broker no longer hosts.

A replica removed while its broker was down (a reassignment finished without it, or its topic was
deleted) never sees the metadata change that would delete its log: once back, the image simply
does not name it. Kafka's brokers find such "stray" logs after catching up with the metadata log
and delete them; so do we, once the broker has caught up (an image older than that could miss a
later record that makes us a replica again — still, a replica that is not in the replica set is in
no ISR, so deleting its copy never loses a committed record).

Deletion is two steps: a rename (atomic, done in the event loop, so a partition assigned to us
meanwhile never shares its directory with a deletion in progress) to `<name>.stray-delete`, then
a recursive delete in a worker thread; a crash in between leaves a `.stray-delete` directory, which
the next start deletes.
"""

from __future__ import annotations

import logging
import os
import shutil

import trio

log = logging.getLogger(__name__)

SUFFIX = ".stray-delete"


def partition_of(name: str) -> tuple[str, int] | None:
    """(topic, partition) for a partition log directory name `<topic>-<partition>`."""
    topic, sep, number = name.rpartition("-")
    if not sep or not topic or not number.isdigit():
        return None
    return topic, int(number)


def stray_directories(names, image, broker_id: int, hosted) -> list[str]:
    """Directory names among `names` that are logs of partitions the image does not place on
    `broker_id` and that are not hosted here, plus leftovers of an interrupted deletion."""
    out = []
    if image.offset < 0:
        return out              # an image that has seen no metadata names no replica: decide nothing
    for name in names:
        if name.endswith(SUFFIX):
            out.append(name)
            continue
        key = partition_of(name)
        if key is None or key in hosted:
            continue
        p = image.partition(*key)
        if p is None or broker_id not in p.replicas:
            out.append(name)
    return out


def _is_partition_log(path: str) -> bool:
    """Holds a segment file (`<20-digit base offset>.log`): a directory that merely has a
    `name-N` shape (someone's `controller-3000` put inside the log dir) is left alone."""
    try:
        return any(e.name.endswith(".log") and e.name[:-4].isdigit() and len(e.name) == 24
                   for e in os.scandir(path))
    except OSError:
        return False


async def delete_stray_logs(log_dir: str, image, broker_id: int, hosted) -> list[str]:
    """Rename, then delete in a thread, every stray log directory; returns their names."""
    try:
        names = [e.name for e in os.scandir(log_dir) if e.is_dir()
                 and (e.name.endswith(SUFFIX) or _is_partition_log(e.path))]
    except OSError as exc:
        log.warning("listing %s: %s", log_dir, exc)
        return []
    strays = stray_directories(names, image, broker_id, hosted)
    doomed = []
    for name in strays:
        path = os.path.join(log_dir, name)
        target = path if name.endswith(SUFFIX) else path + SUFFIX
        try:
            if target != path:
                os.rename(path, target)
            doomed.append(target)
        except OSError as exc:
            log.warning("renaming stray log %s: %s", path, exc)
    for path in doomed:
        log.info("deleting stray log %s (not a replica here)", path)
        await trio.to_thread.run_sync(shutil.rmtree, path, True)
    return strays
