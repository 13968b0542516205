"""The C accelerator (wire/records/_speedups.c) against the pure-Python reference.

Equivalence on hypothesis-generated records in both directions, the same DecodeError (type and
message) on corrupt and truncated input, round trips through build_batch/decode_batch with
either implementation, and a guard that the extension was really built where a compiler is.
"""

import os
import shlex
import shutil
import subprocess
import sys
import sysconfig

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wire.errors import DecodeError
from wire.records import batch, columns
from wire.records.batch import Compression, Record, build_batch, decode_batch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sp = batch.speedups
needs_c = pytest.mark.skipif(sp is None, reason="C extension not built (see the build test)")


def _compiler_present() -> bool:
    cc = sysconfig.get_config_var("CC") or "cc"
    return shutil.which(shlex.split(cc)[0]) is not None or shutil.which("cc") is not None


def test_extension_built_when_a_compiler_is_present():
    """CI must not silently lose the accelerator: with a compiler, `pip install -e .` builds it."""
    if os.environ.get("RAFTKA_PURE_PYTHON") == "1":
        pytest.skip("RAFTKA_PURE_PYTHON=1 forces the fallback")
    if not _compiler_present():
        pytest.skip("no C compiler: the pure-Python fallback is expected")
    assert sp is not None, f"the C accelerator is unused: {batch.SPEEDUPS_UNUSED_BECAUSE}"
    assert batch.IMPLEMENTATION == "c" and columns.IMPLEMENTATION == "c"


