"""Per-API request counts, errors by code and latency histograms (Kafka's RequestsPerSec,
ErrorsPerSec, TotalTimeMs, RequestQueueTimeMs, LocalTimeMs, RemoteTimeMs, ResponseSendTimeMs, as
Prometheus counters and histograms), and connection counts, measured at the socket edge:
`RequestStats.wrap(dispatch)` is what `common.network.serve_listener` calls, and the wrapped
dispatch carries the stats (`request_stats`) for the edge to record what only it sees.

The split, in this server's terms (each a histogram per API, in ms):
- queue: from the socket read that brought the request's last bytes to its dispatch. A
  connection is served in order (common/network.py), so this is the wait behind the requests
  before it on the same connection and a quota mute (Kafka: the request channel's queue).
  Measured from the latest read before the request is taken, so a request that arrived with
  earlier reads is under-counted, never over-counted;
- remote: time parked waiting on others: the purgatory (acks=all replication, Fetch long-poll
  and min.bytes), a controller's Raft commit. Waits call `add_remote_time`, which adds to the
  running request's cell (a context variable set by the wrapper; nothing outside a request);
- local: dispatch to answer minus remote (decoding is before dispatch, encoding after);
- send: writing the answer to the socket (the answers of pipelined Produce requests that leave
  in one write each get that write's time);
- total: dispatch to answer (local + remote), as before; queue and send are not in it.

Cost per request: a perf_counter pair, a context variable set/reset, five bisects over the
bucket bounds and in-place increments of lists created once per API. Errors are the response's
top-level `error_code`, each partition's code of a Produce answer, and UNKNOWN_SERVER_ERROR for
a handler that raised (per-partition codes of Fetch answers are not walked: a follower's names
thousands of partitions). `RAFTKA_REQUEST_METRICS=0` in
the environment turns the measuring off, connection counts included (bench/README.md)."""

from __future__ import annotations

from bisect import bisect_left
import contextvars
import os
import time

import trio

from common.prometheus import labels
from wire.errors import ErrorCode
from wire.messages.api_keys import ApiKey

BUCKETS_MS = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000)
UNKNOWN_SERVER_ERROR = int(ErrorCode.UNKNOWN_SERVER_ERROR)
PRODUCE = int(ApiKey.PRODUCE)
# histogram name suffixes, in the order of _Api's histogram slots
PARTS = ("total", "queue", "local", "remote", "send")
_HELP = {
    "total": "Time from dispatch to answer (local + remote; TotalTimeMs without queue and send)",
    "queue": "Time a request waited on its connection before dispatch (RequestQueueTimeMs)",
    "local": "Time the handler worked on a request, waits excluded (LocalTimeMs)",
    "remote": "Time a request waited in purgatory or for a Raft commit (RemoteTimeMs)",
    "send": "Time writing the answer to the socket (ResponseSendTimeMs)",
}

_remote: contextvars.ContextVar[list | None] = \
    contextvars.ContextVar("raftka_remote_time", default=None)


def add_remote_time(seconds: float) -> None:
    """A wait on others (purgatory, Raft commit) of the request running in this task."""
    cell = _remote.get()
    if cell is not None:
        cell[0] += seconds


def enabled_by_env() -> bool:
    return os.environ.get("RAFTKA_REQUEST_METRICS", "1") != "0"


def _api_name(key: int) -> str:
    try:
        return "".join(w.capitalize() for w in ApiKey(key).name.split("_"))
    except ValueError:
        return str(key)


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


def _new_histogram() -> list:
    return [0] * (len(BUCKETS_MS) + 1) + [0.0]       # bucket counts, then the sum in ms


def _observe(hist: list, ms: float) -> None:
    hist[bisect_left(BUCKETS_MS, ms)] += 1
    hist[-1] += ms


class _Api:
    """One API's counts and histograms (bucket counts, then the sum in ms; see PARTS)."""
    __slots__ = ("count", "errors", "total", "queue", "local", "remote", "send")

    def __init__(self):
        self.count = 0
        self.errors: dict[int, int] = {}
        self.total, self.queue, self.local, self.remote, self.send = (
            _new_histogram() for _ in PARTS)


