"""Pure planning, option parsing and partitioning: no Spark session, no cluster."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_connector import offsets as off
from spark_connector.kafka_io import ClientConfig, parse_jaas
from spark_connector.options import sink_options, source_options

BOOT = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


# -- offsets JSON ---------------------------------------------------------------------------

def test_offsets_json_is_sparks_shape_and_round_trips():
    o = {("b", 1): 7, ("a", 10): 3, ("a", 2): 5}
    assert off.to_json_dict(o) == {"a": {"2": 5, "10": 3}, "b": {"1": 7}}
    assert off.from_json_dict(off.to_json_dict(o)) == o
    assert off.parse_offsets_json('{"t":{"0":23,"1":-2,"2":-1}}', "startingOffsets") == {
        ("t", 0): 23, ("t", 1): off.EARLIEST, ("t", 2): off.LATEST}


@pytest.mark.parametrize("text", ['[1]', '{"t": 3}', '{"t": {"x": 1}}', '{"t": {"0": "1"}}',
                                  '{"t": {"0": true}}', 'nope'])
def test_bad_offsets_json_names_the_option(text):
    with pytest.raises(ValueError, match="startingOffsets"):
        off.parse_offsets_json(text, "startingOffsets")


def test_assign_json():
    assert off.parse_assign_json('{"b":[1],"a":[2,0]}') == [("a", 0), ("a", 2), ("b", 1)]
    for bad in ('{}', '{"a": [-1]}', '{"a": 1}', '[]'):
        with pytest.raises(ValueError, match="assign"):
            off.parse_assign_json(bad)


# -- ranges and splitting -------------------------------------------------------------------

def test_one_range_per_partition_with_data():
    ranges = off.plan_ranges({("t", 0): 0, ("t", 1): 5, ("t", 2): 9},
                             {("t", 0): 10, ("t", 1): 5, ("t", 2): 12})
    assert ranges == [off.OffsetRange("t", 0, 0, 10), off.OffsetRange("t", 2, 9, 12)]


def test_min_partitions_splits_big_ranges_into_at_least_that_many():
    start = {("t", p): 0 for p in range(3)}
    end = {("t", 0): 1000, ("t", 1): 1000, ("t", 2): 1000}
    ranges = off.plan_ranges(start, end, min_partitions=8)
    assert len(ranges) >= 8
    assert sum(r.size for r in ranges) == 3000
    # uneven: the big partition gets most of the pieces, the tiny one stays whole
    ranges = off.plan_ranges(start, {("t", 0): 10_000, ("t", 1): 10, ("t", 2): 1},
                             min_partitions=8)
    assert len(ranges) >= 8
    assert [r for r in ranges if r.partition == 2] == [off.OffsetRange("t", 2, 0, 1)]


def test_max_records_per_partition():
    ranges = off.plan_ranges({("t", 0): 100}, {("t", 0): 1100}, max_records_per_partition=300)
    assert [(r.from_offset, r.until_offset) for r in ranges] == [
        (100, 350), (350, 600), (600, 850), (850, 1100)]


@given(st.dictionaries(st.integers(0, 20), st.tuples(st.integers(0, 1000), st.integers(0, 5000)),
                       min_size=1, max_size=8),
       st.one_of(st.none(), st.integers(1, 50)), st.one_of(st.none(), st.integers(1, 2000)))
def test_split_ranges_tile_the_input_exactly(parts, min_p, max_r):
    start = {("t", p): a for p, (a, _) in parts.items()}
    end = {("t", p): a + n for p, (a, n) in parts.items()}
    ranges = off.plan_ranges(start, end, min_p, max_r)
    for tp in start:
        mine = sorted((r for r in ranges if (r.topic, r.partition) == tp),
                      key=lambda r: r.from_offset)
        covered = [o for r in mine for o in range(r.from_offset, r.until_offset)]
        assert covered == list(range(start[tp], end[tp]))
        assert all(r.size > 0 for r in mine)
    if max_r:
        assert all(r.size <= max_r for r in ranges)
    total = sum(end[tp] - start[tp] for tp in start)
    if min_p and total >= min_p:
        assert len(ranges) >= min_p


# -- rate limits ----------------------------------------------------------------------------

def test_rate_limit_shares_in_proportion_and_never_exceeds_the_cap():
    start = {("t", 0): 0, ("t", 1): 100, ("t", 2): 0}
    latest = {("t", 0): 1000, ("t", 1): 200, ("t", 2): 0}
    end = off.rate_limit(start, latest, 110)
    assert end == {("t", 0): 100, ("t", 1): 110, ("t", 2): 0}
    assert off.rate_limit(start, latest, 10_000) == latest


@given(st.lists(st.tuples(st.integers(0, 100), st.integers(0, 500)), min_size=1, max_size=10),
       st.integers(1, 2000))
def test_rate_limit_properties(parts, cap):
    start = {("t", i): a for i, (a, _) in enumerate(parts)}
    latest = {("t", i): a + n for i, (a, n) in enumerate(parts)}
    end = off.rate_limit(start, latest, cap)
    taken = sum(end[tp] - start[tp] for tp in start)
    assert taken == min(cap, sum(n for _, n in parts))
    assert all(start[tp] <= end[tp] <= latest[tp] for tp in start)


# -- data loss ------------------------------------------------------------------------------

def test_reconcile_finds_every_kind_of_loss():
    start = {("t", 0): 50, ("t", 1): 10, ("gone", 0): 3, ("t", 3): 900}
    earliest = {("t", 0): 0, ("t", 1): 40, ("t", 2): 7, ("t", 3): 0}
    latest = {("t", 0): 100, ("t", 1): 60, ("t", 2): 9, ("t", 3): 20}
    rec = off.reconcile(start, earliest, latest)
    assert rec.start == {("t", 0): 50, ("t", 1): 40, ("t", 2): 7, ("t", 3): 0}
    text = " | ".join(rec.losses)
    assert "gone-0 is gone" in text
    assert "t-1: offsets 10..39 were deleted" in text
    assert "added partition t-2 starts from 7" in text
    assert "past the latest offset 20" in text
    ok = off.reconcile({("t", 0): 5}, {("t", 0): 0, ("t", 1): 0}, {("t", 0): 9, ("t", 1): 4})
    assert ok.losses == [] and ok.start == {("t", 0): 5, ("t", 1): 0}


def test_durations():
    assert off.parse_duration_ms("15m") == 900_000
    assert off.parse_duration_ms("30s") == 30_000
    assert off.parse_duration_ms("500ms") == 500
    assert off.parse_duration_ms("2 min") == 120_000
    assert off.parse_duration_ms("1h") == 3_600_000
    assert off.parse_duration_ms("250") == 250
    with pytest.raises(ValueError):
        off.parse_duration_ms("soon")


# -- options --------------------------------------------------------------------------------

def test_source_options_defaults_follow_spark():
    s = source_options({**BOOT, "subscribe": "a, b"}, streaming=True)
    assert s.subscription.topics == ("a", "b")
    assert s.starting.kind == "latest" and s.fail_on_data_loss and not s.include_headers
    b = source_options({**BOOT, "subscribe": "a"}, streaming=False)
    assert b.starting.kind == "earliest" and b.ending.kind == "latest"


def test_source_options_are_case_insensitive_and_typed():
    s = source_options({**BOOT, "SUBSCRIBEPATTERN": "top.*", "maxOffsetsPerTrigger": "100",
                        "minoffsetspertrigger": "10", "maxTriggerDelay": "5s",
                        "includeHeaders": "TRUE", "failOnDataLoss": "false",
                        "kafka.isolation.level": "read_committed",
                        "startingOffsetsByTimestamp": '{"t":{"0":1000}}'}, streaming=True)
    assert s.subscription.matches("topic1") and not s.subscription.matches("xtopic")
    assert (s.max_offsets_per_trigger, s.min_offsets_per_trigger, s.max_trigger_delay_ms) == \
        (100, 10, 5000)
    assert s.include_headers and not s.fail_on_data_loss and s.isolation_level == 1
    assert s.starting.kind == "timestamps" and s.starting.offset_map == {("t", 0): 1000}


@pytest.mark.parametrize("opts,streaming,match", [
    ({}, True, "exactly one of"),
    ({"subscribe": "a", "assign": '{"a":[0]}'}, True, "exactly one of"),
    ({"subscribePattern": "("}, True, "not a valid regex"),
    ({"subscribe": "a", "startingOffsets": "latest"}, False, "cannot be 'latest'"),
    ({"subscribe": "a", "endingOffsets": "earliest"}, False, "cannot be 'earliest'"),
    ({"subscribe": "a", "endingOffsets": '{"a":{"0":-2}}'}, False, "-2"),
    ({"subscribe": "a", "startingOffsets": '{"a":{"0":-1}}'}, False, "-1"),
    ({"subscribe": "a", "startingOffsets": '{"a":{"0":-5}}'}, True, "invalid"),
    ({"subscribe": "a", "endingOffsets": "latest"}, True, "batch queries only"),
    ({"subscribe": "a", "maxOffsetsPerTrigger": "0"}, True, "maxOffsetsPerTrigger"),
    ({"subscribe": "a", "maxOffsetsPerTrigger": "x"}, True, "integer"),
    ({"subscribe": "a", "maxOffsetsPerTrigger": "5", "minOffsetsPerTrigger": "9"}, True,
     "must not be above"),
    ({"subscribe": "a", "failOnDataLoss": "yes"}, True, "'true' or 'false'"),
    ({"subscribe": "a", "kafka.auto.offset.reset": "earliest"}, True, "startingOffsets"),
    ({"subscribe": "a", "kafka.value.deserializer": "x"}, True, "not supported"),
    ({"subscribe": "a", "startingOffsetsByTimestampStrategy": "x"}, True, "'error' or 'latest'"),
    ({"subscribe": "a", "kafka.security.protocol": "SASL_SSL"}, True, "SASL needs"),
])
def test_bad_source_options_fail_with_a_clear_message(opts, streaming, match):
    with pytest.raises(ValueError, match=match):
        source_options({**BOOT, **opts}, streaming=streaming)


def test_missing_bootstrap_servers():
    with pytest.raises(ValueError, match="kafka.bootstrap.servers"):
        source_options({"subscribe": "a"}, streaming=True)


def test_sink_options():
    s = sink_options({**BOOT, "topic": "out", "kafka.acks": "1", "kafka.compression.type": "lz4"})
    assert (s.topic, s.acks, s.compression) == ("out", 1, 3)
    assert sink_options(BOOT).acks == -1
    with pytest.raises(ValueError, match="kafka.acks"):
        sink_options({**BOOT, "kafka.acks": "2"})
    with pytest.raises(ValueError, match="not supported"):
        sink_options({**BOOT, "kafka.key.serializer": "x"})


def test_security_settings_pass_through():
    cfg = ClientConfig.from_kafka_params({
        "bootstrap.servers": "h:1", "security.protocol": "sasl_ssl", "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required '
                            'username="alice" password="s3 cret";',
        "ssl.ca.location": "/ca.pem", "ssl.endpoint.identification.algorithm": ""})
    assert (cfg.security_protocol, cfg.sasl_username, cfg.sasl_password) == \
        ("SASL_SSL", "alice", "s3 cret")
    assert cfg.ssl_cafile == "/ca.pem" and not cfg.ssl_check_hostname
    assert parse_jaas("x required username=bob password=pw;") == ("bob", "pw")
    with pytest.raises(ValueError, match="not supported"):
        ClientConfig.from_kafka_params({"bootstrap.servers": "h:1",
                                        "security.protocol": "SASL_PLAINTEXT",
                                        "sasl.mechanism": "GSSAPI"})


# -- partitioner ----------------------------------------------------------------------------

def test_murmur2_matches_the_java_client():
    from spark_connector.sink import murmur2

    def signed(h):
        return h - (1 << 32) if h & 0x80000000 else h
    # vectors from Kafka's UtilsTest.testMurmur2
    cases = {b"21": -973932308, b"foobar": -790332482, b"a-little-bit-long-string": -985981536,
             b"a-little-bit-longer-string": -1486304829,
             b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
             bytes([ord("a"), ord("b"), ord("c")]): 479470107}
    for data, want in cases.items():
        assert signed(murmur2(data)) == want, data


def test_key_partitions_match_murmur2_per_key():
    """The column-at-once partitioner (numpy) agrees with the per-key one: mixed lengths
    (every remainder mod 4, the empty key), null keys, string keys, sliced arrays."""
    pa = pytest.importorskip("pyarrow")
    pytest.importorskip("numpy")
    import random

    from spark_connector.sink import default_partition, key_partitions
    rng = random.Random(7)
    keys = [bytes(rng.getrandbits(8) for _ in range(rng.randrange(0, 40))) for _ in range(3000)]
    keys += [b"21", b"foobar", b"", None, b"a-little-bit-long-string"]
    for n in (1, 3, 7, 64):
        want = [None if k is None else default_partition(k, n) for k in keys]
        assert key_partitions(pa.array(keys, pa.binary()), n) == want
        assert key_partitions(pa.array(keys, pa.binary()).slice(1000, 77), n) == want[1000:1077]
    words = ["k%d" % i for i in range(500)] + ["ünïcode", "日本"]
    assert key_partitions(pa.array(words, pa.string()), 5) == \
        [default_partition(w.encode(), 5) for w in words]


class _RecordingClient:
    def __init__(self, partitions):
        self.partitions, self.sent = partitions, []

    def topic_partitions(self, topics):
        return {t: list(range(self.partitions)) for t in topics}

    def produce(self, batches, acks=-1, timeout_ms=30000):
        self.sent.append(batches)
        return {tp: 0 for tp in batches}


@pytest.mark.parametrize("key_type", ["binary", "string"])
def test_topic_writer_fast_path_keeps_order_and_partitioner(key_type):
    """One topic, keyed rows, no headers: records land on Kafka's partition for their key, in
    row order per partition, null keys on the sticky partition; nothing is lost or doubled."""
    pa = pytest.importorskip("pyarrow")
    from spark_connector.options import sink_options
    from spark_connector.sink import TopicWriter, default_partition
    from wire.records.batch import decode_batch, iter_batches

    w = TopicWriter(sink_options({"kafka.bootstrap.servers": "h:1", "topic": "t",
                                  "kafka.batch.size": "2000"}))
    w.client = _RecordingClient(4)
    keys = [None if i % 50 == 0 else f"key-{i}" for i in range(1000)]
    vals = [f"v{i}".encode() for i in range(1000)]
    typ = pa.binary() if key_type == "binary" else pa.string()
    arr_keys = pa.array([k if k is None or key_type == "string" else k.encode() for k in keys],
                        typ)
    batch = pa.RecordBatch.from_arrays([arr_keys, pa.array(vals, pa.binary())],
                                       names=["key", "value"])
    w.write_arrow(batch.slice(0, 600))
    w.write_arrow(batch.slice(600))
    w.flush()
    got: dict[int, list] = {}
    for sent in w.client.sent:
        for (_, p), data in sent.items():
            for h in iter_batches(data):
                got.setdefault(p, []).extend(
                    (r.key, r.value) for r in decode_batch(data, h.pos).records)
    assert sum(len(v) for v in got.values()) == 1000 == w.records
    for p, recs in got.items():
        values = [v for _, v in recs]
        assert values == sorted(values, key=lambda v: int(v[1:]))       # row order kept
        assert all(k is None or default_partition(k, 4) == p for k, _ in recs)
    assert {v for recs in got.values() for _, v in recs} == set(vals)
