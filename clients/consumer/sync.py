"""Blocking facade over the trio `Consumer`, in the style of `clients/producer/sync.py`.

    from clients.consumer.sync import SyncConsumer
    with SyncConsumer("127.0.0.1:9092", {"group.id": "g", "auto.offset.reset": "earliest"}) as c:
        c.subscribe(["orders"])
        for record in c.poll(1000):
            ...
        c.commit()

The consumer lives on one trio loop in a background thread (`LoopThread`) for its whole life, so
heartbeats keep flowing between `poll` calls and connections and metadata are reused. Every
public method crosses into that loop and blocks until it is done. Rebalance listeners run on the
loop thread (inside `poll`); they may be plain functions, and must not call back into this
facade (that would wait on the thread they are running on). `group.protocol=consumer`
(KIP-848) works the same way: its heartbeats run on that loop, its reconciliation inside `poll`.
"""

from __future__ import annotations

from clients.consumer import Consumer
from clients.loop_thread import LoopThread


class SyncConsumer:
    _PLAIN = {"subscribe", "assign", "assignment", "subscription", "seek", "seek_to_beginning",
              "seek_to_end", "pause", "resume", "paused"}
    _ASYNC = {"poll", "commit", "committed", "position", "offsets_for_times", "beginning_offsets",
              "end_offsets", "unsubscribe"}

    def __init__(self, bootstrap: str | None = None, config: dict | None = None, **kwargs):
        self._consumer = Consumer(bootstrap, config, **kwargs)
        self._loop = LoopThread("raftka-consumer")
        self._closed = False
        try:
            self._loop.run(self._consumer.start, self._loop.nursery)
        except BaseException:
            self._loop.close()
            raise

    @property
    def config(self) -> dict:
        return self._consumer.config

    def __getattr__(self, name: str):
        if name in self._ASYNC:
            attr = getattr(self._consumer, name)

            def call(*args, **kwargs):
                async def run():
                    return await attr(*args, **kwargs)
                return self._loop.run(run)
        elif name in self._PLAIN:
            attr = getattr(self._consumer, name)

            def call(*args, **kwargs):
                # consumer state belongs to the loop thread: change it there
                async def run():
                    return attr(*args, **kwargs)
                return self._loop.run(run)
        else:
            raise AttributeError(name)
        call.__name__ = name
        call.__doc__ = attr.__doc__
        return call

    def close(self, commit: bool = True) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._loop.run(self._consumer.close, commit)
        finally:
            self._loop.close()

    def __enter__(self) -> "SyncConsumer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __iter__(self):
        """Records forever (poll in a loop), like kafka-python's consumer iterator."""
        while not self._closed:
            yield from self.poll(1000)
