"""An fsync-tracking disk for power-loss tests of the Raft journal (quorum/journal.py's `Disk`).

It records what each fsync made durable — a file's bytes by inode, a directory's names by
inode — and `power_loss(directory)` puts the directory back to exactly that: files keep only
their last fsynced bytes (none if never synced), a rename whose directory was not synced since
is undone, a file created since the directory's last sync disappears. The page cache a real
power loss drops is everything else.
"""

from __future__ import annotations

import os
import threading
import time

from metadata_quorum.quorum.journal import Disk


class PowerLossDisk(Disk):
    def __init__(self):
        self.durable: dict[int, bytes] = {}             # inode -> bytes at its last fsync
        self.names: dict[str, dict[str, int]] = {}      # directory -> {name: inode} at its fsync
        self.events: list[tuple] = []                   # ("fsync", path, length) / ("dir", path)
        self._lock = threading.Lock()                   # fsyncs come from the sync thread too

    def fsync(self, fd: int) -> None:
        # read through the descriptor (it may be a duplicate held by the journal's sync thread,
        # of a file since replaced by a rename: its name then no longer leads to it)
        path = os.readlink(f"/proc/self/fd/{fd}").removesuffix(" (deleted)")
        with self._lock:
            size = os.fstat(fd).st_size
            data = os.pread(fd, size, 0) if size else b""
            self.durable[os.fstat(fd).st_ino] = data
            self.events.append(("fsync", path, len(data)))

    def fsync_dir(self, path: str) -> None:
        path = os.path.abspath(path)
        self.names[path] = {name: os.stat(os.path.join(path, name)).st_ino
                            for name in os.listdir(path)}
        self.events.append(("dir", path))

    def fsyncs_of(self, path: str) -> int:
        return sum(1 for e in self.events if e[0] == "fsync" and e[1] == os.path.abspath(path))

    def power_loss(self, directory: str) -> None:
        directory = os.path.abspath(directory)
        synced_names = self.names.get(directory)
        for name in os.listdir(directory):
            path = os.path.join(directory, name)
            inode = os.stat(path).st_ino
            if synced_names is not None:
                if name not in synced_names:
                    os.unlink(path)             # created after the directory's last sync
                    continue
                inode = synced_names[name]      # a later rename over it is undone
            with open(path, "wb") as f:
                f.write(self.durable.get(inode, b""))

    def durable_bytes(self, path: str) -> bytes:
        """What a power loss now would leave of the file at `path` (its inode's last fsync)."""
        with self._lock:
            return self.durable.get(os.stat(path).st_ino, b"")


class SlowDisk(PowerLossDisk):
    """A disk whose fsync takes `delay_s` seconds (a number, or a function returning one) and
    makes durable only what was written when it was called: the strict reading of fsync, so a
    test never credits a sync with writes it raced with."""

    def __init__(self, delay_s):
        super().__init__()
        self.delay_s = delay_s if callable(delay_s) else (lambda: delay_s)

    def fsync(self, fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}").removesuffix(" (deleted)")
        size = os.fstat(fd).st_size
        data = os.pread(fd, size, 0) if size else b""
        inode = os.fstat(fd).st_ino
        time.sleep(self.delay_s())
        with self._lock:
            self.durable[inode] = data
            self.events.append(("fsync", path, len(data)))
