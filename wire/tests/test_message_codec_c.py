"""The C message codec (wire/messages/_codec.c, programs from program.py) against the Python
reference (runtime._compile): every message at every version, random values, corrupt and
truncated bytes, unknown tagged fields, lenient responses, opaque records, bad values; and a
guard that the extension was really built where a compiler is."""

import os
import functools
import random
import struct
import uuid

import pytest

from wire.errors import DecodeError
from wire.messages import program, runtime
from wire.messages.index_generated import ALL
from wire.messages.runtime import EncodeError
from wire.testing import random_message
from wire.tests.test_fuzz_messages import mutate
from wire.tests.test_speedups import _compiler_present

NAMES = sorted(ALL)
needs_c = pytest.mark.skipif(program.C is None, reason="C extension not built (see the build test)")


def test_extension_built_when_a_compiler_is_present():
    if os.environ.get("RAFTKA_PURE_PYTHON") == "1":
        pytest.skip("RAFTKA_PURE_PYTHON=1 forces the fallback")
    if not _compiler_present():
        pytest.skip("no C compiler: the pure-Python fallback is expected")
    assert program.C is not None, f"the C message codec is unused: {program.UNUSED_BECAUSE}"
    assert program.IMPLEMENTATION == "c"


@functools.lru_cache(maxsize=None)
def _python(cls, version, lenient=False):
    return runtime._compile(cls, version, cls.is_flexible(version), lenient)


def _c(cls, version, lenient=False):
    prog = program.program(cls, version, cls.is_flexible(version), lenient)
    return prog.encode, prog.decode


def _encode(codec, msg, lenient=False, opaque=None):
    """encode_into's outcome: bytes, or the exception class it raises."""
    out = bytearray(b"pre")
    try:
        codec[0](msg, out, opaque)
    except (EncodeError, struct.error, TypeError, AttributeError, UnicodeEncodeError,
            OverflowError):
        return EncodeError
    return bytes(out)


def _decode(codec, data, pos=0):
    """decode_from's outcome: (fields, unknown tags, end), or DecodeError."""
    mv = memoryview(data)
    try:
        obj, end = codec[1](mv, pos)
    except (DecodeError, struct.error, IndexError, UnicodeDecodeError, ValueError,
            OverflowError, RecursionError):
        return DecodeError
    return _fields(obj), end


def _fields(obj):
    """Every field, recursively, with records views as bytes (views compare by content)."""
    if isinstance(obj, runtime.Struct):
        return (type(obj).__name__, tuple((f.name, _fields(getattr(obj, f.name)))
                                          for f in type(obj).FIELDS), obj._unknown_tagged)
    if isinstance(obj, list):
        return [_fields(x) for x in obj]
    if isinstance(obj, memoryview):
        return ("view", bytes(obj))
    return (type(obj).__name__, obj)


@needs_c
def test_every_message_and_version_encodes_and_decodes_alike():
    rng = random.Random(20261128)
    pairs = 0
    for name in NAMES:
        cls = ALL[name]
        for version in range(cls.VALID_VERSIONS[0], cls.VALID_VERSIONS[1] + 1):
            for lenient in (False, True):
                py, c = _python(cls, version, lenient), _c(cls, version, lenient)
                for _ in range(3):
                    msg = random_message(cls, version, rng)
                    data = _encode(py, msg)
                    assert _encode(c, msg) == data, (name, version, lenient)
                    assert isinstance(data, bytes), (name, version)
                    assert _decode(c, data, 3) == _decode(py, data, 3), (name, version)
                    pairs += 1
    assert pairs > 3000


@needs_c
def test_corrupt_and_truncated_bytes_fail_or_decode_alike():
    rng = random.Random(7)
    decoded = failed = 0
    for i in range(15_000):
        cls = ALL[rng.choice(NAMES)]
        version = rng.randint(*cls.VALID_VERSIONS)
        data = mutate(rng, random_message(cls, version, rng).encode(version))
        py = _decode(_python(cls, version), data)
        assert _decode(_c(cls, version), data) == py, (cls.NAME, version, data.hex())
        if py is DecodeError:
            failed += 1
        else:
            decoded += 1
    assert decoded > 1000 and failed > 1000       # both outcomes were compared


def _tagged_struct_and_version():
    """A flexible message version with tagged fields: FetchResponse's PartitionData."""
    cls = ALL["FetchResponse"]
    return cls, 12


