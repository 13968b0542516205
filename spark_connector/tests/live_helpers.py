"""Shared by the live Spark tests: topic admin over our own blocking client, a Spark session."""

from __future__ import annotations

import os
import sys
import time

from spark_connector import kafka_io
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS


def client(bootstrap: str, client_id: str = "raftka-spark-tests") -> kafka_io.KafkaClient:
    return kafka_io.get_client(kafka_io.ClientConfig(bootstrap, client_id=client_id))


def create_topic(bootstrap: str, name: str, partitions: int, rf: int = 1,
                 configs: dict | None = None, timeout_s: float = 60,
                 client_config: kafka_io.ClientConfig | None = None) -> None:
    c = kafka_io.get_client(client_config) if client_config else client(bootstrap)
    ct = REQUESTS[ApiKey.CREATE_TOPICS]
    # the dev cluster defaults to min.insync.replicas=2: a one-replica topic needs 1
    configs = {"min.insync.replicas": str(min(rf, 2)), **(configs or {})}
    sock = c._any_socket()
    resp = sock.request(ct(topics=[ct.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=rf,
        configs=[ct.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()])],
        timeout_ms=30000), 5)
    assert resp.topics[0].error_code in (0, 36), resp.topics[0]      # 36: already exists
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        md = c.refresh_metadata([name]).get(name, {})
        if len(md) == partitions and all(p.leader >= 0 for p in md.values()):
            try:
                c.list_offsets({(name, p): kafka_io.LATEST for p in md})
                return
            except Exception:      # noqa: BLE001 - leaders may still be loading the partition
                pass
        time.sleep(0.2)
    raise TimeoutError(f"topic {name} has no leaders after {timeout_s}s")


def delete_records(bootstrap: str, topic: str, partition: int, before_offset: int) -> int:
    """DeleteRecords: the partition's log start moves to `before_offset`; returns it."""
    c = client(bootstrap)
    sock = c._leader_socket(topic, partition)
    dr = REQUESTS[ApiKey.DELETE_RECORDS]
    resp = sock.request(dr(topics=[dr.DeleteRecordsTopic(name=topic, partitions=[
        dr.DeleteRecordsPartition(partition_index=partition, offset=before_offset)])],
        timeout_ms=30000), 2)
    res = resp.topics[0].partitions[0]
    assert res.error_code == 0, res
    return res.low_watermark


def spark_session(local_dir: str, cores: int = 2):
    # executors must run the interpreter that has Raftka installed
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # a loaded 2-core CI box can take more than the default 15 s to hand a Python worker its
    # socket; both sides of that handshake get more time
    os.environ.setdefault("SPARK_AUTH_SOCKET_TIMEOUT", "120")
    from pyspark.sql import SparkSession

    from spark_connector import register
    spark = (SparkSession.builder.master(f"local[{cores}]").appName("raftka-spark-tests")
             .config("spark.ui.enabled", "false")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.local.dir", local_dir)
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.python.authenticate.socketTimeout", "120s")
             .config("spark.sql.streaming.stopTimeout", "60s")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    _start_callback_server(spark)
    return spark


# select()'s fd_set holds descriptors 0..1023 only
SELECT_FD_LIMIT = 1024


def _start_callback_server(spark) -> None:
    """Start py4j's callback server now (foreachBatch would start it on first use) and check its
    socket can work. The server waits for the JVM's connections with select(), which cannot
    watch a descriptor >= 1024: with more descriptors open in this process (leaked by earlier
    tests of the same run), the server thread dies, the JVM's connection is never accepted, and
    every foreachBatch call blocks until the query's stop times out (CI: four tests, 6 min
    each). Fail here instead, saying why."""
    from pyspark.java_gateway import ensure_callback_server_started
    gw = spark.sparkContext._gateway
    ensure_callback_server_started(gw)
    fd = gw._callback_server.server_socket.fileno()
    if fd >= SELECT_FD_LIMIT:
        open_fds = len(os.listdir("/proc/self/fd"))
        raise RuntimeError(
            f"py4j's callback server socket is descriptor {fd} (>= {SELECT_FD_LIMIT}, beyond "
            f"select()); this process has {open_fds} descriptors open: an earlier test leaked "
            f"them (each test must close the logs, clients and sockets it opens)")
