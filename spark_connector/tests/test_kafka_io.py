"""kafka_io against a scripted in-process broker on 127.0.0.1 (what the real broker cannot show
yet: SASL PLAIN; and what is hard to provoke on demand: a leader move mid-request)."""

from __future__ import annotations

import socket
import threading

import pytest

from spark_connector import kafka_io
from wire.connection import ServerConnection, api_versions_body
from wire.errors import ErrorCode, KafkaError
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import RESPONSES

SUPPORTED = {
    ApiKey.PRODUCE: (3, 11), ApiKey.FETCH: (4, 12), ApiKey.LIST_OFFSETS: (1, 8),
    ApiKey.METADATA: (1, 12), ApiKey.SASL_HANDSHAKE: (0, 1), ApiKey.API_VERSIONS: (0, 3),
    ApiKey.SASL_AUTHENTICATE: (0, 2),
}


class ScriptedBroker:
    """Answers each request with `handler(request)`; records every request it saw."""

    def __init__(self, handler):
        self.handler = handler
        self.seen = []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._client, args=(conn,), daemon=True).start()

    def _client(self, conn):
        sc = ServerConnection(SUPPORTED)
        with conn:
            while True:
                data = conn.recv(65536)
                if not data:
                    return
                sc.receive_data(data)
                while (req := sc.next_request()) is not None:
                    self.seen.append((req.api_key, req.body))
                    if req.api_key == ApiKey.API_VERSIONS:
                        body = api_versions_body(SUPPORTED, version=req.api_version)
                    else:
                        body = self.handler(req, self)
                    conn.sendall(sc.send_response(req, body))

    def close(self):
        self.sock.close()


def metadata(port, leader_id=1, error=0):
    md = RESPONSES[ApiKey.METADATA]
    return md(brokers=[md.MetadataResponseBroker(node_id=1, host="127.0.0.1", port=port)],
              cluster_id="c", controller_id=1, topics=[md.MetadataResponseTopic(
                  error_code=0, name="t", partitions=[md.MetadataResponsePartition(
                      error_code=error, partition_index=0, leader_id=leader_id, leader_epoch=3,
                      replica_nodes=[1], isr_nodes=[1])])])


def test_sasl_plain_sends_the_credentials_before_anything_else():
    def handler(req, broker):
        if req.api_key == ApiKey.SASL_HANDSHAKE:
            return RESPONSES[ApiKey.SASL_HANDSHAKE](error_code=0, mechanisms=["PLAIN"])
        if req.api_key == ApiKey.SASL_AUTHENTICATE:
            ok = bytes(req.body.auth_bytes) == b"\0alice\0secret"
            return RESPONSES[ApiKey.SASL_AUTHENTICATE](error_code=0 if ok else ErrorCode.SASL_AUTHENTICATION_FAILED,
                                 error_message=None if ok else "bad password", auth_bytes=b"")
        return metadata(broker.port)

    b = ScriptedBroker(handler)
    try:
        cfg = kafka_io.ClientConfig.from_kafka_params({
            "bootstrap.servers": f"127.0.0.1:{b.port}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.jaas.config": 'x.PlainLoginModule required username="alice" password="secret";'})
        c = kafka_io.KafkaClient(cfg)
        assert c.topic_partitions(["t"]) == {"t": [0]}
        assert [k for k, _ in b.seen] == [18, 17, 36, 3]
        bad = kafka_io.KafkaClient(kafka_io.ClientConfig(
            f"127.0.0.1:{b.port}", security_protocol="SASL_PLAINTEXT", sasl_username="alice",
            sasl_password="nope", request_timeout_ms=2000))
        with pytest.raises(KafkaError, match="SASL_AUTHENTICATION_FAILED"):
            bad.topic_partitions(["t"])
        c.close()
    finally:
        b.close()


def test_not_leader_refreshes_metadata_and_retries():
    answers = {"list": 0}

    def handler(req, broker):
        if req.api_key == ApiKey.METADATA:
            return metadata(broker.port)
        lo = RESPONSES[ApiKey.LIST_OFFSETS]
        answers["list"] += 1
        err = ErrorCode.NOT_LEADER_OR_FOLLOWER if answers["list"] == 1 else 0
        return lo(topics=[lo.ListOffsetsTopicResponse(name="t", partitions=[
            lo.ListOffsetsPartitionResponse(partition_index=0, error_code=err, timestamp=-1,
                                            offset=42, leader_epoch=3)])])

    b = ScriptedBroker(handler)
    try:
        c = kafka_io.KafkaClient(kafka_io.ClientConfig(f"127.0.0.1:{b.port}",
                                                       retry_backoff_ms=10))
        assert c.list_offsets({("t", 0): kafka_io.LATEST}) == {("t", 0): 42}
        assert [k for k, _ in b.seen].count(3) == 2          # metadata fetched again
    finally:
        b.close()


def test_unreachable_broker_is_a_clear_error():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    c = kafka_io.KafkaClient(kafka_io.ClientConfig(f"127.0.0.1:{port}", request_timeout_ms=500,
                                                   retry_backoff_ms=50))
    with pytest.raises(kafka_io.ConnectionClosed, match="cannot reach"):
        c.topic_partitions(["t"])


def test_bad_bootstrap_servers():
    with pytest.raises(ValueError, match="host:port"):
        kafka_io.KafkaClient(kafka_io.ClientConfig("nohostport"))