def test_env_var_forces_the_pure_python_fallback():
    code = ("from wire.records import batch, columns; "
            "print(batch.IMPLEMENTATION, columns.IMPLEMENTATION, batch.speedups)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ, RAFTKA_PURE_PYTHON="1"), cwd=ROOT, timeout=60)
    assert out.stdout.split() == ["python", "python", "None"], out.stderr


# -- strategies ----------------------------------------------------------------------------------

I64 = st.integers(-2**63, 2**63 - 1)
# small values dominate real records; the edges of every varint width are what break codecs
_edges = st.sampled_from([0, -1, 1, 63, -64, 64, 8191, -8192, 8192, 2**31 - 1, -2**31, 2**31,
                          2**62, 2**63 - 1, -2**63])
DELTA = st.one_of(st.integers(-300, 300), _edges, I64)
I32_DELTA = st.one_of(st.integers(-300, 300), _edges.filter(lambda v: -2**31 <= v < 2**31),
                      st.integers(-2**31, 2**31 - 1))     # the offset delta decodes as a varint
# long values (2- and 3-byte length varints) built cheaply from a repeated byte
MAYBE_BYTES = st.one_of(st.none(), st.binary(max_size=64),
                        st.builds(lambda b, n: b * n, st.binary(min_size=1, max_size=1),
                                  st.integers(64, 20_000)))
HEADER_KEY = st.one_of(st.text(max_size=20), st.binary(max_size=20))
HEADERS = st.lists(st.tuples(HEADER_KEY, st.one_of(st.none(), st.binary(max_size=16))),
                   max_size=12)
RECORD = st.builds(Record, offset_delta=DELTA, timestamp_delta=DELTA, key=MAYBE_BYTES,
                   value=MAYBE_BYTES, headers=HEADERS, attributes=st.integers(-5, 300))
DECODABLE = st.builds(Record, offset_delta=I32_DELTA, timestamp_delta=DELTA, key=MAYBE_BYTES,
                      value=MAYBE_BYTES, headers=HEADERS, attributes=st.integers(-5, 300))
SMALL = st.builds(Record, offset_delta=I32_DELTA, timestamp_delta=DELTA,
                  key=st.one_of(st.none(), st.binary(max_size=200)),
                  value=st.one_of(st.none(), st.binary(max_size=200)), headers=HEADERS)
SETTINGS = settings(max_examples=100, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def _py_encode(records) -> bytes:
    out = bytearray()
    for r in records:
        batch.encode_record_py(out, r)
    return bytes(out)


def _c_encode(records) -> bytes:
    out = bytearray()
    for r in records:
        n = sp.encode_record(out, r.attributes, r.timestamp_delta, r.offset_delta, r.key,
                             r.value, r.headers)
        assert n > 0
    return bytes(out)


def _outcome(fn, *args):
    """The result, or the exception's type and message: what the two sides must agree on."""
    try:
        return "ok", fn(*args)
    except (DecodeError, ValueError, TypeError, OverflowError) as e:
        return type(e), str(e)


def _columns_outcome(decode, body, count, base, base_ts, lat, lo, hi, limit, headers):
    cols = columns._Columns(headers)
    got = _outcome(decode, body, count, base, base_ts, lat, 0 if lat is None else 1, lo, hi,
                   limit, cols)
    if got[0] != "ok":
        return got
    return ("ok", got[1], [bytes(getattr(cols, s)) for s in columns._Columns.__slots__[:-1]],
            cols.headers)


# -- encode --------------------------------------------------------------------------------------

@needs_c
@SETTINGS
@given(records=st.lists(RECORD, max_size=8))
def test_encode_matches_python(records):
    assert _c_encode(records) == _py_encode(records)


@needs_c
def test_encode_appends_and_accepts_bytes_like_and_lists():
    out = bytearray(b"prefix")
    n = sp.encode_record(out, 0, 5, 1, bytearray(b"k"), memoryview(b"value"),
                         [["h", b"x"], (b"raw", None)])
    ref = bytearray(b"prefix")
    batch.encode_record_py(ref, Record(1, 5, b"k", b"value", [("h", b"x"), (b"raw", None)]))
    assert out == ref and n == len(ref) - len(b"prefix")
    f = bytearray()
    assert batch.encode_record_fields(f, 1, 5, b"k", b"value", [("h", b"x"), (b"raw", None)]) \
        == n and f == ref[6:]


@needs_c
@pytest.mark.parametrize("bad", [
    dict(key="text"), dict(value=12), dict(headers=[(None, b"v")]), dict(headers=[("k",)]),
    dict(headers=[("k", b"v", b"w")]), dict(headers=[("k", "str value")]), dict(headers=5),
    dict(headers=[("\ud800", b"v")]),
])
def test_encode_rejects_what_python_rejects(bad):
    fields = dict(key=b"k", value=b"v", headers=[]) | bad
    ref = _outcome(batch.encode_record_py, bytearray(), Record(0, 0, **fields))
    got = _outcome(sp.encode_record, bytearray(), 0, 0, 0, fields["key"], fields["value"],
                   fields["headers"])
    assert ref[0] != "ok" and got[0] != "ok"
    assert issubclass(got[0], (TypeError, ValueError)) and issubclass(ref[0], (TypeError,
                                                                               ValueError))


@needs_c
def test_encode_out_of_int64_is_a_clean_error():
    with pytest.raises(ValueError, match="int64"):
        sp.encode_record(bytearray(), 0, 2**63, 0, b"k", b"v", [])
    with pytest.raises(TypeError):
        sp.encode_record(b"not a bytearray", 0, 0, 0, b"k", b"v", [])


# -- decode --------------------------------------------------------------------------------------

@needs_c
@SETTINGS
@given(records=st.lists(DECODABLE, max_size=8), base=st.integers(0, 2**62),
       base_ts=st.integers(-2**62, 2**62), lat=st.one_of(st.none(), I64))
def test_decode_matches_python_and_round_trips(records, base, base_ts, lat):
    body = _py_encode(records)
    ref = batch.decode_records_py(body, len(records), base, base_ts, lat)
    got = sp.decode_records(body, len(records), base, base_ts, lat)
    assert got == ref
    for r, d in zip(records, got):
        assert d.offset == base + r.offset_delta          # exact even past int64 (Python ints)
        assert d.timestamp == (lat if lat is not None else base_ts + r.timestamp_delta)
        assert (d.key, d.value) == (r.key, r.value)
        assert d.headers == [(k if isinstance(k, str) else k.decode("utf-8", "replace"), v)
                             for k, v in r.headers]
    # and the columnar body decoder agrees with its reference on the same bytes
    assert _columns_outcome(columns._decode_body_c, body, len(records), base, base_ts, lat,
                            0, 2**63 - 1, 2**63 - 1, True) == \
        _columns_outcome(columns._decode_body, body, len(records), base, base_ts, lat,
                         0, 2**63 - 1, 2**63 - 1, True)


def _mutate(data: bytes, flips, cut) -> bytes:
    buf = bytearray(data)
    for pos, x in flips:
        if buf:
            buf[pos % len(buf)] ^= x
    return bytes(buf[:cut] if cut is not None else buf)


@needs_c
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=st.lists(SMALL, min_size=1, max_size=5),
       flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 255)), max_size=4),
       cut=st.one_of(st.none(), st.integers(0, 2000)), count_shift=st.integers(-2, 2),
       lat=st.one_of(st.none(), st.just(77)), lo=st.integers(-3, 3), limit=st.integers(0, 6),
       headers=st.booleans())
