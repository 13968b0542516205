"""format("raftka") against a live 3+3 cluster, on one local[2] SparkSession for the module.

Select with `-m spark`. Covers issue #9's list: a 100k-record / 6-partition streaming query
stopped and restarted from its checkpoint with every (partition, offset) exactly once in the
sink; maxOffsetsPerTrigger; minPartitions; failOnDataLoss true/false after DeleteRecords removed
unread data; startingOffsetsByTimestamp; headers round-trip; sink write + read back.
"""

from __future__ import annotations

import datetime
import json
import threading
import time

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from partition_server.testing import LiveCluster  # noqa: E402
from spark_connector import kafka_io  # noqa: E402
from spark_connector.sink import TopicWriter  # noqa: E402
from spark_connector.options import sink_options  # noqa: E402
from spark_connector.tests.live_helpers import (create_topic, delete_records,  # noqa: E402
                                                spark_session)

pytestmark = [pytest.mark.live, pytest.mark.spark]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LiveCluster(tmp_path_factory.mktemp("spark-cluster"))
    c.start(timeout_s=120)
    yield c
    kafka_io.close_all()
    c.stop()


@pytest.fixture(scope="module")
def spark(tmp_path_factory):
    s = spark_session(str(tmp_path_factory.mktemp("spark-local")))
    yield s
    s.stop()


def _produce(bootstrap: str, topic: str, rows, client_id: str = "test-producer") -> None:
    """rows: (partition, key, value, headers, timestamp_ms)."""
    w = TopicWriter(sink_options({"kafka.bootstrap.servers": bootstrap,
                                  "kafka.client.id": client_id}))
    for partition, key, value, headers, ts in rows:
        w.add(topic, partition, key, value, headers, ts)
    w.flush()


def _reader(spark, cluster, topic, **opts):
    r = spark.read.format("raftka").option("kafka.bootstrap.servers", cluster.bootstrap) \
        .option("subscribe", topic)
    for k, v in opts.items():
        r = r.option(k, v)
    return r.load()


def _stream(spark, cluster, topic, **opts):
    r = spark.readStream.format("raftka").option("kafka.bootstrap.servers", cluster.bootstrap) \
        .option("subscribe", topic)
    for k, v in opts.items():
        r = r.option(k, v)
    return r.load()


def test_client_produce_list_offsets_fetch(cluster):
    create_topic(cluster.bootstrap, "io", 2)
    _produce(cluster.bootstrap, "io", [(i % 2, b"k%d" % i, b"v%d" % i, [("h", b"x")], 1000 + i)
                                       for i in range(10)])
    c = kafka_io.get_client(kafka_io.ClientConfig(cluster.bootstrap))
    assert c.topic_partitions(["io"]) == {"io": [0, 1]}
    assert c.topic_partitions(["no-such-topic"]) == {}
    got = c.list_offsets({("io", 0): kafka_io.EARLIEST, ("io", 1): kafka_io.LATEST})
    assert got == {("io", 0): 0, ("io", 1): 5}
    # first record at or after timestamp 1005 in partition 1 (timestamps 1001, 1003, ...)
    assert c.list_offsets({("io", 1): 1005}) == {("io", 1): 2}
    assert c.list_offsets({("io", 1): 99999}) == {("io", 1): -1}
    res = c.fetch("io", 0, 0)
    assert res.error_code == 0 and res.high_watermark == 5
    from wire.records.batch import decode_batch, iter_batches
    values = [r.value for h in iter_batches(res.records) for r in decode_batch(h.bytes()).records]
    assert values == [b"v0", b"v2", b"v4", b"v6", b"v8"]
    assert c.fetch("io", 0, 50).error_code == 1          # OFFSET_OUT_OF_RANGE comes back


def test_sink_write_then_read_back_with_headers(spark, cluster):
    create_topic(cluster.bootstrap, "sink", 3)
    rows = [(f"k{i}", f"value-{i}", [(f"h{i}", f"hv{i}".encode()), ("n", None)])
            for i in range(300)]
    df = spark.createDataFrame(
        rows, "key string, value string, headers array<struct<key: string, value: binary>>")
    (df.write.format("raftka").option("kafka.bootstrap.servers", cluster.bootstrap)
     .option("topic", "sink").mode("append").save())
    back = _reader(spark, cluster, "sink", includeHeaders="true").collect()
    assert len(back) == 300
    got = {(r.key.decode(), r.value.decode(), tuple((h.key, h.value) for h in r.headers))
           for r in back}
    assert got == {(k, v, tuple((hk, hv) for hk, hv in hs)) for k, v, hs in rows}
    # keyed records land where Kafka's default partitioner puts them
    from spark_connector.sink import default_partition
    assert all(r.partition == default_partition(r.key, 3) for r in back)
    assert {r.topic for r in back} == {"sink"} and {r.timestampType for r in back} == {0}
    # per partition, offsets are 0..n-1
    by_p: dict[int, list[int]] = {}
    for r in back:
        by_p.setdefault(r.partition, []).append(r.offset)
    assert all(sorted(o) == list(range(len(o))) for o in by_p.values())


