"""The Spark Kafka source schema (Spark's guide, "Creating a Kafka Source"): same columns, same
types, in the same order, so `format("kafka")` queries work on `format("raftka")` unchanged."""

from __future__ import annotations

from pyspark.sql.types import (ArrayType, BinaryType, IntegerType, LongType, StringType,
                               StructField, StructType, TimestampType)

HEADERS_TYPE = ArrayType(StructType([StructField("key", StringType()),
                                     StructField("value", BinaryType())]))


def source_schema(include_headers: bool = False) -> StructType:
    fields = [StructField("key", BinaryType()), StructField("value", BinaryType()),
              StructField("topic", StringType()), StructField("partition", IntegerType()),
              StructField("offset", LongType()), StructField("timestamp", TimestampType()),
              StructField("timestampType", IntegerType())]
    if include_headers:
        fields.append(StructField("headers", HEADERS_TYPE))
    return StructType(fields)


def check_sink_schema(schema: StructType, topic_option: str | None) -> None:
    """The columns a sink accepts (Spark's guide, "Writing Data to Kafka"); ValueError naming the
    column otherwise. `value` is required; `topic` unless the `topic` option is set."""
    by_name = {f.name.lower(): f.dataType for f in schema.fields}
    if "value" not in by_name:
        raise ValueError("the DataFrame written to raftka needs a 'value' column "
                         "(string or binary)")
    for col in ("key", "value"):
        if col in by_name and not isinstance(by_name[col], (StringType, BinaryType)):
            raise ValueError(f"column '{col}' must be string or binary, got "
                             f"{by_name[col].simpleString()}")
    if topic_option is None:
        if "topic" not in by_name:
            raise ValueError("no topic to write to: set the 'topic' option or add a 'topic' column")
    if "topic" in by_name and not isinstance(by_name["topic"], StringType):
        raise ValueError(f"column 'topic' must be string, got {by_name['topic'].simpleString()}")
    if "partition" in by_name and not isinstance(by_name["partition"], IntegerType):
        raise ValueError(f"column 'partition' must be int, got "
                         f"{by_name['partition'].simpleString()}")
    if "headers" in by_name:
        h = by_name["headers"]
        ok = (isinstance(h, ArrayType) and isinstance(h.elementType, StructType)
              and [f.name for f in h.elementType.fields] == ["key", "value"]
              and isinstance(h.elementType.fields[0].dataType, StringType)
              and isinstance(h.elementType.fields[1].dataType, BinaryType))
        if not ok:
            raise ValueError("column 'headers' must be array<struct<key: string, value: binary>>, "
                             f"got {h.simpleString()}")
