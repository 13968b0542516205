"""Blocking facade over the trio clients, for scripts and Spark executors.

    from clients.sync import SyncProducer, SyncAdmin
    with SyncProducer("127.0.0.1:9092", {"acks": "all"}) as p:
        fut = p.send("events", b"value", key=b"k")     # SendFuture (Future-like handle)
        p.flush()
        print(fut.result())                            # RecordMetadata
    with SyncAdmin("127.0.0.1:9092") as admin:
        print(admin.list_topics())

Design: each facade object owns ONE trio event loop running in a daemon background thread for
its whole life, and calls cross into it with `trio.from_thread` (thread-safe, so Spark's task
threads may share one object). Not `trio.run` per call, because a producer is not a function
call: its sender task must keep running between calls (linger.ms, retries, in-flight requests),
and the metadata cache and broker connections must outlive each call — a fresh loop per call
would reconnect and re-fetch metadata every time and could not deliver anything after `send`
returned.

The producer facade is in sync_producer.py, the loop thread in loop_thread.py; both are
re-exported here.
"""

from __future__ import annotations

from clients.admin import AdminClient
from clients.loop_thread import LoopThread
from clients.sync_producer import SendFuture, SyncProducer

__all__ = ["LoopThread", "SendFuture", "SyncAdmin", "SyncProducer"]


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
