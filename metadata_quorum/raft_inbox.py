"""Calls from pysyncobj's thread onto the controller's trio loop, in order, one wake-up a batch.

`trio`'s `run_sync_soon` writes to a wake-up socket on every call. The Raft thread made one per
committed entry and one per proposal's callback, each a system call that gives up the GIL to a
busy trio thread and waits to get it back; with many commands in flight that was a visible share
of both threads' time (py-spy, issue 20 item 4). Here calls queue up and one `run_sync_soon`
drains whatever gathered by the time trio runs it.
"""

from __future__ import annotations

import collections
import logging
import threading
from typing import Callable

import trio

log = logging.getLogger(__name__)


class RaftInbox:
    def __init__(self, token):
        self._token = token
        self._calls: collections.deque = collections.deque()
        self._lock = threading.Lock()
        self._scheduled = False

    def call(self, fn: Callable, *args) -> None:
        """Run `fn(*args)` on the trio loop, after every call made before this one."""
        with self._lock:
            self._calls.append((fn, args))
            if self._scheduled:
                return
            self._scheduled = True
        try:
            self._token.run_sync_soon(self._drain)
        except trio.RunFinishedError:
            pass

    def _drain(self) -> None:
        while True:
            with self._lock:
                if not self._calls:
                    self._scheduled = False
                    return
                batch = list(self._calls)
                self._calls.clear()
            for fn, args in batch:
                try:
                    fn(*args)
                except Exception:  # noqa: BLE001 - one failed call must not strand the rest
                    log.exception("a Raft callback failed on the controller's loop")
