"""Client quotas on the broker: DescribeClientQuotas / AlterClientQuotas (KIP-546) and the
enforcement of producer_byte_rate, consumer_byte_rate and request_percentage (KIP-13, KIP-55,
KIP-124, KIP-219). The window math and entity resolution are in partition_server/quotas.py.

DescribeClientQuotas is answered from this broker's metadata image: INVALID_REQUEST for a bad
filter (unknown entity type, an `ip` component, a type named twice, exact match without a name).
AlterClientQuotas goes to the active controller (which validates and writes ClientQuotaRecords);
REQUEST_TIMED_OUT per entry if no controller answers. After a successful change the broker waits
(bounded) until its own image shows it, so the next request here is metered by the new quota.

Enforcement (`enforce`, wrapped around every request by the dispatcher), per (principal, client
id) as Kafka does:
- Produce: the request's size is recorded against producer_byte_rate after it was handled.
- Fetch from consumers (replica_id < 0; followers are never client-throttled): max_bytes is first
  capped at what the quota allows in one full window (Kafka's getMaxValueInQuotaWindow). A client
  already over its quota is answered without records (Kafka's empty throttled fetch) and nothing
  is recorded; otherwise the response's record bytes are recorded against consumer_byte_rate and
  any throttle they earn is applied after it. Deliberate difference: Kafka empties a response
  whenever recording *it* crosses the quota, so a single batch larger than the window allowance
  (fetches return at least one whole batch, KIP-74) could be refused forever; here it is
  delivered once and paid for with the throttle.
- request_percentage: the time the event loop spent running this request's task (trio task steps,
  `RequestTimer`) as a percentage of one thread, capped at one window as in Kafka.
- The response carries throttle_time_ms. KIP-219 clients (Produce v6+, Fetch v8+, others at the
  version where the schema says so) get it at once and then the connection is muted — its next
  request is not read — for that long (`ClientContext.mute_s`, honoured by common/network.py); older
  versions get the answer late instead. acks=0 produce has no answer but is muted the same way.
"""

from __future__ import annotations

import time

import trio

from partition_server.controller_client import ControllerUnavailable
from partition_server.handlers.context import HandlerContext
from partition_server.quotas import (CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE,
                                     QuotaManager, WindowConfig)
from wire.errors import ErrorCode
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import RESPONSES

PRODUCE, FETCH = ApiKey.PRODUCE, ApiKey.FETCH
DESCRIBE_CLIENT_QUOTAS = ApiKey.DESCRIBE_CLIENT_QUOTAS
ALTER_CLIENT_QUOTAS = ApiKey.ALTER_CLIENT_QUOTAS
# the first version whose client throttles itself on throttle_time_ms (KIP-219), per API
# (APIs added after KIP-219, key 43 on, throttle themselves at every version)
KIP_219_VERSIONS = {
    ApiKey.PRODUCE: 6, ApiKey.FETCH: 8, ApiKey.LIST_OFFSETS: 3, ApiKey.METADATA: 6,
    ApiKey.OFFSET_COMMIT: 4, ApiKey.OFFSET_FETCH: 4, ApiKey.FIND_COORDINATOR: 2,
    ApiKey.JOIN_GROUP: 3, ApiKey.HEARTBEAT: 2, ApiKey.LEAVE_GROUP: 2, ApiKey.SYNC_GROUP: 2,
    ApiKey.DESCRIBE_GROUPS: 2, ApiKey.LIST_GROUPS: 2, ApiKey.CREATE_TOPICS: 3,
    ApiKey.DELETE_TOPICS: 2, ApiKey.DELETE_RECORDS: 1, ApiKey.INIT_PRODUCER_ID: 1,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: 1, ApiKey.ADD_PARTITIONS_TO_TXN: 1,
    ApiKey.ADD_OFFSETS_TO_TXN: 1, ApiKey.END_TXN: 1, ApiKey.TXN_OFFSET_COMMIT: 1,
    ApiKey.DESCRIBE_ACLS: 1, ApiKey.CREATE_ACLS: 1, ApiKey.DELETE_ACLS: 1,
    ApiKey.DESCRIBE_CONFIGS: 2, ApiKey.ALTER_CONFIGS: 1, ApiKey.CREATE_PARTITIONS: 1,
    ApiKey.DELETE_GROUPS: 1
}
# never throttled on request time: the connection's own bookkeeping and inter-broker work
# (WriteTxnMarkers; AddPartitionsToTxn v4+ is the coordinator's verification, see `enforce`)
REQUEST_TIME_EXEMPT = {ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE,
                       ApiKey.WRITE_TXN_MARKERS}


