"""The default partitioner must put keys where Kafka's Java client does."""

from __future__ import annotations

import random

from hypothesis import given, settings, strategies as st
from kafka.partitioner.default import murmur2 as kp_murmur2

from clients.producer.partitioner import StickyPartitioner, murmur2, partition_for_key, to_positive

# Kafka's own test vectors (clients/src/test/.../utils/UtilsTest.testMurmur2)
JAVA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


def test_java_murmur2_vectors():
    for key, expected in JAVA_VECTORS.items():
        assert murmur2(key) == expected, key


def test_to_positive_like_java():
    assert to_positive(-2147483648) == 0      # Math.abs would overflow here; Kafka masks
    assert to_positive(-1) == 0x7FFFFFFF
    assert partition_for_key(b"foobar", 6) == (-790332482 & 0x7FFFFFFF) % 6


@settings(deadline=None)
@given(st.binary(max_size=64))
def test_matches_kafka_python(key):
    # kafka-python's DefaultPartitioner is a separate implementation of the Java algorithm
    assert murmur2(key) & 0xFFFFFFFF == kp_murmur2(key) & 0xFFFFFFFF


def test_sticky_until_new_batch():
    sp = StickyPartitioner(random.Random(1))
    first = sp.partition("t", 6)
    assert all(sp.partition("t", 6) == first for _ in range(50))
    nxt = sp.on_new_batch("t", 6, first)
    assert nxt != first and sp.partition("t", 6) == nxt
    # a stale notification (another batch completed) does not move it again
    assert sp.on_new_batch("t", 6, first) == nxt
    # only partitions with a leader are chosen when some are known
    sp2 = StickyPartitioner(random.Random(2))
    assert {sp2.on_new_batch("u", 6, sp2.partition("u", 6, [4, 5]), [4, 5]) for _ in range(20)} <= {4, 5}
    one = StickyPartitioner()
    assert one.on_new_batch("v", 1, one.partition("v", 1)) == 0     # nowhere else to go
