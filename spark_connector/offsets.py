"""Pure offset planning: Spark's offsets JSON, offset ranges, splitting, rate limits, data loss.

Nothing here does I/O; the source and the tests feed it offsets. The shapes are Spark's Kafka
integration's, so a checkpoint written by this connector reads like one written by Spark's:

    {"topicA": {"0": 23, "1": 42}, "topicB": {"0": 7}}

In user-given JSON (`startingOffsets`, `endingOffsets`), -2 means earliest and -1 latest.
"""

from __future__ import annotations

import dataclasses
import json
import math

EARLIEST = -2
LATEST = -1

TopicPartition = tuple[str, int]
Offsets = dict[TopicPartition, int]


class DataLossError(RuntimeError):
    """Data the query should have read is gone (retention, DeleteRecords, a deleted topic).

    Raised when `failOnDataLoss` is true; the message says what was lost and how to go on."""


DATA_LOSS_HINT = ("Some data may have been lost because they are not available in Kafka any "
                  "more; either the data was aged out by Kafka or the topic may have been deleted "
                  "before all the data in the topic was processed. If you want your streaming "
                  "query to fail on such cases, set the source option \"failOnDataLoss\" to "
                  "\"true\"; if you don't, set it to \"false\".")


def to_json_dict(offsets: Offsets) -> dict:
    """{(t, p): n} -> {"t": {"p": n}} with topics and partitions in order (stable checkpoints)."""
    out: dict[str, dict[str, int]] = {}
    for (t, p) in sorted(offsets):
        out.setdefault(t, {})[str(p)] = int(offsets[(t, p)])
    return out


def from_json_dict(obj) -> Offsets:
    """The inverse of `to_json_dict`; ValueError for anything not in that shape."""
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object like {{\"topicA\":{{\"0\":23}}}}, got {obj!r}")
    out: Offsets = {}
    for topic, parts in obj.items():
        if not isinstance(parts, dict):
            raise ValueError(f"offsets of topic {topic!r} must be an object of partition: offset, "
                             f"got {parts!r}")
        for p, off in parts.items():
            try:
                partition = int(p)
            except (TypeError, ValueError):
                raise ValueError(f"partition {p!r} of topic {topic!r} is not a number") from None
            if isinstance(off, bool) or not isinstance(off, int):
                raise ValueError(f"offset of {topic}-{p} must be an integer, got {off!r}")
            out[(topic, partition)] = off
    return out


def parse_offsets_json(text: str, option: str) -> Offsets:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"option '{option}' is neither 'earliest', 'latest' nor JSON: {exc}") \
            from None
    try:
        return from_json_dict(obj)
    except ValueError as exc:
        raise ValueError(f"option '{option}': {exc}") from None


def parse_assign_json(text: str) -> list[TopicPartition]:
    """`assign`: {"topicA":[0,1],"topicB":[2,4]}."""
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"option 'assign' must be JSON like {{\"topicA\":[0,1]}}: {exc}") from None
    if not isinstance(obj, dict) or not obj:
        raise ValueError("option 'assign' must be a non-empty JSON object like {\"topicA\":[0,1]}")
    out = []
    for t, parts in obj.items():
        if not isinstance(parts, list) or not all(
                isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in parts):
            raise ValueError(f"option 'assign': partitions of {t!r} must be a list of "
                             f"non-negative integers, got {parts!r}")
        out += [(t, p) for p in parts]
    return sorted(set(out))


@dataclasses.dataclass(frozen=True)
class OffsetRange:
    """[from_offset, until_offset) of one topic-partition: what one Spark task reads."""
    topic: str
    partition: int
    from_offset: int
    until_offset: int

    @property
    def size(self) -> int:
        return max(0, self.until_offset - self.from_offset)


def split_range(r: OffsetRange, parts: int) -> list[OffsetRange]:
    """`parts` contiguous pieces of near-equal size (never an empty piece)."""
    parts = max(1, min(parts, r.size))
    if parts == 1:
        return [r]
    out = []
    for i in range(parts):
        lo = r.from_offset + r.size * i // parts
        hi = r.from_offset + r.size * (i + 1) // parts
        out.append(OffsetRange(r.topic, r.partition, lo, hi))
    return out