def test_corrupt_input_gives_the_same_clean_error(records, flips, cut, count_shift, lat, lo,
                                                   limit, headers):
    body = _mutate(_py_encode(records), flips, cut)
    count = len(records) + count_shift
    base, base_ts = 2**63 - 3, 2**63 - 100      # near the int64 edge: overflow paths too
    ref = _outcome(batch.decode_records_py, body, count, base, base_ts, lat)
    got = _outcome(sp.decode_records, body, count, base, base_ts, lat)
    assert got == ref
    assert ref[0] in ("ok", DecodeError)
    args = (body, count, 0, base_ts, lat, lo, 2**63 - 1, limit, headers)
    cref = _columns_outcome(columns._decode_body, *args)
    cgot = _columns_outcome(columns._decode_body_c, *args)
    assert cgot == cref
    assert cref[0] in ("ok", DecodeError)


@needs_c
@settings(max_examples=300, deadline=None)
@given(body=st.binary(max_size=200), count=st.integers(-1, 40))
def test_random_bytes_never_crash(body, count):
    ref = _outcome(batch.decode_records_py, body, count, 0, 0, None)
    assert _outcome(sp.decode_records, body, count, 0, 0, None) == ref
    args = (body, count, 0, 0, None, 0, 2**63 - 1, 2**63 - 1, True)
    assert _columns_outcome(columns._decode_body_c, *args) == \
        _columns_outcome(columns._decode_body, *args)


def _uvarint(v: int, pad: int = 0) -> bytes:
    """Unsigned LEB128, optionally padded with `pad` extra continuation bytes (non-minimal)."""
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v or pad:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)
        if not v:
            pad -= 1
            while pad > 0:
                out.append(0x80)
                pad -= 1
            out.append(0)
            return bytes(out)


@needs_c
@pytest.mark.parametrize("ts_field", [
    _uvarint(0, pad=9),                  # 10-byte varlong, still 0
    _uvarint(2**64 - 1),                 # largest varlong: -2**63 after zig-zag
    bytes([0xFF] * 9 + [0x02]),          # 2**64 and above: out of range
    bytes([0x80] * 10 + [0x00]),         # 11 bytes: too long
    bytes([0x80] * 5),                   # truncated inside the varlong
    bytes([0x80]),                       # truncated inside the first two bytes
])
@pytest.mark.parametrize("off_field", [
    _uvarint(6, pad=4),                  # 5-byte varint, still 3
    _uvarint(2**32 - 1),                 # largest varint
    _uvarint(2**32),                     # above 32 bits: out of range
    _uvarint(0, pad=5),                  # 6 bytes: too long
])
def test_varint_edges_agree(ts_field, off_field):
    fields = b"\x00" + ts_field + off_field + b"\x01\x01\x00"   # null key, null value, 0 headers
    body = _uvarint(len(fields) * 2) + fields
    ref = _outcome(batch.decode_records_py, body, 1, 0, 1000, None)
    assert _outcome(sp.decode_records, body, 1, 0, 1000, None) == ref


# -- round trips through the batch API with each implementation ----------------------------------

@pytest.fixture(params=["c", "python"])
def implementation(request, monkeypatch):
    if request.param == "python":
        monkeypatch.setattr(batch, "_c_encode", None)
        monkeypatch.setattr(batch, "_c_decode", None)
        monkeypatch.setattr(batch, "_c_encode_records", None)
    elif sp is None:
        pytest.skip("C extension not built")
    return request.param


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(recs=st.lists(st.tuples(MAYBE_BYTES, MAYBE_BYTES, HEADERS, st.integers(0, 2**42)),
                     min_size=1, max_size=20),
       codec=st.sampled_from(list(Compression)), base=st.integers(0, 2**40))
def test_build_and_decode_batch_round_trip(implementation, recs, codec, base):
    data = build_batch(recs, compression=codec, base_offset=base)
    got = decode_batch(data).records
    assert [(r.offset, r.timestamp, r.key, r.value) for r in got] == \
        [(base + i, ts, k, v) for i, (k, v, _, ts) in enumerate(recs)]
    assert [r.headers for r in got] == [
        [(k if isinstance(k, str) else k.decode("utf-8", "replace"), v) for k, v in h]
        for _, _, h, _ in recs]


@needs_c
def test_both_implementations_build_identical_batches(monkeypatch):
    recs = [(b"k%d" % i, b"v" * i, [("h", b"%d" % i)] * (i % 3), 1_700_000_000_000 - i * 7)
            for i in range(200)]
    c_bytes = build_batch(recs, compression=Compression.GZIP, now_ms=5)
    monkeypatch.setattr(batch, "_c_encode", None)
    monkeypatch.setattr(batch, "_c_encode_records", None)
    assert build_batch(recs, compression=Compression.GZIP, now_ms=5) == c_bytes


PENDING = st.lists(st.tuples(
    I32_DELTA, st.one_of(st.none(), st.just(batch._NOW), st.integers(-2**40, 2**40)),
    MAYBE_BYTES, MAYBE_BYTES, HEADERS, st.integers(0, 127), st.integers(-2**40, 2**40)),
    max_size=10)


