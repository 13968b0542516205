"""The tiny HTTP responder behind every node's `/metrics` and `/health/*` (brokers:
partition_server/metrics.py; controllers: metadata_quorum/health.py). Plain HTTP/1.0 on trio,
one GET per connection, a route table of path → callable returning (status, content type,
body). Read-only and cheap: a scrape must never disturb the node it looks at."""

from __future__ import annotations

import json
import logging
from typing import Callable

import trio

log = logging.getLogger(__name__)

MAX_REQUEST_BYTES = 8192
PROMETHEUS = "text/plain; version=0.0.4; charset=utf-8"
REASONS = {200: "OK", 404: "Not Found", 503: "Service Unavailable"}

Route = Callable[[], "tuple[int, str, bytes]"]


def health_answer(ready: bool, reasons: list[str], **facts) -> tuple[int, str, bytes]:
    """200 with {"ready": true} or 503 with {"ready": false, "reasons": [...]}."""
    body = {"ready": ready, "reasons": reasons, **facts}
    return (200 if ready else 503), "application/json", json.dumps(body).encode() + b"\n"


def live_answer() -> tuple[int, str, bytes]:
    # answering at all proves the event loop runs: the responder is a task on that loop
    return 200, "application/json", b'{"live": true}\n'


async def _answer(routes: dict[str, Route], stream) -> None:
    with trio.move_on_after(5):
        data = b""
        while b"\r\n\r\n" not in data and b"\n\n" not in data and len(data) < MAX_REQUEST_BYTES:
            chunk = await stream.receive_some(4096)
            if not chunk:
                break
            data += chunk
        parts = data.split(b"\r\n", 1)[0].split()
        route = None
        if len(parts) >= 2 and parts[0] == b"GET":
            route = routes.get(parts[1].split(b"?")[0].decode("latin-1"))
        if route is not None:
            status, ctype, body = route()
        else:
            status, ctype = 404, "text/plain"
            body = ("try GET " + " or ".join(sorted(routes)) + "\n").encode()
        head = (f"HTTP/1.0 {status} {REASONS.get(status, '')}\r\nContent-Type: {ctype}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
        try:
            await stream.send_all(head + body)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
    with trio.CancelScope(shield=True):
        await stream.aclose()


async def serve_http(routes: dict[str, Route], listener: str,
                     task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Serve `routes` on `listener` (host:port; port 0 picks one; started with the bound port)."""
    host, _, port = listener.rpartition(":")
    listeners = await trio.open_tcp_listeners(int(port), host=host or "127.0.0.1")
    bound = listeners[0].socket.getsockname()[1]
    log.info("metrics and health on http://%s:%s (%s)", host or "127.0.0.1", bound,
             ", ".join(sorted(routes)))
    task_status.started(bound)

    async def handler(stream):
        try:
            await _answer(routes, stream)
        except Exception:  # noqa: BLE001 - one bad scrape must not take the endpoint down
            log.exception("HTTP request failed")
    await trio.serve_listeners(handler, listeners)
