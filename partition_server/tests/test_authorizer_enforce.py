"""Per-API enforcement (security/enforce.py) against fake handlers: refused items never reach
the handler, their errors are merged into the answer, read-only answers are filtered."""

import trio

from common.network import ClientContext
from partition_server.security import authorizer as A
from partition_server.security.enforce import authorize_and_call
from wire.connection import Request
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS, RESPONSES

ALICE = "User:alice"


def acl(op, name, rtype=A.TOPIC, perm=A.ALLOW, principal=ALICE, pattern=A.LITERAL):
    return A.Acl(rtype, name, pattern, principal, "*", op, perm)


def run(az, api_key, body, handler, version, principal=ALICE):
    ctx = ClientContext("1.2.3.4:5", "TEST", "1.2.3.4", principal)
    req = Request(api_key, version, 1, "t", None, body, 0)
    seen = []

    async def call(r):
        seen.append(r.body)
        return await handler(r)
    return trio.run(authorize_and_call, az, ctx, req, call), seen


def produce_body(*topics, acks=-1):
    cls = REQUESTS[ApiKey.PRODUCE]
    return cls(acks=acks, timeout_ms=1000, topic_data=[cls.TopicProduceData(
        name=t, partition_data=[cls.PartitionProduceData(index=0, records=b"")]) for t in topics])


async def produce_handler(req):
    cls = RESPONSES[ApiKey.PRODUCE]
    return cls(responses=[cls.TopicProduceResponse(name=t.name, partition_responses=[
        cls.PartitionProduceResponse(index=0, error_code=0)]) for t in req.body.topic_data])


def test_produce_only_writable_topics_reach_the_handler():
    az = A.Authorizer([acl(A.WRITE, "ok")])
    resp, seen = run(az, ApiKey.PRODUCE, produce_body("ok", "no"), produce_handler, 9)
    assert [t.name for t in seen[0].topic_data] == ["ok"]
    codes = {t.name: t.partition_responses[0].error_code for t in resp.responses}
    assert codes == {"ok": 0, "no": 29}
    resp, seen = run(az, ApiKey.PRODUCE, produce_body("no"), produce_handler, 9)
    assert seen == [] and resp.responses[0].partition_responses[0].error_code == 29
    resp, seen = run(az, ApiKey.PRODUCE, produce_body("no", acks=0), produce_handler, 9)
    assert seen == [] and resp is None                   # acks=0: silence, nothing appended


def test_transactional_produce_needs_the_transactional_id():
    az = A.Authorizer([acl(A.WRITE, "ok")])
    body = produce_body("ok")
    body.transactional_id = "tx"
    resp, seen = run(az, ApiKey.PRODUCE, body, produce_handler, 9)
    assert seen == [] and resp.responses[0].partition_responses[0].error_code == 53


def test_fetch_filters_and_follower_needs_cluster_action():
    cls_q, cls = REQUESTS[ApiKey.FETCH], RESPONSES[ApiKey.FETCH]

    async def handler(req):
        return cls(responses=[cls.FetchableTopicResponse(topic=t.topic, partitions=[
            cls.PartitionData(partition_index=0, records=b"data")]) for t in req.body.topics])
    body = cls_q(replica_id=-1, topics=[cls_q.FetchTopic(topic=n, partitions=[
        cls_q.FetchPartition(partition=0, fetch_offset=0)]) for n in ("r", "x")])
    az = A.Authorizer([acl(A.READ, "r")])
    resp, _ = run(az, ApiKey.FETCH, body, handler, 12)
    parts = {t.topic: t.partitions[0] for t in resp.responses}
    assert parts["r"].error_code == 0 and parts["r"].records == b"data"
    assert parts["x"].error_code == 29 and not parts["x"].records
    body.replica_id = 2
    resp, seen = run(az, ApiKey.FETCH, body, handler, 12)
    assert seen == [] and resp.error_code == 31


