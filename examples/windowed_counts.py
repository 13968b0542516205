"""A streaming pipeline on Raftka: per-key counts over 10-second event-time windows, from one
topic into another, with PySpark and the `raftka` data source.

    raftka dev                                   # a local 3+3 cluster on 127.0.0.1:9092..9094
    python examples/windowed_counts.py --generate 20000 --once
    python examples/windowed_counts.py           # keeps running; Ctrl-C to stop

`--generate N` writes N page-view events (key = page, value = user) spread over the last minute
into the input topic first; `--once` processes what is there (Trigger.AvailableNow) and prints
the output topic. Counts are written in append mode: one record per (window, page), once the
watermark (newest event time - 30 s) has passed the window's end. Restarting with the same
--checkpoint resumes where the last run stopped.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from wire.messages.api_keys import ApiKey


def build_query(spark, bootstrap: str, source: str, sink: str, checkpoint: str, once: bool):
    from pyspark.sql import functions as F

    events = (spark.readStream.format("raftka")
              .option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", source)
              .option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", "50000")
              .load())
    counts = (events
              .withWatermark("timestamp", "30 seconds")
              .groupBy(F.window("timestamp", "10 seconds"), F.col("key"))
              .count())
    # one output record per (window, key), keyed by the page, with a JSON value
    out = counts.select(
        F.col("key"),
        F.to_json(F.struct(F.col("window.start").cast("string").alias("window_start"),
                           F.col("window.end").cast("string").alias("window_end"),
                           F.col("key").cast("string").alias("page"),
                           F.col("count"))).alias("value"))
    writer = (out.writeStream.format("raftka")
              .option("kafka.bootstrap.servers", bootstrap)
              .option("topic", sink)
              .option("checkpointLocation", checkpoint)
              # append: a window's count is written once, when the watermark (newest event
              # time - 30 s) has passed the window's end and the count can no longer change
              .outputMode("append"))
    writer = (writer.trigger(availableNow=True) if once
              else writer.trigger(processingTime="2 seconds"))
    return writer.start()


def create_topics(bootstrap: str, names: list[str], partitions: int = 3) -> None:
    from spark_connector import kafka_io
    from wire.messages.index_generated import REQUESTS
    client = kafka_io.get_client(kafka_io.ClientConfig(bootstrap, client_id="example-admin"))
    ct = REQUESTS[ApiKey.CREATE_TOPICS]
    sock = client._any_socket()
    resp = sock.request(ct(topics=[ct.CreatableTopic(name=n, num_partitions=partitions,
                                                     replication_factor=-1, configs=[])
                                   for n in names], timeout_ms=30000), 5)
    for t in resp.topics:
        if t.error_code not in (0, 36):                       # 36: TOPIC_ALREADY_EXISTS
            sys.exit(f"cannot create topic {t.name}: error {t.error_code} {t.error_message}")
    deadline = time.time() + 30
    while time.time() < deadline:
        md = client.refresh_metadata(names)
        if all(md.get(n) and all(p.leader >= 0 for p in md[n].values()) for n in names):
            return
        time.sleep(0.3)


def generate(bootstrap: str, topic: str, n: int) -> None:
    from spark_connector.options import sink_options
    from spark_connector.sink import TopicWriter
    w = TopicWriter(sink_options({"kafka.bootstrap.servers": bootstrap}))
    now = int(time.time() * 1000)
    rng = random.Random(7)
    pages = [f"/page/{i}" for i in range(20)]
    for _ in range(n):
        w.add(topic, None, rng.choice(pages).encode(), f"user-{rng.randrange(1000)}".encode(),
              (), now - rng.randrange(60_000))
    w.flush()
    print(f"generated {n} events into {topic}", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap", default="127.0.0.1:9092")
    ap.add_argument("--input", default="page-views")
    ap.add_argument("--output", default="page-view-counts")
    ap.add_argument("--checkpoint", default="/tmp/raftka-example-checkpoint")
    ap.add_argument("--generate", type=int, default=0, help="write N sample events first")
    ap.add_argument("--once", action="store_true", help="Trigger.AvailableNow, then print")
    args = ap.parse_args(argv)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)   # executors need our packages
    from pyspark.sql import SparkSession

    from spark_connector import register

    create_topics(args.bootstrap, [args.input, args.output])
    if args.generate:
        generate(args.bootstrap, args.input, args.generate)
    spark = (SparkSession.builder.master("local[2]").appName("raftka-windowed-counts")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    register(spark)
    query = build_query(spark, args.bootstrap, args.input, args.output, args.checkpoint,
                        args.once)
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        query.stop()
    if args.once:
        rows = (spark.read.format("raftka").option("kafka.bootstrap.servers", args.bootstrap)
                .option("subscribe", args.output).load().selectExpr("CAST(value AS STRING) v")
                .collect())
        counts = sorted((json.loads(r.v) for r in rows),
                        key=lambda d: (d["window_start"], d["page"]))
        for d in counts[-10:]:
            print(json.dumps(d))
        print(f"{len(counts)} (window, page) counts so far; windows of the last 30 s of event "
              "time are written once newer events move the watermark past them", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
