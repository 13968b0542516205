"""Random and truncated input to every decoder: it decodes or raises DecodeError, nothing else."""

import random

from wire.connection import ServerConnection
from wire.errors import DecodeError
from wire.messages.index_generated import ALL, REQUESTS
from wire.testing import random_message

NAMES = sorted(ALL)


def mutate(rng: random.Random, data: bytes) -> bytes:
    kind = rng.randrange(4)
    if kind == 0 and data:
        return data[:rng.randrange(len(data))]                  # truncated
    if kind == 1 and data:
        b = bytearray(data)
        for _ in range(rng.randint(1, 3)):
            b[rng.randrange(len(b))] = rng.getrandbits(8)        # flipped bytes
        return bytes(b)
    if kind == 2:
        return bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 64)))
    b = bytearray(data)
    b[rng.randrange(len(b) + 1):0] = b"\x7f\xff\xff\xff"          # a huge length somewhere
    return bytes(b)


def test_message_decoders_fuzz():
    rng = random.Random(20261122)
    decoded = 0
    for i in range(12_000):
        cls = ALL[rng.choice(NAMES)]
        version = rng.randint(*cls.VALID_VERSIONS)
        data = mutate(rng, random_message(cls, version, rng).encode(version))
        try:
            cls.decode(data, version, strict=bool(i % 2))
            decoded += 1
        except DecodeError:
            pass
    assert decoded > 0          # some mutations stay decodable: the check is not vacuous


def test_server_connection_fuzz():
    rng = random.Random(99)
    keys = sorted(REQUESTS)
    for i in range(4_000):
        conn = ServerConnection(max_frame_bytes=1 << 16)
        key = rng.choice(keys)
        cls = REQUESTS[key]
        version = rng.randint(*cls.VALID_VERSIONS)
        header = ALL["RequestHeader"](request_api_key=key, request_api_version=version,
                                      correlation_id=i, client_id="f")
        hv = 2 if cls.is_flexible(version) else 1
        payload = header.encode(hv) + random_message(cls, version, rng).encode(version)
        frame = len(payload).to_bytes(4, "big") + payload
        data = mutate(rng, frame) if i % 4 else frame
        try:
            conn.receive_data(data)
            while conn.next_request() is not None:
                pass
        except DecodeError:
            pass


def test_two_gigabyte_claims_do_not_allocate():
    cls = ALL["ProduceRequest"]
    # a records field claiming 2 GB inside a small frame
    body = cls(topic_data=[cls.TopicProduceData(name="t", partition_data=[
        cls.PartitionProduceData(index=0, records=b"x")])]).encode(8)
    evil = body[:-5] + b"\x7f\xff\xff\xff" + body[-1:]
    try:
        cls.decode(evil, 8)
        raise AssertionError("decoded a 2 GB claim")
    except DecodeError:
        pass
