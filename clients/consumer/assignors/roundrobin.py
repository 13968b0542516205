"""Round-robin assignor (Kafka's RoundRobinAssignor): all subscribed partitions sorted by
(topic, partition) are dealt to members in member order, skipping members not subscribed to the
partition's topic."""

from __future__ import annotations

from clients.consumer.assignors.base import (PartitionAssignor, sorted_members,
                                             subscribed_partitions)
from clients.consumer.assignors.protocol import Assignment, Subscription


class RoundRobinAssignor(PartitionAssignor):
    name = "roundrobin"

    def assign(self, partitions_per_topic: dict[str, int],
               subscriptions: dict[str, Subscription]) -> dict[str, Assignment]:
        order = sorted_members(subscriptions)
        result = {m: Assignment() for m in order}
        if not order:
            return result
        i = 0
        for topic, partition in subscribed_partitions(partitions_per_topic, subscriptions):
            # Some member subscribes to every listed topic, so this loop ends within one turn.
            while topic not in subscriptions[order[i % len(order)]].topics:
                i += 1
            result[order[i % len(order)]].partitions.append((topic, partition))
            i += 1
        return result