def manager(hctx: HandlerContext) -> QuotaManager:
    qm = getattr(hctx, "client_quotas", None)
    if qm is None:
        cfg = hctx.config.values.get
        num = cfg("quota.window.num") or 11
        size_s = cfg("quota.window.size.seconds") or 1
        qm = hctx.client_quotas = QuotaManager(WindowConfig(int(num), int(size_s) * 1000))
    qm.update(hctx.image.quotas)
    return qm


def _now_ms() -> float:
    return time.monotonic() * 1000.0


# -- request time (KIP-124) -----------------------------------------------------------------------

class RequestTimer(trio.abc.Instrument):
    """Sums the time each tracked task spends running (between trio's task-step hooks): the
    broker's equivalent of Kafka's request handler thread time. Installed only once some
    request_percentage quota exists, so brokers without one pay nothing."""

    def __init__(self):
        self.tracked: dict = {}        # task -> accumulated seconds
        self._started: dict = {}

    def before_task_step(self, task) -> None:
        if task in self.tracked:
            self._started[task] = time.perf_counter()

    def after_task_step(self, task) -> None:
        start = self._started.pop(task, None)
        if start is not None and task in self.tracked:
            self.tracked[task] += time.perf_counter() - start

    # start/stop are called from inside the task's current step, which began before tracking:
    # they open and close that partial step themselves (a handler that never awaits is one step)
    def start(self, task) -> None:
        self.tracked[task] = 0.0
        self._started[task] = time.perf_counter()

    def stop(self, task) -> float:
        start = self._started.pop(task, None)
        used = self.tracked.pop(task, 0.0)
        return used + (time.perf_counter() - start if start is not None else 0.0)


_timers: dict = {}          # trio run (its root task) -> RequestTimer


def _request_timer() -> RequestTimer:
    root = trio.lowlevel.current_root_task()
    timer = _timers.get(root)
    if timer is None:
        _timers.clear()                     # an earlier trio run (tests) is over
        timer = _timers[root] = RequestTimer()
        trio.lowlevel.add_instrument(timer)
    return timer


# -- enforcement ----------------------------------------------------------------------------------

def _records_size(records) -> int:
    """Bytes of a partition's records: bytes-like, or a FileRange (sent with sendfile)."""
    if records is None:
        return 0
    size = getattr(records, "size", None)
    return size if isinstance(size, int) else len(records)


def _fetch_bytes(resp) -> int:
    return sum(_records_size(p.records) for t in resp.responses for p in t.partitions)


def _empty_fetch(resp) -> None:
    for t in resp.responses:
        for p in t.partitions:
            p.records = b""
            p.aborted_transactions = None if p.aborted_transactions is None else []


async def enforce(hctx: HandlerContext, ctx, request, call):
    """Run `call(request)` under the client's quotas; sets throttle_time_ms and the mute."""
    qm = manager(hctx)
    if not qm.quotas:
        return await call(request)
    principal, client_id = ctx.principal, request.client_id
    api = request.api_key
    consumer_fetch = api == FETCH and (request.body.replica_id if request.api_version < 15
                                       else request.body.replica_state.replica_id) < 0
    if consumer_fetch:
        cap = qm.max_value_in_window(principal, client_id, CONSUMER_BYTE_RATE)
        if cap is not None:
            request.body.max_bytes = max(1, min(request.body.max_bytes, int(cap)))
    cluster_action = api in REQUEST_TIME_EXEMPT or (api == ApiKey.ADD_PARTITIONS_TO_TXN
                                                    and request.api_version >= 4)
    timed = not cluster_action and qm.has(REQUEST_PERCENTAGE) \
        and qm.bound(principal, client_id, REQUEST_PERCENTAGE) is not None
    if timed:
        timer, task = _request_timer(), trio.lowlevel.current_task()
        timer.start(task)
        try:
            response = await call(request)
        finally:
            used_s = timer.stop(task)
    else:
        response = await call(request)

    now = _now_ms()
    throttle = 0
    if api == PRODUCE:
        throttle = qm.record(principal, client_id, PRODUCER_BYTE_RATE, request.size, now)
    elif consumer_fetch and response is not None and getattr(response, "responses", None):
        if qm.throttle_now(principal, client_id, CONSUMER_BYTE_RATE, now):
            # already over the quota: answered without records (nothing recorded)
            throttle = qm.throttle_now(principal, client_id, CONSUMER_BYTE_RATE, now)
            _empty_fetch(response)
        else:
            throttle = qm.record(principal, client_id, CONSUMER_BYTE_RATE,
                                 _fetch_bytes(response), now)
    if timed:
        # percent of one thread: 1 ms of work per second is 0.1 %
        request_throttle = qm.record(principal, client_id, REQUEST_PERCENTAGE, used_s * 100.0,
                                     now, max_throttle_ms=qm.config.size_ms)
        throttle = max(throttle, request_throttle)
    if throttle <= 0:
        return response
    if response is not None and hasattr(response, "throttle_time_ms"):
        response.throttle_time_ms = max(response.throttle_time_ms or 0, throttle)
    self_throttling = KIP_219_VERSIONS.get(api, 0 if api >= ApiKey.ELECT_LEADERS else 99)
    if response is None or request.api_version >= self_throttling:
        ctx.mute_s = max(getattr(ctx, "mute_s", 0.0), throttle / 1000.0)
    else:
        await trio.sleep(throttle / 1000.0)       # pre-KIP-219 clients: the answer comes late
    return response


