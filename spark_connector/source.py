"""`format("raftka")`: the Python Data Source (pyspark >= 4.2) that reads and writes Raftka topics.

Driver side (`partitions`, `initialOffset`, `latestOffset`) plans offset ranges with a few
Metadata and ListOffsets requests; executor side (`read`) fetches each range from its partition
leader (fetcher.py). One input partition = one Spark task = one topic-partition offset range,
split further when `minPartitions` / `maxRecordsPerPartition` ask.

Offsets handed to Spark (and so written to checkpoints) are Spark's Kafka JSON shape,
{"topic": {"partition": offset}}: the end offsets of each micro-batch, exclusive.
"""

from __future__ import annotations

import dataclasses
import logging
import time

from pyspark.sql.datasource import (DataSource, DataSourceReader, DataSourceStreamReader,
                                    InputPartition)
from pyspark.sql.streaming.datasource import (ReadAllAvailable, ReadLimit, ReadMaxRows,
                                              ReadMinRows, SupportsTriggerAvailableNow)

from spark_connector import kafka_io
from spark_connector import offsets as off
from spark_connector.options import OffsetSpec, SourceOptions, sink_options, source_options
from spark_connector.schema import check_sink_schema, source_schema

log = logging.getLogger(__name__)


@dataclasses.dataclass
class RangePartition(InputPartition):
    """One Spark task: [from_offset, until_offset) of topic-partition (picklable)."""
    topic: str
    partition: int
    from_offset: int
    until_offset: int

    @property
    def range(self) -> off.OffsetRange:
        return off.OffsetRange(self.topic, self.partition, self.from_offset, self.until_offset)


class Planner:
    """Driver-side offset lookups for one query (nothing here is pickled to executors)."""

    def __init__(self, o: SourceOptions):
        self.o = o
        self.client = kafka_io.get_client(o.client)

    def current_partitions(self) -> set[off.TopicPartition]:
        found = self.client.topic_partitions(self.o.subscription.metadata_topics())
        return self.o.subscription.select(found)

    def list_offsets(self, tps, what: int) -> off.Offsets:
        return self.client.list_offsets({tp: what for tp in tps}, self.o.isolation_level) \
            if tps else {}

    def resolve(self, spec: OffsetSpec, tps: set[off.TopicPartition], start: bool) -> off.Offsets:
        """Concrete offsets of `tps` for a starting/ending option."""
        name = "starting" if start else "ending"
        if spec.kind == "earliest":
            return self.list_offsets(tps, kafka_io.EARLIEST)
        if spec.kind == "latest":
            return self.list_offsets(tps, kafka_io.LATEST)
        if spec.kind == "offsets":
            given = spec.offset_map
            if set(given) != set(tps):
                raise ValueError(
                    f"If {name}Offsets contains specific offsets, you must specify all "
                    f"TopicPartitions. Use -1 for latest, -2 for earliest. Specified: "
                    f"{_tps(given)} Assigned: {_tps(tps)}")
            out = dict(given)
            special = {tp: n for tp, n in given.items() if n in (off.EARLIEST, off.LATEST)}
            if special:
                out.update(self.client.list_offsets(special, self.o.isolation_level))
            return out
        if spec.kind == "timestamps":
            wanted = spec.offset_map
            if set(wanted) != set(tps):
                raise ValueError(
                    f"{name}OffsetsByTimestamp must give a timestamp for every assigned "
                    f"TopicPartition. Specified: {_tps(wanted)} Assigned: {_tps(tps)}")
        else:
            wanted = {tp: spec.timestamp for tp in tps}
        found = self.client.list_offsets(wanted, self.o.isolation_level) if wanted else {}
        missing = [tp for tp, n in found.items() if n < 0]
        if missing:
            # No record at or after the timestamp. Ending: read to the latest. Starting: Spark's
            # startingOffsetsByTimestampStrategy decides (error, or latest).
            if start and self.o.timestamp_strategy == "error":
                raise ValueError(
                    f"No offset matched the timestamp for {_tps(missing)} (every record is "
                    "older). Set startingOffsetsByTimestampStrategy to 'latest' to start those "
                    "partitions at their latest offset instead.")
            found.update(self.list_offsets(missing, kafka_io.LATEST))
        return found


def _tps(tps) -> str:
    return "[" + ", ".join(f"{t}-{p}" for t, p in sorted(tps)) + "]"


def _partitions_for(ranges: list[off.OffsetRange]) -> list[RangePartition]:
    return [RangePartition(r.topic, r.partition, r.from_offset, r.until_offset) for r in ranges]


def _read(o: SourceOptions, partition: RangePartition):
    # imported here: the driver's planner process never reads, and the record codecs
    # (compression libraries, CRC, the C decoder) are not worth loading there
    from spark_connector.fetcher import read_range
    return read_range(o.client, partition.range, include_headers=o.include_headers,
                      fail_on_data_loss=o.fail_on_data_loss, isolation_level=o.isolation_level,
                      fetch_max_bytes=o.fetch_max_bytes, poll_timeout_ms=o.poll_timeout_ms)


class RaftkaBatchReader(DataSourceReader):
    """`spark.read.format("raftka")`: startingOffsets (default earliest) to endingOffsets
    (default latest), fixed when the query is planned."""

    def __init__(self, o: SourceOptions):
        self.o = o

    def partitions(self):
        planner = Planner(self.o)
        tps = planner.current_partitions()
        start = planner.resolve(self.o.starting, tps, start=True)
        end = planner.resolve(self.o.ending, tps, start=False)
        for tp in sorted(tps):
            if end[tp] < start[tp]:
                raise ValueError(f"ending offset {end[tp]} of {tp[0]}-{tp[1]} is before its "
                                 f"starting offset {start[tp]}")
        ranges = off.plan_ranges(start, end, self.o.min_partitions,
                                 self.o.max_records_per_partition)
        # Spark needs at least one partition; an empty one reads nothing
        return _partitions_for(ranges) or [RangePartition("", -1, 0, 0)]

    def read(self, partition: RangePartition):
        if partition.partition < 0:
            return iter(())
        return _read(self.o, partition)


class RaftkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """`spark.readStream.format("raftka")` with admission control (maxOffsetsPerTrigger,
    minOffsetsPerTrigger + maxTriggerDelay) and Trigger.AvailableNow."""

    def __init__(self, o: SourceOptions):
        self.o = o
        self._planner: Planner | None = None
        self._available_now: off.Offsets | None = None
        self._last_trigger_ms = 0

    def __getstate__(self):
        # read() runs in executors: they get the options, not the driver's connections
        state = dict(self.__dict__)
        state["_planner"] = None
        return state

    @property
    def planner(self) -> Planner:
        if self._planner is None:
            self._planner = Planner(self.o)
        return self._planner

    def initialOffset(self) -> dict:
        tps = self.planner.current_partitions()
        return off.to_json_dict(self.planner.resolve(self.o.starting, tps, start=True))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.o.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.o.max_offsets_per_trigger)
        if self.o.min_offsets_per_trigger is not None:
            return ReadMinRows(self.o.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        tps = self.planner.current_partitions()
        self._available_now = self.planner.list_offsets(tps, kafka_io.LATEST)

    def _reconciled(self, start: off.Offsets) -> tuple[off.Offsets, off.Offsets]:
        """(start for every current partition, latest offsets), data loss handled."""
        tps = self.planner.current_partitions()
        earliest = self.planner.list_offsets(tps, kafka_io.EARLIEST)
        latest = self.planner.list_offsets(tps, kafka_io.LATEST)
        rec = off.reconcile(start, earliest, latest)
        if rec.losses:
            msg = "; ".join(rec.losses)
            if self.o.fail_on_data_loss:
                raise off.DataLossError(f"{msg}. {off.DATA_LOSS_HINT}")
            log.warning("data loss, skipped (failOnDataLoss=false): %s", msg)
        return rec.start, latest

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin, latest = self._reconciled(off.from_json_dict(start))
        if self._available_now is not None:
            # nothing written after prepareForTriggerAvailableNow is read; partitions created
            # since then are held at their start
            latest = {tp: max(begin[tp], min(n, self._available_now.get(tp, begin[tp])))
                      for tp, n in latest.items()}
        end = latest
        if not isinstance(limit, ReadAllAvailable):
            now = int(time.time() * 1000)
            if (self.o.min_offsets_per_trigger is not None and self._available_now is None
                    and now - self._last_trigger_ms < self.o.max_trigger_delay_ms
                    and off.available(begin, latest) < self.o.min_offsets_per_trigger):
                return start           # too little new data and maxTriggerDelay not yet passed
            if self.o.max_offsets_per_trigger is not None:
                end = off.rate_limit(begin, latest, self.o.max_offsets_per_trigger)
        result = off.to_json_dict(end)
        if result != start:
            self._last_trigger_ms = int(time.time() * 1000)
        return result

    def reportLatestOffset(self):
        try:
            tps = self.planner.current_partitions()
            return off.to_json_dict(self.planner.list_offsets(tps, kafka_io.LATEST))
        except Exception:          # noqa: BLE001 - progress reporting must not fail the query
            return None

    def partitions(self, start: dict, end: dict):
        s, e = off.from_json_dict(start), off.from_json_dict(end)
        new = [tp for tp in e if tp not in s]
        if new:
            # partitions that appeared in this trigger start at their earliest offset
            s.update(self.planner.list_offsets(new, kafka_io.EARLIEST))
        ranges = off.plan_ranges(s, e, self.o.min_partitions, self.o.max_records_per_partition)
        return _partitions_for(ranges)

    def read(self, partition: RangePartition):
        return _read(self.o, partition)

    def commit(self, end: dict) -> None:
        """Spark's checkpoint is the source of truth; like Spark's Kafka source we commit no
        offsets to Kafka."""


class RaftkaDataSource(DataSource):
    """Register with `spark.dataSource.register(RaftkaDataSource)` (or
    `spark_connector.register(spark)`), then use `format("raftka")`."""

    @classmethod
    def name(cls) -> str:
        return "raftka"

    def schema(self):
        opts = {str(k).lower(): v for k, v in self.options.items()}
        include = str(opts.get("includeheaders", "false")).strip().lower() == "true"
        return source_schema(include)

    def _check_schema(self, schema, o: SourceOptions) -> None:
        if schema is not None and schema != source_schema(o.include_headers):
            raise ValueError("the raftka source has a fixed schema (key, value, topic, partition, "
                             "offset, timestamp, timestampType[, headers]); do not set one, "
                             "cast the columns instead")

    def reader(self, schema):
        o = source_options(self.options, streaming=False)
        self._check_schema(schema, o)
        return RaftkaBatchReader(o)

    def streamReader(self, schema):
        o = source_options(self.options, streaming=True)
        self._check_schema(schema, o)
        return RaftkaStreamReader(o)

    def writer(self, schema, overwrite: bool):
        from spark_connector.sink import RaftkaBatchWriter
        o = sink_options(self.options)
        check_sink_schema(schema, o.topic)
        return RaftkaBatchWriter(o, schema)

    def streamWriter(self, schema, overwrite: bool):
        from spark_connector.sink import RaftkaStreamWriter
        o = sink_options(self.options)
        check_sink_schema(schema, o.topic)
        return RaftkaStreamWriter(o, schema)
