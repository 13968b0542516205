"""Golden batches from librdkafka (confluent-kafka), captured by a minimal fake broker.

librdkafka builds record batches in C and only hands them to a socket, so the test runs a tiny
broker on 127.0.0.1 that answers ApiVersions, Metadata and Produce (one topic, one partition,
itself the leader) and keeps every Produce request's records. For each codec we then check our
decoder returns exactly the messages produced and our header view agrees with what the producer
configured; for snappy we also prove the batch is *raw* snappy (librdkafka does not use Xerial
framing), which is the case Java-only brokers get wrong.
"""

import socket
import threading
import uuid

import pytest

from wire.connection import (Request, ServerConnection, api_versions_body,
                             unsupported_api_versions_response)
from wire.errors import DecodeError
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import ALL
from wire.records import compression as codecs
from wire.records.batch import (Compression, RecordBatchHeader, build_batch, decode_batch,
                                iter_batches)
from wire.records.compression import XERIAL_MAGIC

confluent_kafka = pytest.importorskip("confluent_kafka")

MetadataResponse = ALL["MetadataResponse"]
ProduceResponse = ALL["ProduceResponse"]
# ApiVersions, Metadata, Produce — plus Fetch and FindCoordinator, never called here: librdkafka
# derives features from the advertised ranges. Without Fetch 4 (10) it falls back to magic-0
# message sets (no zstd) even on Produce v9, and without FindCoordinator v0 it silently sends
# lz4 batches uncompressed. (Found by this test; the broker's ApiVersions must advertise them.)
SUPPORTED = {
    ApiKey.API_VERSIONS: (0, 3), ApiKey.METADATA: (0, 9), ApiKey.PRODUCE: (3, 9),
    ApiKey.FETCH: (4, 12), ApiKey.FIND_COORDINATOR: (0, 4),
}
TOPIC = "golden"
T0 = 1_700_000_000_000
MESSAGES = [(b"k1", b"v1" * 40, [("h", b"x")], T0),
            (None, b"value-without-key " * 30, [], T0 + 5),
            (b"k3", None, [("a", b""), ("b", b"\x00\xff")], T0 + 2),
            (b"", b"\x00" * 500, [], T0 - 7)]