# -- metrics (partition_server/metrics.py renders these) -------------------------------------------

def metric_families(qm: QuotaManager | None, labels) -> list:
    """[(name, kind, doc, [(labels, value)])] for the Prometheus endpoint: per metered
    (quota key, user, client id) bucket of the quota manager (None before its first use), its
    current rate and the throttle handed out so far."""
    if qm is None or not qm.rates:
        return []
    now = _now_ms()
    rates, throttles = [], []
    for (key, (user, client_id)), rate in sorted(qm.rates.items()):
        tags = labels(quota=key, user=user, client_id=client_id)
        rates.append((tags, f"{rate.measure(now):.3f}"))
        throttles.append((tags, qm.throttled_ms.get((key, (user, client_id)), 0)))
    return [("raftka_client_quota_rate", "gauge",
             "Metered rate per quota bucket (bytes/s; percent of a thread for request_percentage).",
             rates),
            ("raftka_client_quota_throttle_time_ms_total", "counter",
             "Throttle time handed to clients per quota bucket (ms).", throttles)]


# -- DescribeClientQuotas / AlterClientQuotas ----------------------------------------------------

async def handle_describe_client_quotas(hctx: HandlerContext, req):
    from metadata_quorum.controller.quota_control import describe_client_quotas
    cls = RESPONSES[DESCRIBE_CLIENT_QUOTAS]
    components = [(c.entity_type, c.match_type, c.match) for c in req.body.components]
    code, message, entries = describe_client_quotas(hctx.image, components, req.body.strict)
    if code != ErrorCode.NONE:
        return cls(error_code=code, error_message=message, entries=None)
    return cls(error_code=0, entries=[cls.EntryData(
        entity=[cls.EntityData(entity_type=t, entity_name=n) for t, n in ent],
        values=[cls.ValueData(key=k, value=v) for k, v in values.items()])
        for ent, values in entries])


def _alter_response(body, code):
    cls = RESPONSES[ALTER_CLIENT_QUOTAS]
    return cls(entries=[cls.EntryData(error_code=code, entity=[
        cls.EntityData(entity_type=e.entity_type, entity_name=e.entity_name) for e in x.entity])
        for x in body.entries])


def deny_alter(req):
    """The refusal the authorizer gives without AlterConfigs on the cluster."""
    return _alter_response(req.body, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)


def deny_describe(req):
    return RESPONSES[DESCRIBE_CLIENT_QUOTAS](error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)


def _first_error(resp) -> int:
    return next((x.error_code for x in resp.entries), 0)


async def handle_alter_client_quotas(hctx: HandlerContext, req):
    try:
        resp = await hctx.client.call_active(req.body, timeout_s=15, version=req.api_version,
                                               error_of=_first_error)
    except ControllerUnavailable:
        return _alter_response(req.body, ErrorCode.REQUEST_TIMED_OUT)
    if not req.body.validate_only:
        await _await_image(hctx, req.body, resp)
    return resp


async def _await_image(hctx: HandlerContext, body, resp, timeout_s: float = 5.0) -> None:
    from partition_server.quotas import canonical
    wanted = []
    for x, result in zip(body.entries, resp.entries):
        if result.error_code == 0:
            ent = canonical((e.entity_type, e.entity_name) for e in x.entity)
            wanted += [(ent, o.key, None if o.remove else float(o.value)) for o in x.ops]

    def visible() -> bool:
        return all(hctx.image.quotas.get(ent, {}).get(key) == value for ent, key, value in wanted)
    with trio.move_on_after(timeout_s):
        while not visible():
            await hctx.client.image_changed.wait()