class RequestStats:
    def __init__(self):
        self.apis: dict[int, _Api] = {}
        # listener name → [connections accepted, connections closed]
        self.connections: dict[str, list[int]] = {}

    def _api(self, api_key: int) -> _Api:
        entry = self.apis.get(api_key)
        if entry is None:
            entry = self.apis[api_key] = _Api()
        return entry

    def record(self, api_key: int, seconds: float, error_code: int, queue_s: float = 0.0,
               remote_s: float = 0.0) -> None:
        # inlined (no helper calls, attribute slots): this runs once per request
        entry = self.apis.get(api_key) or self._api(api_key)
        entry.count += 1
        ms, queue_ms, remote_ms = seconds * 1000, queue_s * 1000, remote_s * 1000
        local_ms = ms - remote_ms if ms > remote_ms else 0.0
        h = entry.total
        h[bisect_left(BUCKETS_MS, ms)] += 1
        h[-1] += ms
        h = entry.queue
        h[bisect_left(BUCKETS_MS, queue_ms)] += 1
        h[-1] += queue_ms
        h = entry.local
        h[bisect_left(BUCKETS_MS, local_ms)] += 1
        h[-1] += local_ms
        h = entry.remote
        h[0 if remote_ms <= 1 else bisect_left(BUCKETS_MS, remote_ms)] += 1
        h[-1] += remote_ms
        if error_code:
            errors = entry.errors
            errors[error_code] = errors.get(error_code, 0) + 1

    def produce_partition_errors(self, api_key: int, response) -> None:
        """Produce answers carry their errors per partition (NOT_LEADER_OR_FOLLOWER,
        NOT_ENOUGH_REPLICAS, …): each counts, as in Kafka's errorCounts. A Produce names few
        partitions (librdkafka: often one), so the walk is cheap; Fetch answers, which name
        thousands for a follower, are not walked."""
        errors = None
        for topic in getattr(response, "responses", None) or ():   # a list of wire chunks: none
            for p in topic.partition_responses:
                if p.error_code:
                    if errors is None:
                        errors = self.apis[api_key].errors
                    errors[p.error_code] = errors.get(p.error_code, 0) + 1

    def record_send(self, api_key: int, seconds: float) -> None:
        _observe(self._api(api_key).send, seconds * 1000)

    def connection_opened(self, listener: str) -> None:
        counts = self.connections.get(listener)
        if counts is None:
            counts = self.connections[listener] = [0, 0]
        counts[0] += 1

    def connection_closed(self, listener: str) -> None:
        self.connections[listener][1] += 1

    def wrap(self, dispatch):
        """`dispatch(ctx, request)`, timed and counted; the result carries these stats."""
        clock, record, remote = time.perf_counter, self.record, _remote
        partition_errors = self.produce_partition_errors

        async def timed(ctx, request):
            started = clock()
            queued = getattr(request, "received_at", 0.0)
            # a fresh cell per request, left set afterwards (no reset: saves a try/finally per
            # request): the task is a connection's (or one pipelined Produce's), whose next
            # request sets its own, and nothing else waits in purgatory from it
            cell = [0.0]
            remote.set(cell)
            try:
                response = await dispatch(ctx, request)
            except trio.Cancelled:
                raise
            except BaseException:
                record(request.api_key, clock() - started, UNKNOWN_SERVER_ERROR,
                       started - queued if queued else 0.0, cell[0])
                raise
            record(request.api_key, clock() - started, getattr(response, "error_code", 0) or 0,
                   started - queued if queued else 0.0, cell[0])
            if request.api_key == PRODUCE:
                partition_errors(PRODUCE, response)
            return response
        timed.request_stats = self
        return timed

    def families(self) -> list[tuple[str, str, str, list]]:
        apis = sorted((_api_name(k), v) for k, v in self.apis.items())
        fams = [
            ("raftka_requests_total", "counter", "Requests answered, per API (RequestsPerSec).",
             [(labels(api=n), v.count) for n, v in apis]),
            ("raftka_request_errors_total", "counter",
             "Requests answered with a top-level error code (or that failed), per API and error.",
             [(labels(api=n, error=_error_name(c)), k) for n, v in apis
              for c, k in sorted(v.errors.items())]),
        ]
        fams += [(f"raftka_request_{part}_time_ms", "histogram", _HELP[part] + ", per API, in ms.",
                  histogram_samples([(labels(api=n), getattr(v, part)) for n, v in apis]))
                 for part in PARTS]
        conns = sorted(self.connections.items())
        fams += [
            ("raftka_connections", "gauge", "Open client connections, per listener "
             "(connection-count).", [(labels(listener=n), c[0] - c[1]) for n, c in conns]),
            ("raftka_connections_created_total", "counter", "Connections accepted, per listener "
             "(connection-creation-rate).", [(labels(listener=n), c[0]) for n, c in conns]),
            ("raftka_connections_closed_total", "counter", "Connections closed, per listener "
             "(connection-close-rate).", [(labels(listener=n), c[1]) for n, c in conns]),
        ]
        return fams


def histogram_samples(series: list) -> list:
    """[(labels, histogram list)] → Prometheus samples: name_bucket{…,le}, name_sum, name_count
    (the family renderer adds the name, so the suffix rides in front of the labels). `labels`
    is "" or "{…}"."""
    out, sums, counts = [], [], []
    for lbl, hist in series:
        head = lbl[:-1] + "," if lbl else "{"
        running = 0
        for bound, n in zip(BUCKETS_MS + ("+Inf",), hist[:-1]):
            running += n
            out.append((f'_bucket{head}le="{bound}"}}', running))
        sums.append((f"_sum{lbl}", f"{hist[-1]:.3f}"))
        counts.append((f"_count{lbl}", running))
    return out + sums + counts


class Histogram:
    """One latency histogram without labels (e.g. a controller's Raft commit time), in ms."""

    def __init__(self):
        self.hist = _new_histogram()

    def observe_seconds(self, seconds: float) -> None:
        _observe(self.hist, seconds * 1000)

    def samples(self) -> list:
        return histogram_samples([("", self.hist)])
