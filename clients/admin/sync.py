"""`SyncAdmin`: every `AdminClient` coroutine method as a blocking call, on one trio loop in a
background thread (`clients.loop_thread.LoopThread`, whose docstring says why a long-lived loop
rather than `trio.run` per call)."""

from __future__ import annotations

from clients.admin.admin import AdminClient
from clients.loop_thread import LoopThread

__all__ = ["SyncAdmin"]


class SyncAdmin:
    """Every `AdminClient` coroutine method, as a blocking call."""

    def __init__(self, bootstrap: str | None = None, config: dict | None = None, **kwargs):
        self._admin = AdminClient(bootstrap, config, **kwargs)
        self._loop = LoopThread("raftka-admin")
        try:
            self._loop.run(self._admin.start)
        except BaseException:
            self._loop.close()
            raise

    def __getattr__(self, name: str):
        attr = getattr(self._admin, name)
        if not callable(attr) or name.startswith("_") or name in ("start", "aclose"):
            return attr

        def call(*args, **kwargs):
            async def run():
                return await attr(*args, **kwargs)
            return self._loop.run(run)
        call.__name__ = name
        call.__doc__ = attr.__doc__
        return call

    def close(self) -> None:
        try:
            self._loop.run(self._admin.aclose)
        finally:
            self._loop.close()

    def __enter__(self) -> "SyncAdmin":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
