"""What every consumer-side partition assignor shares.

The group leader (whichever member the coordinator picks, ours or a Java/librdkafka consumer)
runs the assignor named by the protocol the group agreed on, so our names and encodings must be
Kafka's: "range", "roundrobin", "sticky", "cooperative-sticky".

`assign` is a pure function of (partition counts per topic, decoded subscriptions); member order
is Kafka's MemberInfo order (static members by group.instance.id first, then member id) so that
the same inputs give the same assignment whichever client computes it.
"""

from __future__ import annotations

import enum

from clients.consumer.assignors.protocol import Assignment, Subscription, TopicPartition


class RebalanceProtocol(enum.Enum):
    EAGER = "eager"                 # revoke everything before rejoining
    COOPERATIVE = "cooperative"     # KIP-429: revoke only what moves, then rejoin once more


def member_sort_key(item: tuple[str, Subscription]):
    member_id, sub = item
    if sub.group_instance_id is not None:
        return (0, sub.group_instance_id, member_id)
    return (1, member_id, "")


def sorted_members(subscriptions: dict[str, Subscription]) -> list[str]:
    return [m for m, _ in sorted(subscriptions.items(), key=member_sort_key)]


class PartitionAssignor:
    name = ""
    rebalance_protocol = RebalanceProtocol.EAGER

    def subscription(self, topics: list[str], owned: list[TopicPartition],
                     generation: int) -> Subscription:
        """This member's JoinGroup metadata; eager assignors still report what they own (it is
        free and lets a cooperative leader be sticky)."""
        return Subscription(topics=sorted(set(topics)), owned_partitions=sorted(owned),
                            generation_id=generation)

    def assign(self, partitions_per_topic: dict[str, int],
               subscriptions: dict[str, Subscription]) -> dict[str, Assignment]:
        raise NotImplementedError


def subscribed_partitions(partitions_per_topic: dict[str, int],
                          subscriptions: dict[str, Subscription]) -> list[TopicPartition]:
    topics = {t for s in subscriptions.values() for t in s.topics if t in partitions_per_topic}
    return [(t, p) for t in sorted(topics) for p in range(partitions_per_topic[t])]
