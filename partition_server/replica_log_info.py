"""What a broker tells the active controller for KIP-966 unclean recovery: for each replica it
hosts whose partition has no leader and an empty ISR and ELR, the leader epoch of the log's
last batch and its log end offset (Kafka's GetReplicaLogInfo answer). It rides on the broker's
heartbeats as Raftka tagged fields (wire/codegen/raftka_extensions.json); the controller side
is metadata_quorum/controller/unclean_recovery.py, whose docstring says why not an RPC.

Pure: reads a metadata image and the hosted partitions. Which partitions qualify only changes
with the image, so the scan over hosted partitions runs once per image, not per heartbeat;
only their log ends are read each time (a leaderless replica's log does not move, but a
report must be fresh after a restart or a truncation).
"""

from __future__ import annotations

from common.topic_configs import unclean_recovery_strategy
from metadata_quorum.image import MetadataImage

NO_LEADER = -1
# per heartbeat: a heartbeat must stay small (load_report.py says why); more than this many
# leaderless replicas are reported in turns, the controller keeps what it heard
MAX_REPORTED = 2_000


class ReplicaLogInfoReporter:
    def __init__(self, broker_id: int):
        self.broker_id = broker_id
        self._image: MetadataImage | None = None
        self._hosted = -1
        self._wanted: list = []         # [(topic, topic_id, partition, partition_epoch)]
        self._turn = 0                  # where the next report starts when they take turns

    def _qualifying(self, image: MetadataImage, hosted: dict) -> list:
        # a partition opened after its image came (a retried open) changes `hosted` alone
        if image is not self._image or len(hosted) != self._hosted:
            self._image, self._hosted, self._wanted = image, len(hosted), []
            for (topic, partition) in sorted(hosted):
                t = image.topics.get(topic)
                p = t.partitions.get(partition) if t is not None else None
                if p is None or p.leader != NO_LEADER or p.isr or p.elr \
                        or self.broker_id not in p.replicas:
                    continue
                # with strategy None the controller never reads these: send nothing
                if unclean_recovery_strategy(image.topic_config(topic),
                                             image.broker_config()) == "None":
                    continue
                self._wanted.append((topic, t.topic_id, partition, p.partition_epoch))
        return self._wanted

    def report(self, image: MetadataImage, hosted: dict) -> list:
        """[(topic_id, partition, partition_epoch, last_leader_epoch, log_end_offset)] for
        `hosted` ({(topic, partition): HostedPartition}) under `image`."""
        out = []
        wanted = self._qualifying(image, hosted)
        if len(wanted) > MAX_REPORTED:
            start = self._turn % len(wanted)
            self._turn = start + MAX_REPORTED
            wanted = wanted[start:start + MAX_REPORTED] + \
                wanted[:max(0, start + MAX_REPORTED - len(wanted))]
        for topic, topic_id, partition, partition_epoch in wanted:
            h = hosted.get((topic, partition))
            if h is None or h.offline:
                continue            # an offline log cannot lead: no answer from it
            log = h.log
            out.append((topic_id, partition, partition_epoch, log.epoch_cache.latest_epoch,
                        log.log_end_offset))
        return out


def by_topic(infos: list) -> dict:
    """{topic_id: [(partition, partition_epoch, last_leader_epoch, log_end_offset)]}, the
    wire's shape."""
    out: dict = {}
    for topic_id, partition, *rest in infos:
        out.setdefault(topic_id, []).append((partition, *rest))
    return out