class FakeBroker:
    """One-node broker: ApiVersions, Metadata, Produce; keeps each Produce's record bytes."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.captured: list[bytes] = []
        self.errors: list[BaseException] = []
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._accept, daemon=True)]
        self.threads[0].start()
        self.next_offset = 0

    def close(self):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=5)
        self.sock.close()

    def _accept(self):
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self.threads.append(t)
            t.start()

    def _serve(self, conn: socket.socket):
        conn.settimeout(0.2)
        server = ServerConnection(supported=SUPPORTED)
        with conn:
            while not self.stop.is_set():
                try:
                    data = conn.recv(1 << 16)
                except socket.timeout:
                    continue
                except OSError:
                    return
                if not data:
                    return
                server.receive_data(data)
                try:
                    while (req := server.next_request()) is not None:
                        conn.sendall(self._answer(server, req))
                except (DecodeError, OSError) as exc:
                    self.errors.append(exc)
                    return

    def _answer(self, server: ServerConnection, req) -> bytes:
        if not isinstance(req, Request):                 # ApiVersions at a newer version
            return unsupported_api_versions_response(server, req)
        if req.api_key == ApiKey.API_VERSIONS:
            return server.send_response(req, api_versions_body(SUPPORTED, 0, req.api_version))
        if req.api_key == ApiKey.METADATA:
            return server.send_response(req, self._metadata())
        if req.api_key == ApiKey.PRODUCE:
            return server.send_response(req, self._produce(req.body))
        raise AssertionError(f"unexpected api key {req.api_key}")

    def _metadata(self):
        m = MetadataResponse
        part = m.MetadataResponsePartition(error_code=0, partition_index=0, leader_id=0,
                                           leader_epoch=0, replica_nodes=[0], isr_nodes=[0])
        topic = m.MetadataResponseTopic(error_code=0, name=TOPIC, topic_id=uuid.uuid4(),
                                        partitions=[part])
        broker = m.MetadataResponseBroker(node_id=0, host="127.0.0.1", port=self.port)
        return m(brokers=[broker], cluster_id="golden-cluster", controller_id=0, topics=[topic])

    def _produce(self, body):
        p = ProduceResponse
        topics = []
        for td in body.topic_data:
            parts = []
            for pd in td.partition_data:
                records = bytes(pd.records)
                self.captured.append(records)
                base = self.next_offset
                self.next_offset += sum(h.last_offset_delta + 1 for h in iter_batches(records))
                parts.append(p.PartitionProduceResponse(index=pd.index, error_code=0,
                                                        base_offset=base))
            topics.append(p.TopicProduceResponse(name=td.name, partition_responses=parts))
        return p(responses=topics)


@pytest.fixture
def broker():
    b = FakeBroker()
    yield b
    b.close()


def _produce_all(port: int, codec: str) -> list:
    reports = []
    producer = confluent_kafka.Producer({
        "bootstrap.servers": f"127.0.0.1:{port}", "compression.codec": codec,
        "linger.ms": 50, "acks": 1, "message.timeout.ms": 15000, "socket.timeout.ms": 5000,
        "broker.address.family": "v4", "enable.idempotence": False,
        "batch.num.messages": 100})
    for key, value, headers, ts in MESSAGES:
        producer.produce(TOPIC, value=value, key=key, headers=headers, timestamp=ts,
                         partition=0, on_delivery=lambda err, msg: reports.append(err))
    left = producer.flush(20)
    assert left == 0, "librdkafka did not deliver everything to the fake broker"
    return reports


CODECS = {"none": Compression.NONE, "gzip": Compression.GZIP, "snappy": Compression.SNAPPY,
          "lz4": Compression.LZ4, "zstd": Compression.ZSTD}


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_librdkafka_batches_decode_to_what_was_produced(broker, codec):
    reports = _produce_all(broker.port, codec)
    assert reports == [None] * len(MESSAGES) and not broker.errors
    got = []
    for records in broker.captured:
        for h in iter_batches(records):
            assert h.is_valid() and h.magic == 2
            assert h.compression == CODECS[codec]
            assert (h.producer_id, h.producer_epoch, h.base_sequence) == (-1, -1, -1)
            assert not h.is_transactional and not h.is_control
            body = bytes(h.bytes()[61:])
            if codec == "snappy":
                assert not body.startswith(XERIAL_MAGIC)       # librdkafka sends raw snappy
            if codec == "lz4":
                assert body[:4] == b"\x04\x22\x4d\x18"          # the LZ4 frame format
            got += [(r.key, r.value, r.headers, r.timestamp) for r in decode_batch(h.bytes()).records]
    want = [(k, v, hs, ts) for k, v, hs, ts in MESSAGES]
    # librdkafka sends a null key as null and an empty key as empty: both must survive
    assert got == want


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_our_builder_matches_librdkafka(broker, codec):
    _produce_all(broker.port, codec)
    (theirs,) = broker.captured                     # linger.ms puts all four in one batch
    h = RecordBatchHeader(theirs)
    ours = build_batch(MESSAGES, compression=h.compression,
                       partition_leader_epoch=h.partition_leader_epoch)
    if codec in ("none", "gzip"):                   # librdkafka's gzip has no timestamp in it
        assert ours == theirs
    else:                                           # other codec settings differ: same content
        assert codecs.decompress(h.compression, ours[61:]) == codecs.decompress(
            h.compression, theirs[61:])
        assert ours[:8] == theirs[:8] and ours[12:17] == theirs[12:17] and ours[21:61] == theirs[21:61]
