"""`handlers/client_quotas.enforce` in process: the principal (from the connection, e.g. SASL)
and the header's client id pick the quota; throttle_time_ms, the connection mute (KIP-219) or a
late answer for older versions; empty fetches; followers exempt; request_percentage."""

from __future__ import annotations

import time

import trio

from metadata_quorum.image import MetadataImage
from metadata_quorum.records import ClientQuotaRecord
from partition_server.handlers.client_quotas import enforce, metric_families
from partition_server.metrics import _labels
from common.network import ClientContext
from wire.connection import Request
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS, RESPONSES


class _Config:
    def __init__(self, **values):
        self.values = values


class _Broker:
    def __init__(self, *records, **config):
        self.config = _Config(**config)
        img = MetadataImage()
        for i, rec in enumerate(records):
            img = img.apply(i, rec)
        self.image = img


def _ctx(principal="User:ANONYMOUS"):
    return ClientContext("127.0.0.1:1", "SASL_PLAINTEXT", "127.0.0.1", principal)


def _produce(version=9, size=5000, client_id="app", acks=1):
    return Request(ApiKey.PRODUCE, version, 1, client_id, None, REQUESTS[ApiKey.PRODUCE](acks=acks, timeout_ms=1000), size)


def _fetch(version=12, replica_id=-1, client_id="app"):
    body = REQUESTS[ApiKey.FETCH](replica_id=replica_id, max_wait_ms=0, min_bytes=1, max_bytes=50 << 20)
    return Request(ApiKey.FETCH, version, 1, client_id, None, body, 100)


def _fetch_response(nbytes):
    cls = RESPONSES[ApiKey.FETCH]
    return cls(responses=[cls.FetchableTopicResponse(topic="t", partitions=[
        cls.PartitionData(partition_index=0, high_watermark=10, records=b"x" * nbytes)])])


async def _answer(resp):
    return resp


async def test_user_quota_from_the_sasl_principal_sets_throttle_and_mute():
    broker = _Broker(ClientQuotaRecord((("user", "alice"),), "producer_byte_rate", 100.0))
    ctx = _ctx("User:alice")
    resp = await enforce(broker, ctx, _produce(size=5000), lambda r: _answer(RESPONSES[ApiKey.PRODUCE]()))
    # 5000 bytes over the 10 s floor = 500 B/s against 100: (500 - 100) / 100 × 10 s
    assert resp.throttle_time_ms == 40_000 and ctx.mute_s == 40.0
    other = _ctx("User:bob")
    resp = await enforce(broker, other, _produce(size=5000), lambda r: _answer(RESPONSES[ApiKey.PRODUCE]()))
    assert resp.throttle_time_ms == 0 and other.mute_s == 0.0


async def test_client_id_quota_and_acks_zero_is_muted_without_answer():
    broker = _Broker(ClientQuotaRecord((("client-id", "app"),), "producer_byte_rate", 100.0))
    ctx = _ctx()
    assert await enforce(broker, ctx, _produce(acks=0), lambda r: _answer(None)) is None
    assert ctx.mute_s > 0
    ctx2 = _ctx()
    resp = await enforce(broker, ctx2, _produce(client_id="other"),
                         lambda r: _answer(RESPONSES[ApiKey.PRODUCE]()))
    assert resp.throttle_time_ms == 0 and ctx2.mute_s == 0


async def test_pre_kip_219_versions_get_a_late_answer(autojump_clock):
    broker = _Broker(ClientQuotaRecord((("client-id", "app"),), "producer_byte_rate", 100.0))
    ctx = _ctx()
    start = trio.current_time()
    resp = await enforce(broker, ctx, _produce(version=5, size=1500),
                         lambda r: _answer(RESPONSES[ApiKey.PRODUCE]()))
    assert resp.throttle_time_ms == 5000                # (150 - 100) / 100 × 10 s
    assert trio.current_time() - start >= 5.0 and ctx.mute_s == 0


async def test_fetch_capped_then_empty_when_already_over_and_followers_exempt():
    broker = _Broker(ClientQuotaRecord((("client-id", None),), "consumer_byte_rate", 1000.0),
                     **{"quota.window.num": 2})
    ctx = _ctx()
    seen = []

    async def handler(req):
        seen.append(req.body.max_bytes)
        return _fetch_response(3000)
    resp = await enforce(broker, ctx, _fetch(), handler)
    assert seen == [1000]                      # capped at bound × (num − 1) windows
    assert resp.responses[0].partitions[0].records == b"x" * 3000   # delivered, then paid for
    assert resp.throttle_time_ms == 2000 and ctx.mute_s == 2.0
    ctx.mute_s = 0
    resp = await enforce(broker, ctx, _fetch(), handler)
    assert resp.responses[0].partitions[0].records == b""          # over: answered empty
    assert resp.responses[0].partitions[0].high_watermark == 10 and resp.throttle_time_ms > 0
    # a follower's fetch is replication, never client-throttled
    ctx3 = _ctx()
    resp = await enforce(broker, ctx3, _fetch(replica_id=1), handler)
    assert resp.throttle_time_ms == 0 and seen[-1] == 50 << 20 and ctx3.mute_s == 0


