"""Live throughput and latency for the charts, from what a client may read.

The brokers' /metrics endpoints are not reachable through the Kafka protocol, and the console
must work with only client access (and the user's ACLs), so it samples instead:

* throughput: every partition's log end offset (ListOffsets LATEST, one request per leader)
  every `interval` seconds; messages/s of a topic = the sum of its partitions' offset growth
  over the time between two samples. Records deleted or truncated never count negative.
* latency: how long that ListOffsets round took as seen from the console — a client-observed
  request latency through the cluster (connection, broker queue and handling), not the
  brokers' internal histograms.

`History` is the pure part (samples in, series out); `sample` is the one I/O step.
"""

from __future__ import annotations

import collections
import dataclasses
import time

import trio

from clients.admin import LATEST, AdminClient
from clients.cluster import TopicPartition
from wire.errors import KafkaError


@dataclasses.dataclass(frozen=True)
class Sample:
    at: float                                  # seconds since the epoch
    ends: dict[TopicPartition, int]
    latency_ms: float | None                   # None: the round failed
    error: str | None = None


class History:
    """The last `keep` samples, and the rates between consecutive ones."""

    def __init__(self, keep: int = 150):
        self.samples: collections.deque[Sample] = collections.deque(maxlen=keep)

    def add(self, sample: Sample) -> None:
        self.samples.append(sample)

    def series(self) -> dict:
        """{"t": [sample times], "total": [msgs/s], "topics": {topic: [msgs/s]},
        "latency_ms": [...], "error": last error or None}; rates start at the second sample."""
        good = [s for s in self.samples if s.error is None]
        times, total, topics = [], [], collections.defaultdict(list)
        names = sorted({tp.topic for s in good for tp in s.ends})
        for prev, cur in zip(good, good[1:]):
            dt = cur.at - prev.at
            if dt <= 0:
                continue
            per = dict.fromkeys(names, 0.0)
            for tp, end in cur.ends.items():
                before = prev.ends.get(tp)
                if before is not None and end > before:
                    per[tp.topic] += (end - before) / dt
            times.append(round(cur.at, 3))
            total.append(round(sum(per.values()), 3))
            for name in names:
                topics[name].append(round(per[name], 3))
        last = self.samples[-1] if self.samples else None
        return {"t": times, "total": total, "topics": dict(topics),
                "latency_t": [round(s.at, 3) for s in good],
                "latency_ms": [s.latency_ms for s in good],
                "error": last.error if last else None}


async def sample(admin: AdminClient) -> Sample:
    at = time.time()
    try:
        descs = await admin.describe_topics(await admin.list_topics(include_internal=False))
        tps = [TopicPartition(n, p.partition) for n, d in descs.items()
               if not isinstance(d, KafkaError) for p in d.partitions if p.leader >= 0]
        t0 = trio.current_time()
        ends = await admin.list_offsets({tp: LATEST for tp in tps}) if tps else {}
        latency = (trio.current_time() - t0) * 1000
    except Exception as exc:  # noqa: BLE001 - a failed round is a gap in the chart, shown as text
        return Sample(at, {}, None, f"{type(exc).__name__}: {exc}")
    return Sample(at, {tp: v[0] for tp, v in ends.items()}, round(latency, 3))


async def run_sampler(admin: AdminClient, history: History, interval_s: float) -> None:
    """Forever: one sample every `interval_s` (cancelled when the console stops)."""
    while True:
        history.add(await sample(admin))
        await trio.sleep(interval_s)
