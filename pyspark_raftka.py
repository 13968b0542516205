"""`format("raftka")` with no set-up step: PySpark's own discovery hook for Python data sources.

The first time a session resolves a data source name, Spark starts a Python worker
(pyspark.sql.worker.lookup_data_sources) that walks `pkgutil.iter_modules()` for top-level
modules whose name starts with `pyspark_`, imports each, and registers its `DefaultSource` (a
DataSource subclass) under `DefaultSource.name()`. Installing Raftka (wheel or `pip install -e .`)
puts this module there, so `spark.readStream.format("raftka")` works in a fresh SparkSession the
way Spark's own Kafka source does. `spark_connector.register(spark)` stays for sessions whose
Python workers cannot see installed modules.

Nothing else belongs here: Spark imports every `pyspark_*` module it finds, so this one must stay
cheap to import and free of side effects.
"""

from spark_connector.source import RaftkaDataSource as DefaultSource

__all__ = ["DefaultSource"]
