"""A server's data directories are its own for its whole life: an exclusive flock on
`<dir>/.lock`, as Kafka's LogManager and KafkaRaftManager take. Two brokers on one log directory
would write the same segment files (and the second would read and remove the first's
clean-shutdown record); two controllers on one metadata directory the same Raft journal. The
kernel drops the lock when the process ends, however it ends, so a lock held proves a live
holder — which the controller relies on to let a restarted broker register at once
(metadata_quorum/controller/cluster_control.py)."""

from __future__ import annotations

import fcntl
import os

LOCK_FILE = ".lock"


_held: list[int] = []          # this process's lock descriptors


def _drop_in_child() -> None:
    """A forked child (the controller's snapshot writer) shares the locks' open file
    descriptions: closing its copies keeps a child that outlives its parent from holding the
    directory against the parent's successor. (An unlock here would release the parent's too.)"""
    for fd in _held:
        try:
            os.close(fd)
        except OSError:
            pass
    _held.clear()


os.register_at_fork(after_in_child=_drop_in_child)


class DirectoryInUse(Exception):
    """Another live process holds the directory's lock."""


def lock_dirs(paths, holder: str) -> list[int]:
    """Lock every directory of `paths` (created if missing) for the life of the process; returns
    the descriptors, to be kept open. DirectoryInUse names the first one held elsewhere (and
    releases those taken). A directory that cannot be opened at all is skipped: the server then
    reports it as it would without the lock (a broker takes that log directory offline)."""
    fds: list[int] = []
    for path in paths:
        try:
            os.makedirs(path, exist_ok=True)
            fd = os.open(os.path.join(path, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            for held in fds:
                os.close(held)
            raise DirectoryInUse(f"Failed to acquire lock on file {LOCK_FILE} in "
                                 f"{os.path.abspath(path)}. A {holder} in another process is "
                                 "using this directory.") from None
        except OSError:
            os.close(fd)
            continue
        fds.append(fd)
    _held.extend(fds)
    return fds


def release(fds: list[int]) -> None:
    """Give locks back before the process ends (tests; a server keeps its own to the end)."""
    for fd in fds:
        if fd in _held:
            _held.remove(fd)
        os.close(fd)
