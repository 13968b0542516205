"""Fetch answer parsing: codecs, offsets before the fetch offset, partial tails, control
batches and read_committed filtering of aborted transactions; config parsing."""

from __future__ import annotations

import dataclasses

import pytest

from clients.consumer import parse_config
from clients.consumer.fetcher import READ_COMMITTED, READ_UNCOMMITTED, parse_partition
from wire.records.batch import Compression, build_batch, build_end_txn_marker


@dataclasses.dataclass
class Aborted:
    producer_id: int
    first_offset: int


def batch(base, n, codec=Compression.NONE, pid=-1, txn=False, prefix="v"):
    return build_batch([(f"k{base + i}".encode(), f"{prefix}{base + i}".encode(), [("h", b"x")],
                         1000 + i) for i in range(n)], base_offset=base, compression=codec,
                       producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                       base_sequence=0 if pid >= 0 else -1, is_transactional=txn)


@pytest.mark.parametrize("codec", list(Compression))
def test_every_codec_decodes_in_order(codec):
    data = batch(0, 5, codec) + batch(5, 5, codec)
    got = parse_partition("t", 0, data, 0)
    assert [r.offset for r in got.records] == list(range(10))
    assert [r.value for r in got.records] == [f"v{i}".encode() for i in range(10)]
    assert got.records[0].headers == [("h", b"x")] and got.records[0].key == b"k0"
    assert got.next_offset == 10


def test_records_before_fetch_offset_are_dropped_and_partial_tail_ignored():
    data = batch(0, 5, Compression.GZIP) + batch(5, 5)
    got = parse_partition("t", 0, data + batch(10, 3)[:40], 3)
    assert [r.offset for r in got.records] == [3, 4, 5, 6, 7, 8, 9]
    assert got.next_offset == 10
    assert parse_partition("t", 0, None, 7).records == []


def test_read_committed_skips_aborted_and_markers():
    data = (batch(0, 2, pid=7, txn=True, prefix="aborted")
            + build_end_txn_marker(False, 7, 0, 0, base_offset=2)
            + batch(3, 2, pid=8, txn=True, prefix="committed")
            + build_end_txn_marker(True, 8, 0, 0, base_offset=5)
            + batch(6, 1))
    committed = parse_partition("t", 0, data, 0, READ_COMMITTED, [Aborted(7, 0)])
    assert [r.offset for r in committed.records] == [3, 4, 6]
    assert committed.next_offset == 7
    uncommitted = parse_partition("t", 0, data, 0, READ_UNCOMMITTED, [])
    assert [r.offset for r in uncommitted.records] == [0, 1, 3, 4, 6]   # markers never shown
    only_markers = parse_partition("t", 0, build_end_txn_marker(True, 8, 0, 0, base_offset=5),
                                   5, READ_COMMITTED, [])
    assert only_markers.records == [] and only_markers.next_offset == 6


def test_parse_config():
    cfg = parse_config({"enable.auto.commit": "false", "max.poll.records": "7"},
                       {"group_id": "g"})
    assert cfg["enable.auto.commit"] is False and cfg["max.poll.records"] == 7
    assert cfg["group.id"] == "g"
    for bad in ({"auto.offset.reset": "smallest"}, {"isolation.level": "x"},
                {"max.poll.records": "many"}, {"enable.auto.commit": "yes"}):
        with pytest.raises(ValueError):
            parse_config(bad, {})


async def test_a_poll_that_outlives_a_close_fetches_nothing():
    """Another task closes the consumer while a poll awaits the group: the poll returns what
    was buffered instead of starting a fetch on the closed consumer (it raised AttributeError
    on its released nursery, seen with cooperative members leaving during a rebalance)."""
    from clients.cluster import TopicPartition
    from clients.consumer import Consumer
    c = Consumer("127.0.0.1:1", {"group.id": "g"})

    async def no_broker_needed(*args, **kwargs):
        return None
    c.cluster.start = no_broker_needed                 # no broker: nothing here asks one
    c.cluster.aclose = no_broker_needed
    await c.start()
    c._assigned = [TopicPartition("t", 0)]
    c._positions = {TopicPartition("t", 0): 0}

    async def closed_meanwhile():
        await c.close(commit=False)
    c._ensure_group = closed_meanwhile
    assert await c.poll(100) == []
    assert c.closed