@needs_c
@SETTINGS
@given(pending=PENDING, base_ts=st.integers(-2**41, 2**41), now=st.integers(0, 2**42))
def test_builder_record_loop_matches_python(pending, base_ts, now):
    ref, out = bytearray(), bytearray()
    assert sp.encode_records(out, pending, base_ts, now, batch._NOW) == \
        batch._encode_records_py(ref, pending, base_ts, now, batch._NOW)
    assert out == ref


@needs_c
def test_builder_record_loop_rejects_bad_items_cleanly():
    with pytest.raises(TypeError):
        sp.encode_records(bytearray(), [(0, None, b"k")], 0, 0, batch._NOW)
    with pytest.raises(ValueError, match="int64"):
        sp.encode_records(bytearray(), [(0, 2**63 - 1, b"k", b"v", [], 0, 0)], -5, 0,
                          batch._NOW)


def test_mixed_records_and_tuples_keep_their_deltas(implementation):
    data = build_batch([Record(offset_delta=5, timestamp_delta=3, key=b"r"),
                        (b"t", b"v", [], 100)], base_timestamp=90)
    assert [(r.offset, r.timestamp, r.key) for r in decode_batch(data).records] == \
        [(5, 93, b"r"), (1, 100, b"t")]


@needs_c
def test_decoders_leave_the_garbage_collector_as_they_found_it():
    import gc
    good = _py_encode([Record(0, 0, b"k", b"v", [("h", b"x")])])
    bad = good[:-1]
    was = gc.isenabled()
    try:
        for enabled in (True, False):
            (gc.enable if enabled else gc.disable)()
            for body in (good, bad):
                _outcome(sp.decode_records, body, 1, 0, 0, None)
                assert gc.isenabled() is enabled
                _columns_outcome(columns._decode_body_c, body, 1, 0, 0, None, 0, 10, 10, True)
                assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()


@needs_c
@pytest.mark.slow
def test_soak_random_mutations_agree():
    """RAFTKA_SOAK=1: many more mutated bodies than the hypothesis tests, both decoders."""
    import random
    rnd = random.Random(int(os.environ.get("RAFTKA_SEED", "7")))

    def field():
        return rnd.choice([None, b"", os.urandom(rnd.randint(0, 300))])
    for _ in range(100_000):
        recs = [Record(rnd.randint(-2**31, 2**31 - 1) if rnd.random() < 0.2 else i,
                       rnd.choice([0, -1, 2**40, rnd.randint(-2**63, 2**63 - 1)]), field(),
                       field(), [(rnd.choice(["k", "é", ""]), field())
                                 for _ in range(rnd.randint(0, 4))])
                for i in range(rnd.randint(1, 6))]
        body = bytearray(_py_encode(recs))
        for _ in range(rnd.randint(0, 4)):
            body[rnd.randrange(len(body))] ^= rnd.randint(1, 255)
        if rnd.random() < 0.3:
            body = body[:rnd.randint(0, len(body))]
        body = bytes(body)
        count = len(recs) + rnd.choice([0, 0, 0, -1, 1])
        lat = rnd.choice([None, 123])
        assert _outcome(sp.decode_records, body, count, 2**63 - 5, 2**63 - 50, lat) == \
            _outcome(batch.decode_records_py, body, count, 2**63 - 5, 2**63 - 50, lat)
        args = (body, count, 5, 2**63 - 50, lat, rnd.randint(-2, 3), 2**63 - 1,
                rnd.randint(0, 7), rnd.random() < 0.5)
        assert _columns_outcome(columns._decode_body_c, *args) == \
            _columns_outcome(columns._decode_body, *args)


@needs_c
def test_limit_and_count_edges_match_the_c_decoder():
    """Deterministic corner cases hypothesis found only now and then: a limit of 0 with a
    count of 0 still checks that the body is empty; a limit reached on the last record still
    checks the body's end; a limit reached earlier leaves the rest unread."""
    from wire.records.batch import build_batch, iter_batches
    h = next(iter_batches(build_batch([(None, None, [], 0), (None, None, [], 0)])))
    body = bytes(h.bytes()[61:])
    for limit in range(4):
        for count in range(-1, 4):
            got = []
            for fn in (columns._decode_body, columns._decode_body_c):
                try:
                    got.append(("ok", fn(body, count, 0, 0, None, 0, 0, 2**63 - 1, limit,
                                         columns._Columns(False))))
                except Exception as exc:  # noqa: BLE001 - compared, not judged
                    got.append((type(exc).__name__, str(exc)))
            assert got[0] == got[1], (limit, count, got)
