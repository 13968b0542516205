"""Durable directory changes: a file created, renamed or removed survives a power loss only once
its directory is fsynced too."""

from __future__ import annotations

import os


def fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
