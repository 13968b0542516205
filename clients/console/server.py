"""The console's HTTP side: stdlib `http.server` (a thread per request) in front of one trio
loop that owns the admin client and the throughput sampler.

Why stdlib and no web framework: seven pages and their JSON, GET only — a framework would add a
dependency (and an attack surface) for routing we write in a dict. Why a separate loop thread:
the admin client is async (trio); `LoopThread` keeps its connections and metadata between
requests, the way `SyncAdmin` does.

Read-only by construction: only GET and HEAD are answered; every other method gets 405. There
is no endpoint that sends a mutating request to the cluster.
"""

from __future__ import annotations

import json
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

from clients.admin import AdminClient
from clients.console import data, traffic, views
from clients.loop_thread import LoopThread

STATIC_DIR = Path(__file__).parent / "static"
STATIC = {"console.css": "text/css", "errors.js": "text/javascript",
          "charts.js": "text/javascript"}
# our own files only; no inline script or style (see views.py), no framing, no third party
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
                               "img-src 'self'; connect-src 'self'; form-action 'self'; "
                               "base-uri 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


class Console:
    """The client side: one admin client and the sampler on a trio loop in a thread."""

    def __init__(self, props: dict, interval_s: float = 2.0):
        self.props = props
        self.interval_s = interval_s
        self.history = traffic.History()
        self.admin = AdminClient(config=props)        # a bad property fails here, loop-less
        self._loop = LoopThread("raftka-console")
        try:
            self._loop.run(self.admin.start)
            self._loop.run(self.admin.list_topics)      # fail fast on a wrong address
        except BaseException:
            self.close()
            raise
        self._loop.run_sync_soon(self._loop.nursery.start_soon, traffic.run_sampler,
                                 self.admin, self.history, interval_s)

    def call(self, async_fn, *args):
        return self._loop.run(async_fn, *args)

    def close(self) -> None:
        try:
            self._loop.run(self.admin.aclose)
        finally:
            self._loop.close()

    # -- what each route shows ---------------------------------------------------------------

    def api(self, name: str, params: dict):
        """The dict behind page `name` (the JSON API returns it as is)."""
        if name == "overview":
            return self.call(data.overview, self.admin)
        if name == "topics":
            return self.call(data.topics, self.admin)
        if name == "groups":
            return self.call(data.groups, self.admin, self.props)
        if name == "traffic":
            return self.history.series()
        if name == "messages":
            return self.call(data.browse, self.admin, self.props,
                             data.browse_query(params))
        if name == "reassignments":
            return self.call(data.reassign_page, self.admin)
        raise ValueError(f"no API {name!r}")

    def page(self, name: str, params: dict) -> str:
        if name == "charts":
            return views.charts_page(self.interval_s)
        if name == "messages":
            return self._messages_page(params)
        render = {"overview": views.overview_page, "topics": views.topics_page,
                  "groups": views.groups_page, "reassignments": views.reassignments_page}[name]
        return render(self.api(name, params))

    def _messages_page(self, params: dict) -> str:
        if not params.get("topic"):
            return views.messages_page(params, None)
        try:
            q = data.browse_query(params)
        except data.BadRequest as exc:
            return views.messages_page(params, None, str(exc))
        try:
            return views.messages_page(q, self.call(data.browse, self.admin, self.props, q))
        except data.FAILURES as exc:
            return views.messages_page(q, None, data.failure(exc)["error"])


PAGES = {"/": "overview", "/topics": "topics", "/groups": "groups", "/charts": "charts",
         "/messages": "messages", "/reassignments": "reassignments"}
APIS = {"overview", "topics", "groups", "traffic", "messages", "reassignments"}


class Handler(BaseHTTPRequestHandler):
    console: Console          # set on the subclass `serve` makes
    server_version = "raftka-console"
    sys_version = ""

    def log_message(self, fmt, *args) -> None:      # quiet: one line per request is noise
        pass

    def do_HEAD(self) -> None:
        self.do_GET(head=True)

    def do_GET(self, head: bool = False) -> None:
        url = urlsplit(self.path)
        params = dict(parse_qsl(url.query, keep_blank_values=True))
        try:
            status, ctype, body = self._route(url.path, params)
        except data.BadRequest as exc:
            status, ctype, body = 400, "application/json", _json({"error": str(exc)})
        except data.FAILURES as exc:
            status, ctype, body = 502, "application/json", _json(data.failure(exc))
        self._send(status, ctype, body, head)

    def _route(self, path: str, params: dict) -> tuple[int, str, bytes]:
        if path.startswith("/api/"):
            if path[5:] not in APIS:
                return 404, "application/json", _json({"error": f"no API {path!r}"})
            return 200, "application/json", _json(self.console.api(path[5:], params))
        if path.startswith("/static/") and path[8:] in STATIC:
            return 200, STATIC[path[8:]], (STATIC_DIR / path[8:]).read_bytes()
        name = PAGES.get(path)
        if name is None:
            return 404, "text/html", views.error_page(404, f"no page {path!r}").encode()
        try:
            return 200, "text/html", self.console.page(name, params).encode()
        except data.FAILURES as exc:
            return 502, "text/html", views.error_page(502, data.failure(exc)["error"]).encode()

    def _send(self, status: int, ctype: str, body: bytes, head: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Type", f"{ctype}; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        for k, v in SECURITY_HEADERS.items():
            self.send_header(k, v)
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _refuse(self) -> None:
        """Read-only: no method but GET and HEAD."""
        body = _json({"error": "the console is read-only: only GET and HEAD"})
        self.send_response(HTTPStatus.METHOD_NOT_ALLOWED)
        self.send_header("Allow", "GET, HEAD")
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_TRACE = do_CONNECT = _refuse


def _json(obj) -> bytes:
    return json.dumps(obj, default=str).encode()


def serve(console: Console, host: str, port: int) -> ThreadingHTTPServer:
    """A started server (its thread runs `serve_forever`); `server.server_address` has the
    port when 0 was asked for."""
    handler = type("ConsoleHandler", (Handler,), {"console": console})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="console-http", daemon=True).start()
    return server