async def test_request_percentage_counts_time_spent_running_and_caps_at_one_window():
    broker = _Broker(ClientQuotaRecord((("client-id", "busy"),), "request_percentage", 1.0))
    ctx = _ctx()

    async def busy(req):
        end = time.perf_counter() + 0.05       # 50 ms of work, 5 % of a thread over 1 s...
        while time.perf_counter() < end:
            pass
        await trio.sleep(0.2)                  # ...and waiting, which is not counted
        return RESPONSES[ApiKey.METADATA]()
    req = Request(ApiKey.METADATA, 12, 1, "busy", None, REQUESTS[ApiKey.METADATA](), 50)
    resp = await enforce(broker, ctx, req, busy)
    # 50 ms over the 10 s floor = 0.5 %/s: under 1 %
    assert resp.throttle_time_ms == 0
    for _ in range(3):
        resp = await enforce(broker, ctx, req, busy)
    # 200 ms of work in the window = 2 % > 1 %: throttled, at most one window
    assert 0 < resp.throttle_time_ms <= 1000
    ctx2 = _ctx()
    resp = await enforce(broker, ctx2, Request(ApiKey.METADATA, 12, 1, "idle", None, REQUESTS[ApiKey.METADATA](), 50), busy)
    assert resp.throttle_time_ms == 0


async def test_request_time_of_a_handler_that_never_awaits_is_counted():
    broker = _Broker(ClientQuotaRecord((("client-id", "busy"),), "request_percentage", 1.0))

    async def busy_sync(req):                  # one task step from start to end
        end = time.perf_counter() + 0.06
        while time.perf_counter() < end:
            pass
        return RESPONSES[ApiKey.METADATA]()
    req = Request(ApiKey.METADATA, 12, 1, "busy", None, REQUESTS[ApiKey.METADATA](), 50)
    throttles = [(await enforce(broker, _ctx(), req, busy_sync)).throttle_time_ms
                 for _ in range(3)]
    assert throttles[0] == 0 and throttles[-1] > 0      # 180 ms of work: 1.8 % over 10 s


async def test_metrics_show_rate_and_throttle_per_bucket():
    broker = _Broker(ClientQuotaRecord((("user", "alice"),), "producer_byte_rate", 100.0))
    assert metric_families(getattr(broker, "client_quotas", None), _labels) == []
    await enforce(broker, _ctx("User:alice"), _produce(size=5000),
                  lambda r: _answer(RESPONSES[ApiKey.PRODUCE]()))
    families = {name: samples for name, _, _, samples in
                metric_families(broker.client_quotas, _labels)}
    tags = '{quota="producer_byte_rate",user="alice",client_id=""}'
    assert families["raftka_client_quota_throttle_time_ms_total"] == [(tags, 40_000)]
    [(got_tags, rate)] = families["raftka_client_quota_rate"]
    assert got_tags == tags and 490 < float(rate) <= 500


def test_quota_apis_need_describe_configs_and_alter_configs_on_the_cluster():
    from partition_server.security import authorizer as A
    from partition_server.security.enforce import authorize_and_call

    def run(az, api_key, body):
        ctx = ClientContext("1.2.3.4:5", "TEST", "1.2.3.4", "User:alice")
        seen = []

        async def call(r):
            seen.append(r)
            return RESPONSES[api_key]()
        resp = trio.run(authorize_and_call, az, ctx, Request(api_key, 1, 1, "t", None, body, 0),
                        call)
        return resp, seen

    aq = REQUESTS[ApiKey.ALTER_CLIENT_QUOTAS]
    alter = aq(entries=[aq.EntryData(entity=[aq.EntityData(entity_type="user", entity_name="b")],
                                     ops=[aq.OpData(key="producer_byte_rate", value=1.0)])])
    describe = REQUESTS[ApiKey.DESCRIBE_CLIENT_QUOTAS](components=[], strict=False)
    nobody = A.Authorizer([])
    resp, seen = run(nobody, ApiKey.ALTER_CLIENT_QUOTAS, alter)
    assert seen == [] and resp.entries[0].error_code == 31          # CLUSTER_AUTHORIZATION_FAILED
    assert resp.entries[0].entity[0].entity_name == "b"
    resp, seen = run(nobody, ApiKey.DESCRIBE_CLIENT_QUOTAS, describe)
    assert seen == [] and resp.error_code == 31

    def grant(op):
        return A.Authorizer([A.Acl(A.CLUSTER, A.CLUSTER_NAME, A.LITERAL, "User:alice", "*", op,
                                   A.ALLOW)])
    assert run(grant(A.ALTER_CONFIGS), 49, alter)[1]                 # reached the handler
    assert run(grant(A.DESCRIBE_CONFIGS), 48, describe)[1]
    assert run(grant(A.ALTER_CONFIGS), 48, describe)[1]              # AlterConfigs implies it
    assert not run(grant(A.DESCRIBE_CONFIGS), 49, alter)[1]


async def test_fetch_bytes_counted_from_file_ranges_too():
    from partition_server.log.segment import FileRange
    broker = _Broker(ClientQuotaRecord((("client-id", "app"),), "consumer_byte_rate", 100.0))
    ctx = _ctx()
    cls = RESPONSES[ApiKey.FETCH]

    async def handler(req):
        return cls(responses=[cls.FetchableTopicResponse(topic="t", partitions=[
            cls.PartitionData(partition_index=0, records=FileRange(0, 0, 2000)),
            cls.PartitionData(partition_index=1, records=FileRange(0, 0, 0))])])
    resp = await enforce(broker, ctx, _fetch(), handler)
    assert resp.throttle_time_ms == 10_000          # 2000 B over 10 s = 200 B/s against 100
