"""spark_connector.framing speaks the bytes wire.connection speaks, and stays light to import."""

from __future__ import annotations

import subprocess
import sys

import pytest

from spark_connector.framing import ClientFraming, request_class, response_class
from wire.connection import ClientConnection, ServerConnection, api_versions_body
from wire.errors import DecodeError, ErrorCode
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS, RESPONSES

SUPPORTED = {
    ApiKey.PRODUCE: (3, 11), ApiKey.FETCH: (4, 12), ApiKey.LIST_OFFSETS: (1, 8),
    ApiKey.METADATA: (1, 12), ApiKey.API_VERSIONS: (0, 3),
}


def fetch_request():
    fr = request_class(ApiKey.FETCH)
    return fr(replica_id=-1, max_wait_ms=200, min_bytes=1, max_bytes=1 << 20, isolation_level=1,
              session_id=0, session_epoch=-1, topics=[fr.FetchTopic(topic="t", partitions=[
                  fr.FetchPartition(partition=2, fetch_offset=7, current_leader_epoch=-1,
                                    log_start_offset=-1, partition_max_bytes=1 << 20)])])


@pytest.mark.parametrize("version", [4, 11, 12])      # classic and flexible request headers
def test_request_bytes_match_wire_connection(version):
    ours = ClientFraming().encode_request(fetch_request(), version, "spark")
    theirs = ClientConnection().send_request(fetch_request(), version, "spark")
    assert ours == theirs
    assert request_class(ApiKey.FETCH) is REQUESTS[ApiKey.FETCH] and response_class(ApiKey.FETCH) is RESPONSES[ApiKey.FETCH]


@pytest.mark.parametrize("version", [4, 12])
def test_decodes_what_a_server_connection_sends(version):
    framing = ClientFraming()
    server = ServerConnection(SUPPORTED)
    server.receive_data(framing.encode_request(fetch_request(), version, "spark"))
    req = server.next_request()
    fr = RESPONSES[ApiKey.FETCH]
    body = fr(responses=[fr.FetchableTopicResponse(topic="t", partitions=[fr.PartitionData(
        partition_index=2, high_watermark=9, last_stable_offset=9, log_start_offset=0,
        records=b"")])])
    frame = server.send_response(req, body)
    assert framing.frame_size(frame[:4]) == len(frame) - 4
    got = framing.decode_response(memoryview(frame)[4:])
    assert got.responses[0].partitions[0].high_watermark == 9


def test_api_versions_fallback_to_v0_is_read():
    framing = ClientFraming()
    server = ServerConnection(SUPPORTED)
    av = request_class(ApiKey.API_VERSIONS)
    server.receive_data(framing.encode_request(av(client_software_name="x",
                                                  client_software_version="1"), 3, "spark"))
    req = server.next_request()
    frame = server.send_response(req, api_versions_body(SUPPORTED, version=3))
    got = framing.decode_response(memoryview(frame)[4:])
    assert got.error_code == 0 and {k.api_key for k in got.api_keys} == set(SUPPORTED)
    # a broker that does not speak v3 answers in v0 with UNSUPPORTED_VERSION and its list
    framing.encode_request(av(), 3, "spark")
    cid = framing._pending[2]
    v0 = RESPONSES[ApiKey.API_VERSIONS](error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=[
        RESPONSES[ApiKey.API_VERSIONS].ApiVersion(api_key=ApiKey.API_VERSIONS, min_version=0, max_version=2)])
    payload = bytearray(cid.to_bytes(4, "big"))
    v0.encode_into(payload, 0)
    got = framing.decode_response(memoryview(bytes(payload)))
    assert got.error_code == ErrorCode.UNSUPPORTED_VERSION and got.api_keys[0].max_version == 2


def test_bad_frames_are_decode_errors():
    framing = ClientFraming(max_frame_bytes=1000)
    with pytest.raises(DecodeError):
        framing.frame_size((5000).to_bytes(4, "big"))
    with pytest.raises(DecodeError):
        framing.frame_size((-1).to_bytes(4, "big", signed=True))
    with pytest.raises(DecodeError, match="no request in flight"):
        framing.decode_response(b"\0\0\0\1")
    framing.encode_request(fetch_request(), 4, "spark")
    with pytest.raises(DecodeError, match="correlation id"):
        framing.decode_response(b"\0\0\0\x63" + b"\0" * 20)


def test_one_request_at_a_time():
    framing = ClientFraming()
    framing.encode_request(fetch_request(), 4, "spark")
    with pytest.raises(RuntimeError):
        framing.encode_request(fetch_request(), 4, "spark")


def test_source_import_leaves_the_message_index_alone():
    """Spark starts a fresh planner process per streaming query: importing the source must not
    load every generated message class (~0.4 s) nor the executor's record codecs."""
    pytest.importorskip("pyspark")
    code = ("import sys, spark_connector.source; "
            "print('wire.messages.index_generated' in sys.modules, "
            "'spark_connector.fetcher' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120).stdout.split()
    assert out == ["False", "False"]