def test_metadata_hides_and_names_refusals():
    cls = RESPONSES[ApiKey.METADATA]

    async def handler(req):
        return cls(topics=[cls.MetadataResponseTopic(name=n) for n in ("seen", "hidden")])
    az = A.Authorizer([acl(A.WRITE, "seen")])              # Write implies Describe
    resp, _ = run(az, ApiKey.METADATA, REQUESTS[ApiKey.METADATA](topics=None), handler, 12)
    assert [t.name for t in resp.topics] == ["seen"]
    q = REQUESTS[ApiKey.METADATA]
    resp, _ = run(az, ApiKey.METADATA, q(topics=[q.MetadataRequestTopic(name="seen"),
                                   q.MetadataRequestTopic(name="hidden")]), handler, 12)
    assert {t.name: t.error_code for t in resp.topics} == {"seen": 0, "hidden": 29}


def test_groups_cluster_and_super_users():
    async def join(req):
        return RESPONSES[ApiKey.JOIN_GROUP](error_code=0)
    body = REQUESTS[ApiKey.JOIN_GROUP](group_id="g", protocol_type="consumer", protocols=[])
    az = A.Authorizer([acl(A.READ, "g", rtype=A.GROUP)], super_users=["User:admin"])
    assert run(az, ApiKey.JOIN_GROUP, body, join, 5)[0].error_code == 0
    body.group_id = "other"
    resp, seen = run(az, ApiKey.JOIN_GROUP, body, join, 5)
    assert resp.error_code == 30 and seen == []
    assert run(az, ApiKey.JOIN_GROUP, body, join, 5, principal="User:admin")[0].error_code == 0

    async def init_pid(req):
        return RESPONSES[ApiKey.INIT_PRODUCER_ID](error_code=0, producer_id=7)
    assert run(az, ApiKey.INIT_PRODUCER_ID, REQUESTS[ApiKey.INIT_PRODUCER_ID](transactional_id=None), init_pid, 4)[0].error_code == 31
    az2 = A.Authorizer([acl(A.WRITE, "t-", pattern=A.PREFIXED)])
    assert run(az2, ApiKey.INIT_PRODUCER_ID, REQUESTS[ApiKey.INIT_PRODUCER_ID](transactional_id=None), init_pid, 4)[0].producer_id == 7
    assert run(az2, ApiKey.INIT_PRODUCER_ID, REQUESTS[ApiKey.INIT_PRODUCER_ID](transactional_id="tx"), init_pid, 4)[0].error_code == 53

    async def forward(req):
        raise AssertionError("a refused CreateAcls must not be forwarded")
    cls = REQUESTS[ApiKey.CREATE_ACLS]
    resp, _ = run(az, ApiKey.CREATE_ACLS, cls(creations=[cls.AclCreation(resource_type=2, resource_name="*",
                                                        resource_pattern_type=3, principal=ALICE,
                                                        host="*", operation=2,
                                                        permission_type=3)]), forward, 3)
    assert resp.results[0].error_code == 31


def test_offset_fetch_group_denied_at_every_version():
    q = REQUESTS[ApiKey.OFFSET_FETCH]

    async def handler(req):
        raise AssertionError("refused OffsetFetch must not reach the coordinator")
    az = A.Authorizer([])
    body = q(group_id="g", topics=[q.OffsetFetchRequestTopic(name="t", partition_indexes=[0, 1])])
    resp, _ = run(az, ApiKey.OFFSET_FETCH, body, handler, 1)
    assert [p.error_code for p in resp.topics[0].partitions] == [30, 30]
    resp, _ = run(az, ApiKey.OFFSET_FETCH, q(group_id="g", topics=None), handler, 7)
    assert resp.error_code == 30
    resp, _ = run(az, ApiKey.OFFSET_FETCH, q(groups=[q.OffsetFetchRequestGroup(group_id="g", topics=None)]), handler, 8)
    assert resp.groups[0].error_code == 30
