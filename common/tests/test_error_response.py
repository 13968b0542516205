"""UNKNOWN_SERVER_ERROR answers shaped like the request (common/error_response.py)."""

import random

import pytest

from common.error_response import CODE, error_response
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS, RESPONSES
from wire.testing import random_message

CASES = [(k, v) for k in sorted(REQUESTS) if k in RESPONSES
         for v in range(REQUESTS[k].VALID_VERSIONS[0], REQUESTS[k].VALID_VERSIONS[1] + 1)
         if RESPONSES[k].check_version(v)]


def _codes(obj, version, out):
    for f in type(obj).FIELDS:
        if not f.present(version):
            continue
        value = getattr(obj, f.name)
        if f.name == "error_code":
            out.append(value)
        elif f.is_array and f.struct is not None:
            for item in value or ():
                _codes(item, version, out)
        elif f.struct is not None and value is not None:
            _codes(value, version, out)
    return out


@pytest.mark.parametrize("api_key,version", CASES)
def test_every_api_and_version_gets_an_encodable_error_answer(api_key, version):
    rng = random.Random(api_key * 100 + version)
    for _ in range(3):
        req = random_message(REQUESTS[api_key], version, rng)
        resp = error_response(RESPONSES[api_key], req, version, "boom")
        if resp is None:
            continue
        out = bytearray()
        resp.encode_into(out, version, lenient=True)
        back = RESPONSES[api_key].decode(bytes(out), version) if hasattr(
            RESPONSES[api_key], "decode") else None
        codes = _codes(resp, version, [])
        assert codes and all(c == CODE for c in codes)
        if back is not None:
            assert all(c == CODE for c in _codes(back, version, []))


def test_every_api_but_one_can_carry_the_error():
    """Only AlterUserScramCredentials (two request arrays, answers keyed by user) stays silent:
    its caller closes the connection."""
    silent = set()
    for k in {k for k, _ in CASES}:
        rng = random.Random(k)
        if all(error_response(RESPONSES[k], random_message(REQUESTS[k], v, rng), v) is None
               for kk, v in CASES if kk == k for _ in range(10)):
            silent.add(k)
    assert silent == {51}


def test_bare_keys_get_one_answer_each():
    req = REQUESTS[ApiKey.DESCRIBE_GROUPS](groups=["g1", "g2"])
    resp = error_response(RESPONSES[ApiKey.DESCRIBE_GROUPS], req, 5)
    assert [(g.group_id, g.error_code) for g in resp.groups] == [("g1", CODE), ("g2", CODE)]


def test_produce_answers_every_partition_asked():
    req_cls = REQUESTS[ApiKey.PRODUCE]
    req = req_cls(acks=-1, timeout_ms=1000, topic_data=[
        req_cls.TopicProduceData(name="a", partition_data=[
            req_cls.PartitionProduceData(index=0, records=b""),
            req_cls.PartitionProduceData(index=3, records=b"")]),
        req_cls.TopicProduceData(name="b", partition_data=[
            req_cls.PartitionProduceData(index=1, records=b"")])])
    resp = error_response(RESPONSES[ApiKey.PRODUCE], req, 9)
    got = [(t.name, p.index, p.error_code) for t in resp.responses for p in t.partition_responses]
    assert got == [("a", 0, CODE), ("a", 3, CODE), ("b", 1, CODE)]


def test_fetch_answers_per_partition_and_top_level():
    req_cls = REQUESTS[ApiKey.FETCH]
    req = req_cls(topics=[req_cls.FetchTopic(topic="t", partitions=[
        req_cls.FetchPartition(partition=2, fetch_offset=5)])])
    resp = error_response(RESPONSES[ApiKey.FETCH], req, 12)
    assert resp.error_code == CODE
    assert [(t.topic, p.partition_index, p.error_code) for t in resp.responses
            for p in t.partitions] == [("t", 2, CODE)]


async def test_a_failing_handler_answers_unknown_server_error_and_keeps_the_connection():
    """A handler bug fails that request only: UNKNOWN_SERVER_ERROR per partition, and the next
    request on the same connection is served; acks=0 (no answer expected) closes instead."""
    import functools

    import trio

    from common.network import serve_listener
    from partition_server.tests.test_security_network import connect

    supported = {ApiKey.API_VERSIONS: (0, 3), ApiKey.METADATA: (0, 12), ApiKey.PRODUCE: (3, 9)}

    async def dispatch(ctx, request):
        if request.api_key == ApiKey.PRODUCE:
            raise RuntimeError("a handler bug")
        return RESPONSES[ApiKey.METADATA](cluster_id="ok", brokers=[], topics=[])

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(functools.partial(
            serve_listener, "127.0.0.1", 0, dispatch, "TEST", 1 << 20, supported))
        port = listeners[0].socket.getsockname()[1]
        client = await connect(port)
        req_cls = REQUESTS[ApiKey.PRODUCE]
        produce = req_cls(acks=1, timeout_ms=1000, topic_data=[req_cls.TopicProduceData(
            name="t", partition_data=[req_cls.PartitionProduceData(index=4, records=b"")])])
        resp = await client.call(produce, 9)
        assert [(t.name, p.index, p.error_code) for t in resp.responses
                for p in t.partition_responses] == [("t", 4, CODE)]
        assert (await client.call(REQUESTS[ApiKey.METADATA](topics=[]), 12)).cluster_id == "ok"
        produce.acks = 0
        await client.stream.send_all(client.conn.send_request(produce, 9))
        assert await client.closed()
        nursery.cancel_scope.cancel()
