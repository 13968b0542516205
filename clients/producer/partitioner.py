"""Partitioners: where a record goes when the caller does not say.

- Keyed records: Kafka's Java default — murmur2 of the key bytes (Kafka's seed and mixing), made
  positive by masking the sign bit, modulo the partition count. The same key lands on the same
  partition as with the Java client, librdkafka's `murmur2_random` and kafka-python, so topics
  written by a mix of clients stay consistent per key.
- Keyless records: the sticky partitioner (KIP-480). Records stick to one partition until its
  batch is complete, then move to another partition; this fills batches instead of spreading
  tiny ones across every partition, which is what makes linger.ms batching pay.
"""

from __future__ import annotations

import random

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (org.apache.kafka.common.utils.Utils.murmur2) as a signed 32-bit int."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    n4 = length & ~3
    for i in range(0, n4, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    rest = length & 3
    if rest == 3:
        h ^= data[n4 + 2] << 16
    if rest >= 2:
        h ^= data[n4 + 1] << 8
    if rest >= 1:
        h ^= data[n4]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(n: int) -> int:
    """Java's Utils.toPositive: clear the sign bit (not abs(), which differs for MIN_VALUE)."""
    return n & 0x7FFFFFFF


def partition_for_key(key: bytes, num_partitions: int) -> int:
    return to_positive(murmur2(key)) % num_partitions


class StickyPartitioner:
    """Per-topic sticky choice for keyless records; `on_new_batch` moves on."""

    def __init__(self, rng: random.Random | None = None):
        self._rng = rng or random.Random()
        self._current: dict[str, int] = {}

    def partition(self, topic: str, num_partitions: int, available: list[int] | None = None) -> int:
        p = self._current.get(topic)
        if p is None or p >= num_partitions or (available and p not in available):
            p = self._pick(num_partitions, available, None)
            self._current[topic] = p
        return p

    def on_new_batch(self, topic: str, num_partitions: int, prev: int,
                     available: list[int] | None = None) -> int:
        """The batch for `prev` is complete: choose a different partition (if there is one)."""
        if self._current.get(topic, prev) == prev:
            self._current[topic] = self._pick(num_partitions, available, prev)
        return self._current[topic]

    def _pick(self, n: int, available: list[int] | None, avoid: int | None) -> int:
        # prefer partitions with a known leader, as Kafka's client does
        choices = [p for p in (available or range(n)) if p != avoid and p < n]
        if not choices:
            choices = [p for p in range(n) if p != avoid] or [0]
        return self._rng.choice(choices)
