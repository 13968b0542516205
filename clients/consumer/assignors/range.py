"""Range assignor (Kafka's RangeAssignor): per topic, the members subscribed to it in member order
each take a contiguous range; the first (partitions % members) take one extra. Co-partitioned
topics therefore land on the same member, at the price of imbalance across many topics."""

from __future__ import annotations

from clients.consumer.assignors.base import PartitionAssignor, sorted_members
from clients.consumer.assignors.protocol import Assignment, Subscription


class RangeAssignor(PartitionAssignor):
    name = "range"

    def assign(self, partitions_per_topic: dict[str, int],
               subscriptions: dict[str, Subscription]) -> dict[str, Assignment]:
        order = sorted_members(subscriptions)
        result = {m: Assignment() for m in order}
        topics = sorted({t for s in subscriptions.values() for t in s.topics})
        for topic in topics:
            n_parts = partitions_per_topic.get(topic)
            if not n_parts:
                continue
            members = [m for m in order if topic in subscriptions[m].topics]
            per, extra = divmod(n_parts, len(members))
            for i, member in enumerate(members):
                start = i * per + min(i, extra)
                length = per + (1 if i < extra else 0)
                result[member].partitions.extend((topic, p) for p in range(start, start + length))
        return result
