"""The stream reader's admission control and data-loss decisions, with a fake planner: no Spark
session and no cluster (pyspark is imported only for its ReadLimit classes)."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")

from pyspark.sql.streaming.datasource import (ReadAllAvailable, ReadMaxRows,  # noqa: E402
                                              ReadMinRows)

from spark_connector import offsets as off  # noqa: E402
from spark_connector.options import source_options  # noqa: E402
from spark_connector.source import RaftkaStreamReader  # noqa: E402


class FakePlanner:
    def __init__(self, earliest: dict, latest: dict):
        self.earliest, self.latest = earliest, latest

    def current_partitions(self):
        return set(self.latest)

    def list_offsets(self, tps, what):
        src = self.earliest if what == -2 else self.latest
        return {tp: src[tp] for tp in tps}

    def resolve(self, spec, tps, start):
        return self.list_offsets(tps, -2 if spec.kind == "earliest" else -1)


def reader(planner, **opts) -> RaftkaStreamReader:
    r = RaftkaStreamReader(source_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t",
                                           **opts}, streaming=True))
    r._planner = planner
    return r


def j(**parts):
    return {"t": {k.lstrip("p"): v for k, v in parts.items()}}


def test_initial_offset_and_read_all():
    p = FakePlanner({("t", 0): 0, ("t", 1): 5}, {("t", 0): 100, ("t", 1): 50})
    r = reader(p, startingOffsets="earliest")
    start = r.initialOffset()
    assert start == j(p0=0, p1=5)
    assert r.getDefaultReadLimit() == ReadAllAvailable()
    assert r.latestOffset(start, ReadAllAvailable()) == j(p0=100, p1=50)
    parts = r.partitions(start, j(p0=100, p1=50))
    assert [(x.partition, x.from_offset, x.until_offset) for x in parts] == [(0, 0, 100),
                                                                             (1, 5, 50)]
    assert r.partitions(start, start) == []


def test_max_offsets_per_trigger_and_read_all_override():
    p = FakePlanner({("t", 0): 0, ("t", 1): 0}, {("t", 0): 300, ("t", 1): 100})
    r = reader(p, maxOffsetsPerTrigger="100")
    assert r.getDefaultReadLimit() == ReadMaxRows(100)
    assert r.latestOffset(j(p0=0, p1=0), ReadMaxRows(100)) == j(p0=75, p1=25)
    # the engine may ask for everything (e.g. Trigger.Once): the option is ignored then
    assert r.latestOffset(j(p0=0, p1=0), ReadAllAvailable()) == j(p0=300, p1=100)


def test_min_offsets_per_trigger_waits_until_max_trigger_delay():
    p = FakePlanner({("t", 0): 0}, {("t", 0): 10})
    r = reader(p, minOffsetsPerTrigger="50", maxTriggerDelay="1h")
    assert r.getDefaultReadLimit() == ReadMinRows(50)
    # the first trigger runs (as Spark's: no previous trigger), later ones wait for 50 records
    assert r.latestOffset(j(p0=0), ReadMinRows(50)) == j(p0=10)
    assert r.latestOffset(j(p0=10), ReadMinRows(50)) == j(p0=10)
    p.latest[("t", 0)] = 40
    assert r.latestOffset(j(p0=10), ReadMinRows(50)) == j(p0=10)      # 30 < 50: wait
    p.latest[("t", 0)] = 60
    assert r.latestOffset(j(p0=10), ReadMinRows(50)) == j(p0=60)      # 50: go
    p.latest[("t", 0)] = 61
    r._last_trigger_ms -= 3_600_001                                   # the delay has passed
    assert r.latestOffset(j(p0=60), ReadMinRows(50)) == j(p0=61)


def test_available_now_stops_at_the_offsets_latest_when_it_began():
    p = FakePlanner({("t", 0): 0}, {("t", 0): 100})
    r = reader(p, maxOffsetsPerTrigger="60", minOffsetsPerTrigger="30")
    r.prepareForTriggerAvailableNow()
    p.latest[("t", 0)] = 1000                 # written after the query started: not read
    p.latest[("t", 1)] = 10                   # a partition created since: held at its start
    p.earliest[("t", 1)] = 0
    assert r.latestOffset(j(p0=0), ReadMaxRows(60)) == j(p0=60, p1=0)
    assert r.latestOffset(j(p0=60, p1=0), ReadMaxRows(60)) == j(p0=100, p1=0)   # min ignored
    assert r.latestOffset(j(p0=100, p1=0), ReadMaxRows(60)) == j(p0=100, p1=0)  # done


def test_new_partitions_start_at_earliest():
    p = FakePlanner({("t", 0): 0, ("t", 1): 0}, {("t", 0): 10, ("t", 1): 4})
    r = reader(p)
    end = r.latestOffset(j(p0=3), ReadAllAvailable())
    assert end == j(p0=10, p1=4)
    parts = r.partitions(j(p0=3), end)
    assert [(x.partition, x.from_offset, x.until_offset) for x in parts] == [(0, 3, 10),
                                                                             (1, 0, 4)]


def test_data_loss_fails_or_skips():
    p = FakePlanner({("t", 0): 40}, {("t", 0): 100})
    with pytest.raises(off.DataLossError, match=r"t-0: offsets 10..39 were deleted"):
        reader(p).latestOffset(j(p0=10), ReadAllAvailable())
    r = reader(p, failOnDataLoss="false")
    assert r.latestOffset(j(p0=10), ReadAllAvailable()) == j(p0=100)
    # a deleted topic
    gone = FakePlanner({}, {})
    with pytest.raises(off.DataLossError, match="t-0 is gone"):
        reader(gone).latestOffset(j(p0=10), ReadAllAvailable())
    assert reader(gone, failOnDataLoss="false").latestOffset(j(p0=10), ReadAllAvailable()) == {}


def test_reader_pickles_without_its_connections():
    import pickle
    r = reader(FakePlanner({}, {}))
    assert pickle.loads(pickle.dumps(r))._planner is None


def test_a_user_schema_is_refused_and_the_default_accepted():
    from pyspark.sql.types import StringType, StructField, StructType

    from spark_connector.source import RaftkaDataSource
    from spark_connector.schema import source_schema
    ds = RaftkaDataSource({"kafka.bootstrap.servers": "h:1", "subscribe": "t",
                           "includeheaders": "true"})
    assert ds.schema() == source_schema(True)
    assert isinstance(ds.streamReader(source_schema(True)), RaftkaStreamReader)
    with pytest.raises(ValueError, match="fixed schema"):
        ds.reader(StructType([StructField("value", StringType())]))
