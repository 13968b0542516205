"""The `disk-full` fault: every broker's log directory on a tmpfs of its own, size-limited, so
one broker's disk can fill up to ENOSPC for real (the kernel refuses the write) and be freed.

A filler file takes every free byte (`fill`), so the broker's next append, segment roll or
index write fails as on a full disk; `free` deletes it. Kafka takes a log directory offline at
its first I/O error and brings it back only on restart, as Raftka does, so the nemesis restarts
the broker once the space is back. Needs root (mount); `check_tmpfs` says why it cannot.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

FILLER = "raftka-disk-filler"
# The campaign's data per broker stays in the low megabytes per round (a few thousand small
# records, three topics); 256 MiB holds a long campaign, and tmpfs uses RAM only for what is
# written (the filler takes the rest while a fault holds).
SIZE_MB = 256


def check_tmpfs() -> str | None:
    """None when this process can mount a size-limited tmpfs, else the reason."""
    if os.geteuid() != 0:
        return "mounting one needs root (run as root)"
    if shutil.which("mount") is None or shutil.which("umount") is None:
        return "mount/umount missing (apt-get install -y mount)"
    probe = tempfile.mkdtemp(prefix="raftka-tmpfs-probe-")
    try:
        done = _run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", probe])
        if done.returncode != 0:
            return f"mount -t tmpfs failed: {done.stderr.strip()}"
        _run(["umount", probe])
        return None
    finally:
        os.rmdir(probe)


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=30)


def mount(path: Path, size_mb: int = SIZE_MB) -> None:
    path.mkdir(parents=True, exist_ok=True)
    done = _run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m,mode=0755", "tmpfs", str(path)])
    if done.returncode != 0:
        raise RuntimeError(f"mount tmpfs on {path}: {done.stderr.strip()}")


def unmount(path: Path, keep_in: Path | None = None) -> None:
    """Unmount; `keep_in`: copy the contents there first (a post-mortem needs the logs)."""
    if not os.path.ismount(path):
        return
    free(path)
    if keep_in is not None:
        shutil.copytree(path, keep_in, dirs_exist_ok=True)
    done = _run(["umount", str(path)])
    if done.returncode != 0:            # a straggler holds it: detach, the kernel frees it later
        _run(["umount", "-l", str(path)])


def fill(path: Path) -> int:
    """Take every free byte of the file system at `path`; returns the bytes taken. Written
    with fallocate and then topped up with writes until ENOSPC, so nothing is left over."""
    filler = path / FILLER
    st = os.statvfs(path)
    taken = 0
    with open(filler, "ab") as f:
        try:
            os.posix_fallocate(f.fileno(), 0, st.f_bavail * st.f_frsize)
        except OSError:
            pass                        # what fallocate could not take, writes take below
        taken = os.fstat(f.fileno()).st_size
        chunk = b"\0" * 4096
        try:
            while True:
                f.seek(0, os.SEEK_END)
                os.write(f.fileno(), chunk)
                taken += len(chunk)
        except OSError:
            pass                        # ENOSPC: full
    return taken


def free(path: Path) -> None:
    try:
        os.unlink(path / FILLER)
    except FileNotFoundError:
        pass


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize
