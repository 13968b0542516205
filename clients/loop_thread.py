"""One trio event loop in a daemon background thread, for the blocking client facades
(`SyncProducer`, `SyncConsumer`, `SyncAdmin`).

Each facade object owns ONE such loop for its whole life, and calls cross into it with
`trio.from_thread` (thread-safe, so Spark's task threads may share one object). Not `trio.run`
per call, because a producer is not a function call: its sender task must keep running between
calls (linger.ms, retries, in-flight requests), and the metadata cache and broker connections
must outlive each call — a fresh loop per call would reconnect and re-fetch metadata every time
and could not deliver anything after `send` returned. A consumer's heartbeats likewise keep
flowing between `poll` calls.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

import trio


class LoopThread:
    """A trio loop in a background thread; `run(async_fn, *args)` from any other thread."""

    def __init__(self, name: str = "raftka-client"):
        self._token: trio.lowlevel.TrioToken | None = None
        self._ready = threading.Event()
        self._stop: trio.Event | None = None
        self.nursery: trio.Nursery | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error

    def _main(self) -> None:
        async def main():
            self._token = trio.lowlevel.current_trio_token()
            self._stop = trio.Event()
            async with trio.open_nursery() as nursery:
                self.nursery = nursery
                self._ready.set()
                await self._stop.wait()
                nursery.cancel_scope.cancel()
        try:
            trio.run(main)
        except BaseException as exc:  # noqa: BLE001 - surfaced to the creating thread
            self._error = exc
            self._ready.set()

    @property
    def token(self) -> trio.lowlevel.TrioToken:
        return self._token

    @property
    def ident(self) -> int | None:
        """The loop thread's `threading.get_ident()`."""
        return self._thread.ident

    def run(self, async_fn: Callable, *args) -> Any:
        if threading.current_thread() is self._thread:
            raise RuntimeError("blocking call from the client's own loop thread (a callback?)")
        return trio.from_thread.run(async_fn, *args, trio_token=self._token)

    def run_sync_soon(self, fn: Callable, *args) -> None:
        self._token.run_sync_soon(fn, *args)

    def close(self) -> None:
        if self._thread.is_alive() and self._stop is not None:
            try:
                trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
            except trio.RunFinishedError:
                pass
            self._thread.join(10)
