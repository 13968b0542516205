"""Readiness (partition_server/health.py), the alerting gauges and request metrics
(partition_server/metrics.py, common/request_metrics.py) and the shared HTTP responder."""

import json
import types
import uuid

import pytest
import trio

from common.http_endpoint import health_answer, live_answer, serve_http
from common.process_metrics import process_families
from common.request_metrics import BUCKETS_MS, RequestStats
from metadata_quorum.image import BrokerRegistration, MetadataImage, PartitionState, TopicImage
from partition_server.health import LAG_SLACK, BrokerHealth, readiness
from partition_server.log import LogConfig, PartitionLog
from partition_server.metrics import partition_families
from partition_server.replica_manager import ReplicaManager
from partition_server.replication.partition import Role
from wire.messages.api_keys import ApiKey

READY = BrokerHealth(registered=True, fenced=False, applied_offset=100, replayed_offset=100,
                     heard_offset=102)


def test_a_registered_unfenced_caught_up_broker_is_ready():
    assert readiness(READY) == (True, [])


@pytest.mark.parametrize("change, reason", [
    (dict(registered=False), "not registered with the controller quorum"),
    (dict(fenced=True), "fenced by the controller"),
    (dict(heard_offset=-1), "no metadata heard from the quorum yet"),
    (dict(heard_offset=100 + LAG_SLACK + 1), "metadata behind: replayed offset 100 of 111"),
    (dict(applied_offset=100 - LAG_SLACK - 1),
     "logs loading: image offset 89 applied, 100 replayed (opening logs ahead)"),
    (dict(failed_logs=2), "2 partition log(s) failed to open"),
    (dict(log_dir_failed=True), "log directory failed"),
])
def test_each_unready_state_says_why(change, reason):
    ready, reasons = readiness(BrokerHealth(**{**READY.__dict__, **change}))
    assert not ready and reasons == [reason]


def test_a_starting_broker_lists_every_reason():
    ready, reasons = readiness(BrokerHealth(False, True, -1, -1, -1))
    assert not ready
    assert reasons == ["not registered with the controller quorum",
                       "no metadata heard from the quorum yet"]
    status, ctype, body = health_answer(ready, reasons, broker_id=3)
    assert status == 503 and ctype == "application/json"
    assert json.loads(body) == {"ready": False, "reasons": reasons, "broker_id": 3}
    assert health_answer(True, [])[0] == 200


def _broker(bid, fenced=False):
    return BrokerRegistration(bid, "x", 1, "h", 1, None, fenced, False)


def test_offline_and_leaderless_partitions_from_the_image():
    image = MetadataImage()
    image.brokers = {1: _broker(1), 2: _broker(2, fenced=True)}
    parts = {0: PartitionState(0, (1, 2), (1,), 1, 0, 0),     # led by a live broker
             1: PartitionState(1, (1, 2), (), -1, 0, 0),      # offline
             2: PartitionState(2, (2, 3), (2,), 2, 0, 0),     # leader fenced
             3: PartitionState(3, (3,), (3,), 3, 0, 0)}       # leader not registered
    image.topics = {"t": TopicImage("t", uuid.uuid4(), parts)}
    assert image.leaderless_counts() == (1, 3)


def test_under_replicated_and_under_min_isr_of_partitions_led_here(tmp_path):
    replicas = ReplicaManager(1, lambda t, p, cfg: PartitionLog(str(tmp_path / f"{t}-{p}"),
                                                                LogConfig()))
    # (topic, id, replicas, isr, min isr): full, short of one (not below min), below min
    for p, reps, isr, min_isr in ((0, [1, 2], [1, 2], 1), (1, [1, 2, 3], [1, 2], 2),
                                  (2, [1, 2, 3], [1], 2)):
        replicas.apply_partition("t", None, p, reps, isr, 1, 1, 1, {}, min_isr, 0)
    replicas.apply_partition("t", None, 3, [2, 1], [2], 2, 1, 1, {}, 1, 0)   # a follower here
    replicas.isr_shrinks, replicas.isr_expands = 4, 1
    led = [(t, p, replicas.get(t, p)) for t, p in sorted(replicas.hosted_keys())
           if replicas.get(t, p).state.role is Role.LEADER]
    fams = {name: samples for name, _, _, samples in partition_families(led, None, replicas)}
    assert fams["raftka_under_replicated_partitions"] == [("", 2)]
    assert fams["raftka_under_min_isr_partitions"] == [("", 1)]
    assert fams["raftka_offline_partitions"] == [("", 0)]
    assert fams["raftka_isr_shrinks_total"] == [("", 4)]
    assert fams["raftka_isr_expands_total"] == [("", 1)]
    replicas.close_all()


async def test_request_counts_errors_and_cumulative_latency_buckets():
    stats = RequestStats()

    async def dispatch(ctx, request):
        if request.body == "boom":
            raise RuntimeError("handler bug")
        return types.SimpleNamespace(error_code=request.body)
    timed = stats.wrap(dispatch)
    for body in (0, 0, 3):
        await timed(None, types.SimpleNamespace(api_key=ApiKey.METADATA, body=body))
    with pytest.raises(RuntimeError):
        await timed(None, types.SimpleNamespace(api_key=ApiKey.PRODUCE, body="boom"))
    stats.record(ApiKey.FETCH, 0.3, 0)                  # 300 ms: in the 500 ms bucket
    fams = {name: samples for name, _, _, samples in stats.families()}
    assert ('{api="Metadata"}', 3) in fams["raftka_requests_total"]
    assert fams["raftka_request_errors_total"] == [
        ('{api="Metadata",error="UNKNOWN_TOPIC_OR_PARTITION"}', 1),
        ('{api="Produce",error="UNKNOWN_SERVER_ERROR"}', 1)]
    fetch = {lbl: v for lbl, v in fams["raftka_request_total_time_ms"] if 'api="Fetch"' in lbl}
    assert fetch['_bucket{api="Fetch",le="250"}'] == 0
    assert fetch['_bucket{api="Fetch",le="500"}'] == 1
    assert fetch['_bucket{api="Fetch",le="+Inf"}'] == 1
    assert fetch['_count{api="Fetch"}'] == 1 and fetch['_sum{api="Fetch"}'] == "300.000"
    assert len([k for k in fetch if k.startswith("_bucket")]) == len(BUCKETS_MS) + 1


def test_process_families_read_proc():
    fams = {name: samples for name, _, _, samples in process_families()}
    assert fams["process_open_fds"][0][1] > 0
    assert fams["process_resident_memory_bytes"][0][1] > 1 << 20


async def _get(port: int, path: str) -> bytes:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    await stream.send_all(f"GET {path} HTTP/1.0\r\n\r\n".encode())
    data = b""
    while chunk := await stream.receive_some(65536):
        data += chunk
    return data


async def test_the_http_responder_routes_and_answers_404(nursery):
    routes = {"/health/live": live_answer,
              "/health/ready": lambda: health_answer(False, ["fenced by the controller"])}
    port = await nursery.start(serve_http, routes, "127.0.0.1:0")
    assert (await _get(port, "/health/live")).startswith(b"HTTP/1.0 200 OK")
    ready = await _get(port, "/health/ready?verbose")
    assert ready.startswith(b"HTTP/1.0 503 Service Unavailable")
    assert json.loads(ready.split(b"\r\n\r\n", 1)[1])["reasons"] == ["fenced by the controller"]
    assert (await _get(port, "/nope")).startswith(b"HTTP/1.0 404")
