"""Raftka's PySpark connector: `format("raftka")` for read, readStream, write and writeStream.

    df = spark.readStream.format("raftka").option("kafka.bootstrap.servers", ...) ...

No set-up call: PySpark finds the installed top-level module `pyspark_raftka` (its discovery
hook for Python data sources). `register(spark)` registers the source explicitly, for sessions
whose Python workers cannot see installed modules.

See spark_connector/README.md. Needs pyspark >= 4.2 and pyarrow (the `spark` extra), and the
executors' PYSPARK_PYTHON must be an interpreter where Raftka is installed.

Layer: a library over `wire/` and `common/` (its SCRAM is `common.sasl`); never a server.
"""


def register(spark) -> None:
    """Make `format("raftka")` available in `spark` (a SparkSession)."""
    from spark_connector.source import RaftkaDataSource
    spark.dataSource.register(RaftkaDataSource)
