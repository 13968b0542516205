"""The bench's ceiling source (bench/spark_ceiling_source.py) is only a fair ceiling if it hands
Spark what the raftka source hands it: the same Arrow schema, the same rows per partition, and
the same input partitions for the same offsets. No Spark session, no cluster."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pytest.importorskip("pyspark")
pa = pytest.importorskip("pyarrow")
pytest.importorskip("numpy")

from spark_connector import offsets as off  # noqa: E402
from spark_connector.fetcher import arrow_schema  # noqa: E402
from spark_connector.options import source_options  # noqa: E402
from spark_connector.source import RaftkaStreamReader  # noqa: E402

_PATH = Path(__file__).resolve().parents[2] / "bench" / "spark_ceiling_source.py"


@pytest.fixture(scope="module")
def ceiling():
    spec = importlib.util.spec_from_file_location("spark_ceiling_source", _PATH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_batches_have_the_raftka_schema_and_the_planned_rows(ceiling):
    b = ceiling.build_batch("topic-a", 3, 1000, 1250)
    assert b.schema.equals(arrow_schema(False))   # what Spark checks before taking the batch
    assert b.num_rows == 250
    row = b.slice(0, 1).to_pylist()[0]
    assert row["key"] == b"0000000000001000" and len(row["value"]) == 100
    assert (row["topic"], row["partition"], row["offset"], row["timestampType"]) == \
        ("topic-a", 3, 1000, 0)
    assert b.column("offset").to_pylist() == list(range(1000, 1250))
    assert {len(v) for v in b.column("value").to_pylist()} == {100}


def test_same_input_partitions_as_raftka_and_every_offset_once(ceiling):
    start = {("t", 0): 0, ("t", 1): 5, ("t", 2): 7}
    end = {("t", 0): 70_000, ("t", 1): 5, ("t", 2): 65_007}
    r = ceiling.CeilingStreamReader({"ends": json.dumps(off.to_json_dict(end)),
                                     "starts": json.dumps(off.to_json_dict(start)),
                                     "batchRows": "30000"})
    assert r.initialOffset() == off.to_json_dict(start)
    assert r.latestOffset(off.to_json_dict(start), None) == off.to_json_dict(end)
    mine = r.partitions(off.to_json_dict(start), off.to_json_dict(end))
    raftka = RaftkaStreamReader(source_options({"kafka.bootstrap.servers": "h:1",
                                                "subscribe": "t"}, streaming=True))
    assert mine == raftka.partitions(off.to_json_dict(start), off.to_json_dict(end))
    seen = []
    for p in mine:
        batches = list(r.read(p))
        assert all(b.num_rows <= 30_000 for b in batches)
        seen += [(p.partition, o) for b in batches for o in b.column("offset").to_pylist()]
    assert seen == [(0, o) for o in range(70_000)] + [(2, o) for o in range(7, 65_007)]
    # built once per worker: a second read of the same range hands out the same batches
    assert list(r.read(mine[0]))[0] is list(r.read(mine[0]))[0]


def test_ends_option_is_required(ceiling):
    with pytest.raises(ValueError, match="ends"):
        ceiling.CeilingStreamReader({})