@needs_c
def test_unknown_tagged_fields_are_kept_and_written_back_alike():
    cls = ALL["ApiVersionsRequest"]
    version = 3
    msg = cls(client_software_name="x", client_software_version="1")
    base = msg.encode(version)
    # replace the empty tagged block (last byte 0) with tags 5 and 9 the schema does not know,
    # out of order with respect to nothing known: both must keep them raw and write them back
    data = base[:-1] + bytes([2, 5, 2, 0xAB, 0xCD, 9, 0])
    py, c = _python(cls, version), _c(cls, version)
    assert _decode(c, data) == _decode(py, data)
    obj_py, _ = py[1](memoryview(data), 0)
    obj_c, _ = c[1](memoryview(data), 0)
    assert obj_c._unknown_tagged == [(5, b"\xab\xcd"), (9, b"")]
    assert _encode(c, obj_c) == _encode(py, obj_py) == b"pre" + data
    # out-of-order tags are garbage for both
    bad = base[:-1] + bytes([2, 9, 0, 5, 0])
    assert _decode(c, bad) is DecodeError and _decode(py, bad) is DecodeError


@needs_c
def test_known_tagged_fields_at_their_defaults_are_not_written():
    cls, version = _tagged_struct_and_version()
    part = cls.PartitionData(partition_index=1, high_watermark=5, records=b"abc")
    resp = cls(responses=[cls.FetchableTopicResponse(topic="t", partitions=[part])])
    py, c = _python(cls, version), _c(cls, version)
    plain = _encode(py, resp)
    assert _encode(c, resp) == plain
    part.diverging_epoch = cls.EpochEndOffset()             # another instance, all defaults
    part.current_leader = cls.LeaderIdAndEpoch(leader_id=-1, leader_epoch=-1)
    assert _encode(c, resp) == _encode(py, resp) == plain
    part.current_leader = cls.LeaderIdAndEpoch(leader_id=-1, leader_epoch=4)    # one differs
    assert _encode(c, resp) == _encode(py, resp) != plain
    part.diverging_epoch = cls.EpochEndOffset(epoch=3, end_offset=9)
    part.preferred_read_replica = 2
    both = _encode(py, resp)
    assert _encode(c, resp) == both and len(both) > len(_encode(py, cls(responses=[])))
    assert _decode(c, both[3:]) == _decode(py, both[3:])


class _FileRange:
    size = 5


@needs_c
def test_opaque_records_leave_their_place_in_the_chunks():
    cls, version = _tagged_struct_and_version()
    rng = _FileRange()
    part = cls.PartitionData(partition_index=0, records=rng)
    resp = cls(responses=[cls.FetchableTopicResponse(topic="t", partitions=[part])])
    outs = []
    for codec in (_python(cls, version), _c(cls, version)):
        opaque: list = []
        outs.append((_encode(codec, resp, opaque=opaque), opaque))
    assert outs[0] == outs[1] and outs[0][1][0][1] is rng
    for codec in (_python(cls, version), _c(cls, version)):
        assert _encode(codec, resp, opaque=None) is EncodeError     # encode() has no chunks


@needs_c
def test_values_a_version_cannot_carry_fail_alike():
    cls = ALL["FetchRequest"]
    cases = [
        ("max_wait_ms", 2**31), ("max_wait_ms", "1"), ("max_wait_ms", None),
        ("isolation_level", 128), ("isolation_level", -129), ("session_id", 1.5), ("rack_id", None), ("rack_id", b"bytes"),
        ("rack_id", "\udc80"), ("topics", None), ("topics", 7), ("cluster_id", "absent in v12"),
        ("replica_state", None),
    ]
    for version in (4, 12, 15, 16):
        for lenient in (False, True):
            py, c = _python(cls, version, lenient), _c(cls, version, lenient)
            for attr, value in cases:
                msg = cls(topics=[], forgotten_topics_data=[])
                setattr(msg, attr, value)
                assert _encode(c, msg) == _encode(py, msg), (version, lenient, attr, value)


@needs_c
def test_lenient_answers_fill_what_a_version_cannot_carry_alike():
    cls = ALL["MetadataResponse"]
    for version in range(cls.VALID_VERSIONS[0], cls.VALID_VERSIONS[1] + 1):
        topic = cls.MetadataResponseTopic(name=None, topic_id=uuid.UUID(int=7), partitions=None,
                                          error_code=3)
        msg = cls(topics=[topic], brokers=[], cluster_id=None, controller_id=1)
        for lenient in (False, True):
            py, c = _python(cls, version, lenient), _c(cls, version, lenient)
            assert _encode(c, msg) == _encode(py, msg), (version, lenient)


@needs_c
def test_messages_through_the_public_api_use_the_c_codec():
    cls = ALL["FetchRequest"]
    enc, dec = cls._codec(12, True)
    assert enc.__self__ is program.program(cls, 12, True)
    data = cls(topics=[], forgotten_topics_data=[], rack_id="r").encode(12)
    assert cls.decode(data, 12).rack_id == "r"
    with pytest.raises(DecodeError):
        cls.decode(data[:-3], 12)
    with pytest.raises(DecodeError):
        cls.decode_from(data, len(data) + 1, 12)
