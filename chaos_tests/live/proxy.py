"""A TCP fault proxy for links between processes on 127.0.0.1 (trio).

Each `Link` listens on its own port and forwards every connection to one target. Its mode says
what happens to the bytes, per direction (`to_target` = client → target, `from_target` back):

    forward     bytes pass (after `delay_ms`, if set: latency that keeps order)
    blackhole   bytes in that direction vanish; the connection stays open (a silent partition:
                the peer learns nothing until its own timeouts fire). New connections are
                accepted but never reach the target.
    cut         every open connection is closed and new ones are closed at once (both ways: a
                partition that resets instead of hanging)
    heal()      back to forward without delay; connections that were blackholed are closed, as
                TCP would eventually give up on them

`ProxyThread` runs a set of links on a background thread for synchronous tests; every control
call (`cut`, `blackhole`, `delay`, `heal`) takes effect before it returns.
"""

from __future__ import annotations

import dataclasses
import threading

import trio

FORWARD, BLACKHOLE, CUT = "forward", "blackhole", "cut"
BOTH, TO_TARGET, FROM_TARGET = "both", "to_target", "from_target"


@dataclasses.dataclass
class Link:
    name: str
    target_host: str
    target_port: int
    port: int = 0                     # assigned when listening
    delay_ms: int = 0
    modes: dict = dataclasses.field(default_factory=lambda: {TO_TARGET: FORWARD,
                                                              FROM_TARGET: FORWARD})
    connections: set = dataclasses.field(default_factory=set)   # cancel scopes
    forwarded_bytes: int = 0
    dropped_bytes: int = 0

    @property
    def is_cut(self) -> bool:
        return CUT in self.modes.values()

    def set_mode(self, mode: str, direction: str = BOTH) -> None:
        for d in (TO_TARGET, FROM_TARGET) if direction == BOTH else (direction,):
            self.modes[d] = mode
        if mode == CUT:
            self.close_all()

    def close_all(self) -> None:
        for scope in list(self.connections):
            scope.cancel()

    def heal(self) -> None:
        blackholed = BLACKHOLE in self.modes.values()
        self.modes = {TO_TARGET: FORWARD, FROM_TARGET: FORWARD}
        self.delay_ms = 0
        if blackholed:
            self.close_all()


class ProxyGroup:
    """Links served from one trio nursery."""

    def __init__(self):
        self.links: dict[str, Link] = {}

    def add(self, name: str, target_host: str, target_port: int) -> Link:
        link = Link(name, target_host, target_port)
        self.links[name] = link
        return link

    async def serve(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            for link in self.links.values():
                listeners = await trio.open_tcp_listeners(link.port, host="127.0.0.1")
                link.port = listeners[0].socket.getsockname()[1]
                nursery.start_soon(trio.serve_listeners, self._handler(link), listeners)
            task_status.started()

    def _handler(self, link: Link):
        async def handle(client: trio.SocketStream) -> None:
            with trio.CancelScope() as scope:
                link.connections.add(scope)
                try:
                    await self._relay(link, client)
                finally:
                    link.connections.discard(scope)
            with trio.CancelScope(shield=True):
                await client.aclose()
        return handle

    async def _relay(self, link: Link, client: trio.SocketStream) -> None:
        if link.is_cut:
            return
        if link.modes[TO_TARGET] == BLACKHOLE:
            # a silent partition: the target never hears of this connection
            while await client.receive_some(65536):
                link.dropped_bytes += 1
            return
        try:
            upstream = await trio.open_tcp_stream(link.target_host, link.target_port)
        except OSError:
            return
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._pump, link, client, upstream, TO_TARGET, nursery)
                nursery.start_soon(self._pump, link, upstream, client, FROM_TARGET, nursery)
        finally:
            with trio.CancelScope(shield=True):
                await upstream.aclose()

    async def _pump(self, link: Link, src, dst, direction: str, nursery) -> None:
        try:
            while True:
                data = await src.receive_some(65536)
                if not data:
                    break
                if link.modes[direction] == BLACKHOLE:
                    link.dropped_bytes += len(data)
                    continue
                if link.delay_ms:
                    await trio.sleep(link.delay_ms / 1000)
                await dst.send_all(data)
                link.forwarded_bytes += len(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        nursery.cancel_scope.cancel()          # one side ended: the connection ends


class ProxyThread:
    """A `ProxyGroup` on a background thread, controlled from synchronous code."""

    def __init__(self):
        self.group = ProxyGroup()
        self._token = None
        self._thread = None
        self._stop = None
        self._started = threading.Event()
        self._error: BaseException | None = None

    def add(self, name: str, target_host: str, target_port: int) -> Link:
        if self._thread is not None:
            raise RuntimeError("add links before start()")
        return self.group.add(name, target_host, target_port)

    def port(self, name: str) -> int:
        return self.group.links[name].port

    def start(self) -> "ProxyThread":
        self._thread = threading.Thread(target=self._run, name="fault-proxy", daemon=True)
        self._thread.start()
        if not self._started.wait(10):
            raise RuntimeError("proxy did not start")
        if self._error is not None:
            raise RuntimeError(f"proxy failed to start: {self._error}")
        return self

    def _run(self) -> None:
        async def main():
            self._token = trio.lowlevel.current_trio_token()
            self._stop = trio.Event()
            async with trio.open_nursery() as nursery:
                await nursery.start(self.group.serve)
                self._started.set()
                await self._stop.wait()
                nursery.cancel_scope.cancel()
        try:
            trio.run(main)
        except BaseException as exc:          # noqa: BLE001 - reported by start()
            self._error = exc
            self._started.set()

    def _call(self, fn, *args) -> None:
        trio.from_thread.run_sync(fn, *args, trio_token=self._token)

    # -- control ----------------------------------------------------------------------------------

    def cut(self, *names: str) -> None:
        for n in names:
            self._call(self.group.links[n].set_mode, CUT, BOTH)

    def blackhole(self, *names: str, direction: str = BOTH) -> None:
        for n in names:
            self._call(self.group.links[n].set_mode, BLACKHOLE, direction)

    def delay(self, name: str, delay_ms: int) -> None:
        def set_delay():
            self.group.links[name].delay_ms = delay_ms
        self._call(set_delay)

    def heal(self, *names: str) -> None:
        for n in names or tuple(self.group.links):
            self._call(self.group.links[n].heal)

    def stop(self) -> None:
        if self._thread is not None and self._token is not None:
            try:
                self._call(self._stop.set)
            except trio.RunFinishedError:
                pass
            self._thread.join(10)
        self._thread = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
