"""Sans-IO connections: framing, ordering, ApiVersions fallback, garbage handling."""

import pytest

from wire.connection import (ClientConnection, ConnectionStateError, Request, ServerConnection,
                             UnsupportedRequest, unsupported_api_versions_response)
from wire.errors import DecodeError, ErrorCode
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import ALL

MetadataRequest = ALL["MetadataRequest"]
MetadataResponse = ALL["MetadataResponse"]
ApiVersionsRequest = ALL["ApiVersionsRequest"]
ApiVersionsResponse = ALL["ApiVersionsResponse"]


def pump(client: ClientConnection, server: ServerConnection, data: bytes, step: int = 7):
    """Feed `data` to the server a few bytes at a time, collecting requests."""
    out = []
    for i in range(0, len(data), step):
        server.receive_data(data[i:i + step])
        while (req := server.next_request()) is not None:
            out.append(req)
    return out


def test_request_response_round_trip_in_pieces():
    client, server = ClientConnection(), ServerConnection()
    wire_bytes = b"".join(client.send_request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=n)]), v, "cid")
                          for n, v in (("a", 1), ("b", 9), ("c", 12)))
    reqs = pump(client, server, wire_bytes)
    assert [(r.api_version, r.body.topics[0].name, r.client_id) for r in reqs] == [
        (1, "a", "cid"), (9, "b", "cid"), (12, "c", "cid")]
    for r in reqs:
        resp = MetadataResponse(cluster_id="x", controller_id=r.api_version)
        client.receive_data(server.send_response(r, resp))
    got = []
    while (item := client.next_response()) is not None:
        got.append((item[0].api_version, item[1].controller_id))
    assert got == [(1, 1), (9, 9), (12, 12)]


def test_responses_must_follow_request_order():
    client, server = ClientConnection(), ServerConnection()
    data = client.send_request(MetadataRequest(), 4) + client.send_request(MetadataRequest(), 4)
    first, second = pump(client, server, data)
    with pytest.raises(ConnectionStateError):
        server.send_response(second, MetadataResponse())
    server.send_response(first, MetadataResponse())
    server.send_response(second, MetadataResponse())


def test_no_response_releases_acks0_produce():
    client, server = ClientConnection(), ServerConnection()
    Produce = ALL["ProduceRequest"]
    data = client.send_request(Produce(acks=0), 9, expect_response=False)
    data += client.send_request(MetadataRequest(), 9)
    produce, meta = pump(client, server, data)
    server.no_response(produce)
    client.receive_data(server.send_response(meta, MetadataResponse(controller_id=3)))
    pending, body = client.next_response()
    assert pending.api_key == ApiKey.METADATA and body.controller_id == 3


def test_oversized_frame_refused_before_buffering():
    server = ServerConnection(max_frame_bytes=1024)
    server.receive_data(b"\x7f\xff\xff\xff")          # claims 2 GB
    with pytest.raises(DecodeError):
        server.next_request()


def test_negative_frame_and_unknown_api_key_are_garbage():
    server = ServerConnection()
    server.receive_data(b"\xff\xff\xff\xfe")
    with pytest.raises(DecodeError):
        server.next_request()
    server = ServerConnection()
    server.receive_data(b"\x00\x00\x00\x08" + b"\x7f\x00\x00\x00\x00\x00\x00\x01")
    with pytest.raises(DecodeError):
        server.next_request()


def test_unsupported_api_versions_answered_in_v0_with_full_list():
    supported = {ApiKey.PRODUCE: (3, 9), ApiKey.FETCH: (4, 12), ApiKey.API_VERSIONS: (0, 3)}
    client, server = ClientConnection(), ServerConnection(supported=supported)
    data = client.send_request(ApiVersionsRequest(client_software_name="x",
                                                  client_software_version="1"), 4)
    (req,) = pump(client, server, data)
    assert isinstance(req, UnsupportedRequest) and req.api_version == 4
    client.receive_data(unsupported_api_versions_response(server, req))
    _, body = client.next_response()
    assert body.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert {(k.api_key, k.min_version, k.max_version) for k in body.api_keys} == {
        (0, 3, 9), (1, 4, 12), (18, 0, 3)}


def test_correlation_mismatch_is_garbage():
    client, server = ClientConnection(), ServerConnection()
    (req,) = pump(client, server, client.send_request(MetadataRequest(), 1))
    bogus = Request(req.api_key, req.api_version, req.correlation_id + 5, None, None, None, 0)
    server._unanswered.appendleft(bogus.correlation_id)
    client.receive_data(server.send_response(bogus, MetadataResponse()))
    with pytest.raises(DecodeError):
        client.next_response()


class FileRange:
    def __init__(self, size):
        self.size = size


def test_fetch_response_chunks_carry_file_ranges_with_right_sizes():
    client, server = ClientConnection(), ServerConnection()
    Fetch, FetchResp = ALL["FetchRequest"], ALL["FetchResponse"]
    (req,) = pump(client, server, client.send_request(Fetch(), 12))
    part = FetchResp.PartitionData(partition_index=0, records=FileRange(10))
    resp = FetchResp(responses=[FetchResp.FetchableTopicResponse(topic="t", partitions=[part])])
    chunks = server.send_response_chunks(req, resp)
    assert any(isinstance(c, FileRange) for c in chunks)
    # replace the range by 10 real bytes: the frame must then decode on the client
    wire_bytes = b"".join(c if isinstance(c, bytes) else b"R" * 10 for c in chunks)
    client.receive_data(wire_bytes)
    _, body = client.next_response()
    assert bytes(body.responses[0].partitions[0].records) == b"R" * 10
    with pytest.raises(ConnectionStateError):
        server.send_response(req, resp)