def plan_ranges(start: Offsets, end: Offsets, min_partitions: int | None = None,
                max_records_per_partition: int | None = None) -> list[OffsetRange]:
    """One range per topic-partition with data in [start, end), split so that none holds more
    than `max_records_per_partition` records and there are at least `min_partitions` ranges
    (when there are that many records). Big ranges are split first and most, in proportion to
    their share of the records, so tasks come out of similar size."""
    ranges = [OffsetRange(t, p, start[(t, p)], end[(t, p)]) for (t, p) in sorted(end)
              if (t, p) in start and end[(t, p)] > start[(t, p)]]
    if max_records_per_partition and max_records_per_partition > 0:
        ranges = [piece for r in ranges
                  for piece in split_range(r, math.ceil(r.size / max_records_per_partition))]
    if min_partitions and len(ranges) < min_partitions:
        total = sum(r.size for r in ranges)
        if total > 0:
            # ceil, not Spark's round: "minPartitions=8" then really gives >= 8 tasks
            ranges = [piece for r in ranges
                      for piece in split_range(r, math.ceil(r.size * min_partitions / total))]
    return ranges


def rate_limit(start: Offsets, latest: Offsets, max_offsets: int) -> Offsets:
    """End offsets that take at most `max_offsets` records in total, shared between partitions
    in proportion to what each has available (largest remainders get the leftover), so a busy
    partition cannot starve the others and no trigger reads more than the cap."""
    avail = {tp: max(0, latest[tp] - start.get(tp, latest[tp])) for tp in latest}
    total = sum(avail.values())
    if total <= max_offsets:
        return dict(latest)
    share = {tp: max_offsets * n // total for tp, n in avail.items()}
    left = max_offsets - sum(share.values())
    by_remainder = sorted(avail, key=lambda tp: (-(max_offsets * avail[tp] % total), tp))
    for tp in by_remainder:
        if left <= 0:
            break
        if share[tp] < avail[tp]:
            share[tp] += 1
            left -= 1
    return {tp: (start[tp] + share[tp]) if tp in start else latest[tp] for tp in latest}


def available(start: Offsets, latest: Offsets) -> int:
    return sum(max(0, latest[tp] - start[tp]) for tp in latest if tp in start)


@dataclasses.dataclass
class Reconciled:
    """What to do with a trigger's start offsets against the partitions that exist now."""
    start: Offsets          # start offsets for every current partition (new ones: earliest)
    losses: list[str]       # human-readable data-loss findings (empty when none)


def reconcile(start: Offsets, earliest: Offsets, latest: Offsets,
              subscribed: set[TopicPartition] | None = None) -> Reconciled:
    """Compare the previous end offsets (`start`) with the partitions there are now.

    - a partition in `start` that is gone (topic deleted): loss;
    - a new partition starts at its earliest offset; loss if that is not 0 (records were
      written and aged out before we saw the partition);
    - a start offset below the partition's earliest offset: loss, resume at earliest;
    - a start offset past the latest (topic deleted and recreated): loss, resume at earliest.
    `earliest` and `latest` hold exactly the current partitions.
    """
    out: Offsets = {}
    losses = []
    for tp in sorted(set(start) - set(latest)):
        if subscribed is None or tp in subscribed:
            losses.append(f"{tp[0]}-{tp[1]} is gone (was at offset {start[tp]})")
    for tp in sorted(latest):
        lo, hi = earliest[tp], latest[tp]
        if tp not in start:
            if lo != 0:
                losses.append(f"added partition {tp[0]}-{tp[1]} starts from {lo} instead of 0")
            out[tp] = lo
        elif start[tp] < lo:
            losses.append(f"{tp[0]}-{tp[1]}: offsets {start[tp]}..{lo - 1} were deleted before "
                          f"they were read")
            out[tp] = lo
        elif start[tp] > hi:
            losses.append(f"{tp[0]}-{tp[1]}: start offset {start[tp]} is past the latest offset "
                          f"{hi} (was the topic recreated?)")
            out[tp] = lo
        else:
            out[tp] = start[tp]
    return Reconciled(out, losses)


def parse_duration_ms(text: str) -> int:
    """Spark's time strings for maxTriggerDelay: '15m', '30s', '500ms', '1h', '2d', bare ms."""
    s = text.strip().lower().replace(" ", "")
    units = [("ms", 1), ("s", 1000), ("m", 60_000), ("min", 60_000), ("h", 3_600_000),
             ("d", 86_400_000)]
    for suffix, mult in sorted(units, key=lambda u: -len(u[0])):
        if s.endswith(suffix) and s[:-len(suffix)].replace(".", "", 1).isdigit():
            return int(float(s[:-len(suffix)]) * mult)
    if s.isdigit():
        return int(s)
    raise ValueError(f"cannot read {text!r} as a duration (use e.g. 15m, 30s, 500ms)")