def test_min_partitions_and_max_records_per_partition(spark, cluster):
    create_topic(cluster.bootstrap, "split", 3)
    _produce(cluster.bootstrap, "split", [(i % 3, None, b"%d" % i, (), None) for i in range(3000)])
    df = _reader(spark, cluster, "split", minPartitions="8")
    assert df.rdd.getNumPartitions() >= 8
    assert df.count() == 3000
    assert df.select("partition", "offset").distinct().count() == 3000
    df2 = _reader(spark, cluster, "split", maxRecordsPerPartition="250")
    assert df2.rdd.getNumPartitions() == 12
    # endingOffsets JSON with -1 (latest) and a fixed offset
    df3 = _reader(spark, cluster, "split", startingOffsets='{"split":{"0":10,"1":-2,"2":-2}}',
                  endingOffsets='{"split":{"0":20,"1":5,"2":-1}}')
    assert df3.count() == 10 + 5 + 1000


def test_starting_offsets_by_timestamp(spark, cluster):
    create_topic(cluster.bootstrap, "ts", 2)
    base = 1_700_000_000_000
    _produce(cluster.bootstrap, "ts", [(p, None, b"%d-%d" % (p, i), (), base + 1000 * i)
                                       for p in (0, 1) for i in range(50)])
    spec = json.dumps({"ts": {"0": base + 10_000, "1": base + 42_500}})
    rows = _reader(spark, cluster, "ts", startingOffsetsByTimestamp=spec) \
        .select("partition", "offset", "timestamp").collect()
    first = {p: min(r.offset for r in rows if r.partition == p) for p in (0, 1)}
    assert first == {0: 10, 1: 43}
    assert len(rows) == 40 + 7
    # startingTimestamp applies to every partition; streaming uses the same resolution
    q = (_stream(spark, cluster, "ts", startingTimestamp=str(base + 45_000)).writeStream
         .format("memory").queryName("ts_stream").trigger(availableNow=True).start())
    q.awaitTermination(180)
    got = spark.sql("select partition, min(offset) o, count(*) n from ts_stream group by partition"
                    ).collect()
    assert {(r.partition, r.o, r.n) for r in got} == {(0, 45, 5), (1, 45, 5)}
    # a timestamp after every record: error by default, latest with the strategy option
    with pytest.raises(Exception, match="No offset matched the timestamp"):
        _reader(spark, cluster, "ts", startingTimestamp=str(base + 10**9)).count()
    assert _reader(spark, cluster, "ts", startingTimestamp=str(base + 10**9),
                   startingOffsetsByTimestampStrategy="latest").count() == 0


