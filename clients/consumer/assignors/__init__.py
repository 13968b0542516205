"""Consumer-side partition assignors for classic consumer groups: range, roundrobin, sticky and
cooperative-sticky, named and encoded as Java and librdkafka name and encode them so that our
consumers can share a group with theirs. See protocol.py for the wire encodings."""

from __future__ import annotations

from clients.consumer.assignors.base import PartitionAssignor, RebalanceProtocol
from clients.consumer.assignors.protocol import (PROTOCOL_TYPE, Assignment, Subscription,
                                                 decode_assignment, decode_subscription,
                                                 encode_assignment, encode_subscription)
from clients.consumer.assignors.range import RangeAssignor
from clients.consumer.assignors.roundrobin import RoundRobinAssignor
from clients.consumer.assignors.sticky import CooperativeStickyAssignor, StickyAssignor

ASSIGNORS: dict[str, type[PartitionAssignor]] = {
    cls.name: cls for cls in (RangeAssignor, RoundRobinAssignor, StickyAssignor,
                              CooperativeStickyAssignor)
}


def get_assignor(name: str) -> PartitionAssignor:
    """By Kafka's protocol name; Java class names (org.apache.kafka...RangeAssignor) work too so
    that a `partition.assignment.strategy` copied from a Java config is understood."""
    key = name.strip()
    java = {"RangeAssignor": "range", "RoundRobinAssignor": "roundrobin",
            "StickyAssignor": "sticky", "CooperativeStickyAssignor": "cooperative-sticky"}
    key = java.get(key.rsplit(".", 1)[-1], key)
    if key not in ASSIGNORS:
        raise ValueError(f"unknown partition.assignment.strategy {name!r}; "
                         f"expected one of {', '.join(ASSIGNORS)}")
    return ASSIGNORS[key]()


__all__ = ["ASSIGNORS", "Assignment", "CooperativeStickyAssignor", "PROTOCOL_TYPE",
           "PartitionAssignor", "RangeAssignor", "RebalanceProtocol", "RoundRobinAssignor",
           "StickyAssignor", "Subscription", "decode_assignment", "decode_subscription",
           "encode_assignment", "encode_subscription", "get_assignor"]
