"""The brokers' load reports as the active controller heard them (issue 19 item 6b): the bytes
on disk of each partition, from its leader's heartbeats (partition_server/load_report.py says
what a report holds and when it is sent).

Soft state, never logged, like heartbeat times: a controller elected later starts empty and is
sent full reports (a broker reports in full to every new connection). Until every usable broker
has sent this controller a full report, the balancer's disk goal waits: sizes from some brokers
only would make the others look empty.
"""

from __future__ import annotations


class LoadReports:
    def __init__(self) -> None:
        self.sizes: dict = {}           # {(topic, partition): bytes}, from its leader
        self.full_from: set = set()     # brokers whose full report this controller holds

    def record(self, broker_id: int, full: bool, sizes: dict) -> None:
        """A heartbeat of `broker_id` was accepted with these (topic, partition) sizes."""
        if full:
            self.full_from.add(broker_id)
        self.sizes.update(sizes)

    def complete_for(self, brokers) -> bool:
        return all(b in self.full_from for b in brokers)

    def current(self, image) -> dict:
        """Sizes of partitions that still exist; forgets the rest (deleted topics)."""
        gone = [tp for tp in self.sizes if (t := image.topics.get(tp[0])) is None
                or tp[1] not in t.partitions]
        for tp in gone:
            del self.sizes[tp]
        return self.sizes
