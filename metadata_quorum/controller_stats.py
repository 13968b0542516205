"""The active controller's own counters for /metrics (health.py renders them): Raft commit time
and leader elections, clean and unclean (Kafka's controller metrics LeaderElectionRateAndTimeMs
and UncleanLeaderElectionsPerSec, as counters).

An election is a committed PartitionChangeRecord naming a leader other than the partition's
current one (a new leader ≥ 0; a partition going offline, leader -1, is not an election). It
is unclean when the new leader was not in the partition's ISR before the change (KIP-704:
`unclean.leader.election.enable`, or a reassignment's unclean revert). Classified against
the image the commit was proposed on, counted once the commit succeeds: on the controller that
made the change, like Kafka's (a new active controller starts at 0)."""

from __future__ import annotations

from common.request_metrics import Histogram
from metadata_quorum.records import PartitionChangeRecord


def elections(image, records) -> tuple[int, int]:
    """(clean, unclean) leader elections `records` make on top of `image`."""
    clean = unclean = 0
    for rec in records:
        if not isinstance(rec, PartitionChangeRecord) or rec.leader is None or rec.leader < 0:
            continue
        topic = image.topic_by_id(rec.topic_id)
        p = topic.partitions.get(rec.partition_id) if topic is not None else None
        if p is None or p.leader == rec.leader:
            continue
        if rec.leader in p.isr:
            clean += 1
        else:
            unclean += 1
    return clean, unclean


class ControllerStats:
    def __init__(self):
        self.commit_time = Histogram()
        self.clean_elections = 0
        self.unclean_elections = 0

    def committed(self, seconds: float, elected: tuple[int, int]) -> None:
        self.commit_time.observe_seconds(seconds)
        self.clean_elections += elected[0]
        self.unclean_elections += elected[1]

    def families(self) -> list:
        return [
            ("raftka_controller_commit_time_ms", "histogram",
             "Time from proposing a command's records to their Raft commit, in ms (the active "
             "controller's commit latency).", self.commit_time.samples()),
            ("raftka_controller_leader_elections_total", "counter",
             "Partition leader elections committed by this controller, by kind (clean: the new "
             "leader was in the ISR; unclean: it was not).",
             [('{kind="clean"}', self.clean_elections),
              ('{kind="unclean"}', self.unclean_elections)]),
        ]