def test_max_offsets_per_trigger_caps_batches(spark, cluster, tmp_path):
    create_topic(cluster.bootstrap, "capped", 3)
    _produce(cluster.bootstrap, "capped", [(i % 3, None, b"%d" % i, (), None) for i in range(1000)])
    q = (_stream(spark, cluster, "capped", startingOffsets="earliest", maxOffsetsPerTrigger="150")
         .writeStream.format("memory").queryName("capped_out")
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    q.awaitTermination(300)
    sizes = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
    assert sum(sizes) == 1000
    assert max(sizes) <= 150 and len(sizes) >= 7
    assert spark.sql("select count(distinct partition, offset) from capped_out").first()[0] == 1000
    # the checkpoint holds Spark's Kafka offsets JSON
    last = max((p for p in (tmp_path / "ck" / "offsets").iterdir() if p.name.isdigit()),
               key=lambda p: int(p.name))
    assert json.loads(last.read_text().splitlines()[-1]) == {"capped": {"0": 334, "1": 333,
                                                                        "2": 333}}


def _run_available_now(spark, cluster, topic, checkpoint, **opts) -> tuple[object, list]:
    """Trigger.AvailableNow into foreachBatch (which, unlike the memory sink, restarts from a
    checkpoint); returns the query and the values it saw."""
    seen: list[int] = []
    q = (_stream(spark, cluster, topic, **opts).writeStream
         .foreachBatch(lambda df, _id: seen.extend(int(r.value) for r in df.collect()))
         .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    try:
        q.awaitTermination(240)
    except Exception:           # noqa: BLE001 - a failed query is inspected by the caller
        pass
    finally:
        q.stop()
    return q, seen


def test_fail_on_data_loss(spark, cluster, tmp_path):
    import shutil
    create_topic(cluster.bootstrap, "lossy", 1)
    _produce(cluster.bootstrap, "lossy", [(0, None, b"%d" % i, (), None) for i in range(100)])
    ck = str(tmp_path / "ck")
    _, seen = _run_available_now(spark, cluster, "lossy", ck, startingOffsets="earliest")
    assert sorted(seen) == list(range(100))
    _produce(cluster.bootstrap, "lossy", [(0, None, b"%d" % i, (), None) for i in range(100, 200)])
    # offsets 100..149 are deleted before the query read them
    assert delete_records(cluster.bootstrap, "lossy", 0, 150) == 150
    shutil.copytree(ck, str(tmp_path / "ck2"))
    q, seen = _run_available_now(spark, cluster, "lossy", ck, failOnDataLoss="true")
    assert q.exception() is not None and "deleted before they were read" in str(q.exception())
    assert seen == []
    q, seen = _run_available_now(spark, cluster, "lossy", str(tmp_path / "ck2"),
                                 failOnDataLoss="false")
    assert q.exception() is None
    assert sorted(seen) == list(range(150, 200))


def test_streaming_100k_six_partitions_restart_exactly_once(spark, cluster, tmp_path):
    """A producer writes 100k records to 6 partitions while the query runs; the query is
    stopped midway and restarted from its checkpoint; the (exactly-once) Parquet file sink
    then holds every (partition, offset) once."""
    create_topic(cluster.bootstrap, "big", 6)
    total, per_round = 100_000, 10_000
    done = threading.Event()
    errors = []

    def produce():
        try:
            for r in range(total // per_round):
                _produce(cluster.bootstrap, "big",
                         [(i % 6, b"%d" % (i % 97), b"x" * 20, (), None)
                          for i in range(r * per_round, (r + 1) * per_round)],
                         client_id="bg-producer")
                time.sleep(0.2)
        except Exception as exc:      # noqa: BLE001 - reported by the test below
            errors.append(exc)
        finally:
            done.set()

    out, ck = str(tmp_path / "out"), str(tmp_path / "ck")

    def start(trigger):
        return (_stream(spark, cluster, "big", startingOffsets="earliest",
                        maxOffsetsPerTrigger="30000")
                .select("partition", "offset").writeStream.format("parquet")
                .option("path", out).option("checkpointLocation", ck).trigger(**trigger).start())

    t = threading.Thread(target=produce, daemon=True)
    t.start()
    q = start({"processingTime": "1 second"})
    deadline = time.time() + 300
    while time.time() < deadline and sum(p["numInputRows"] for p in q.recentProgress) == 0:
        assert q.exception() is None, q.exception()
        time.sleep(0.5)
    q.stop()                                        # midway: the producer is still writing
    first_run = sum(p["numInputRows"] for p in q.recentProgress)
    assert 0 < first_run
    done.wait(300)
    assert not errors, errors
    q = start({"availableNow": True})               # restart from the checkpoint
    q.awaitTermination(300)
    assert q.exception() is None, q.exception()
    df = spark.read.parquet(out)
    assert df.count() == total
    assert df.distinct().count() == total
    per_p = {r.partition: (r.lo, r.hi, r.n) for r in df.groupBy("partition").agg(
        {"offset": "min"}).withColumnRenamed("min(offset)", "lo").join(
        df.groupBy("partition").agg({"offset": "max"}).withColumnRenamed("max(offset)", "hi"),
        "partition").join(df.groupBy("partition").count().withColumnRenamed("count", "n"),
                          "partition").collect()}
    assert per_p == {p: (0, total // 6 + (1 if p < total % 6 else 0) - 1,
                         total // 6 + (1 if p < total % 6 else 0)) for p in range(6)}


def test_example_pipeline_windowed_counts_into_a_topic(spark, cluster, tmp_path):
    """examples/windowed_counts.py end to end: readStream raftka -> windowed counts ->
    writeStream raftka; the counts in the output topic match a batch computation."""
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parents[2] / "examples" / "windowed_counts.py"
    spec = importlib.util.spec_from_file_location("windowed_counts", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    create_topic(cluster.bootstrap, "views", 3)
    create_topic(cluster.bootstrap, "view-counts", 2)
    example.generate(cluster.bootstrap, "views", 2000)
    q = example.build_query(spark, cluster.bootstrap, "views", "view-counts",
                            str(tmp_path / "ck"), once=True)
    q.awaitTermination(240)
    assert q.exception() is None, q.exception()
    from pyspark.sql import functions as F
    views = _reader(spark, cluster, "views")
    watermark = views.agg(F.max("timestamp")).first()[0] - datetime.timedelta(seconds=30)
    want = {(str(r.start), r.key.decode()): r["count"] for r in
            views.groupBy(F.window("timestamp", "10 seconds"), "key").count()
            .select(F.col("window.start").alias("start"), F.col("window.end").alias("end"),
                    "key", "count").collect() if r.end <= watermark}
    got: dict = {}
    for r in _reader(spark, cluster, "view-counts").collect():
        d = json.loads(r.value)
        k = (d["window_start"], d["page"])
        assert r.key.decode() == d["page"] and k not in got      # append: each window once
        got[k] = d["count"]
    assert want and got == want
