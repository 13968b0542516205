"""Per-API request counts, errors by code and total-time histograms (Kafka's RequestsPerSec,
ErrorsPerSec and TotalTimeMs, as Prometheus counters), measured at the dispatch edge of a
listener: `RequestStats.wrap(dispatch)` is what `common.network.serve_listener` calls.

Cost per request: a perf_counter pair, a bisect over the bucket bounds and three in-place
increments of lists/dicts created once per API (no allocation per request). The time is the
handler's (authorization, quotas, purgatory waits included), not socket queueing or sending.
Errors are the response's top-level `error_code` (per-partition codes of Produce/Fetch are not
walked: that would cost per partition), and UNKNOWN_SERVER_ERROR for a handler that raised.
`RAFTKA_REQUEST_METRICS=0` in the environment turns the measuring off (bench/README.md)."""

from __future__ import annotations

import bisect
import os
import time

import trio

from common.prometheus import labels
from wire.errors import ErrorCode
from wire.messages.api_keys import ApiKey

BUCKETS_MS = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000)
UNKNOWN_SERVER_ERROR = int(ErrorCode.UNKNOWN_SERVER_ERROR)


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


class RequestStats:
    def __init__(self):
        # api key → [count, errors{code: n}, bucket counts (len(BUCKETS_MS)+1), sum in seconds]
        self.apis: dict[int, list] = {}

    def record(self, api_key: int, seconds: float, error_code: int) -> None:
        entry = self.apis.get(api_key)
        if entry is None:
            entry = self.apis[api_key] = [0, {}, [0] * (len(BUCKETS_MS) + 1), 0.0]
        entry[0] += 1
        entry[2][bisect.bisect_left(BUCKETS_MS, seconds * 1000)] += 1
        entry[3] += seconds
        if error_code:
            errors = entry[1]
            errors[error_code] = errors.get(error_code, 0) + 1

    def wrap(self, dispatch):
        """`dispatch(ctx, request)`, timed and counted."""
        clock, record = time.perf_counter, self.record

        async def timed(ctx, request):
            started = clock()
            try:
                response = await dispatch(ctx, request)
            except trio.Cancelled:
                raise
            except BaseException:
                record(request.api_key, clock() - started, UNKNOWN_SERVER_ERROR)
                raise
            record(request.api_key, clock() - started, getattr(response, "error_code", 0) or 0)
            return response
        return timed

    def families(self) -> list[tuple[str, str, str, list]]:
        apis = sorted((_api_name(k), v) for k, v in self.apis.items())
        hist = []
        for name, (count, _, buckets, total) in apis:
            running = 0
            for bound, n in zip(BUCKETS_MS + ("+Inf",), buckets):
                running += n
                hist.append((labels(api=name, le=bound), running))
        return [
            ("raftka_requests_total", "counter", "Requests answered, per API (RequestsPerSec).",
             [(labels(api=n), v[0]) for n, v in apis]),
            ("raftka_request_errors_total", "counter",
             "Requests answered with a top-level error code (or that failed), per API and error.",
             [(labels(api=n, error=_error_name(c)), k) for n, v in apis
              for c, k in sorted(v[1].items())]),
            ("raftka_request_total_time_ms", "histogram",
             "Time from dispatch to answer, per API, in ms (TotalTimeMs, without socket time).",
             _with_sum_count(hist, apis)),
        ]


def _with_sum_count(buckets: list, apis: list) -> list:
    # Prometheus histograms: name_bucket{le}, name_sum, name_count; the family renderer adds the
    # name, so the suffix rides in front of the labels
    out = [("_bucket" + lbl, v) for lbl, v in buckets]
    out += [("_sum" + labels(api=n), f"{v[3] * 1000:.3f}") for n, v in apis]
    out += [("_count" + labels(api=n), v[0]) for n, v in apis]
    return out
