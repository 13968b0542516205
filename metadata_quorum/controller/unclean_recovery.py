"""Unclean recovery (KIP-966 part 2): when a partition has no leader and both its ISR and its
ELR are empty — every copy known to hold the committed records came back from an unclean
shutdown — elect the replica with the longest log instead of a guess.

Who answers. Kafka's controller asks the replicas with GetReplicaLogInfo (a controller→broker
RPC our schemas predate). Raftka's controllers never open connections to brokers, so the
brokers volunteer the same facts on their heartbeats (Raftka tagged fields on BrokerHeartbeat,
wire/codegen/raftka_extensions.json): each replica of a partition its image shows leaderless
with an empty ISR and ELR reports its log's last leader epoch and log end offset, tagged with
the partition epoch it saw. No new connection, port or retry path; the cost is one heartbeat
interval of latency. A leaderless replica's log does not change (nobody leads it, so nobody
fetches), so a report stays true for as long as its partition epoch is current.

Per partition (soft state, like heartbeats: a new active controller starts empty and hears
every report again within one heartbeat interval):
    waiting ──a report from a usable replica, current broker and partition epochs──▶ answered
    answered ──strategy says enough──▶ elect the longest log (highest last leader epoch, then
        highest log end offset; ties: a last-known-ELR member, then replica order): one
        PartitionChangeRecord with the new leader (leader_epoch + 1), ISR = (leader), ELR and
        last-known ELR emptied. The others truncate to it by the usual follower path.
    any partition change ──▶ older reports no longer count (partition epoch moved).

Strategies (`unclean.recovery.strategy`, per topic or cluster-wide dynamic; the KIP's default
Balanced):
    None        today's behaviour (replication_control._elect_with): once every last-known ELR
                member is back, the first of them (the former last ISR member) leads.
    Balanced    wait until every last-known ELR member answered, or a majority of the replicas
                answered, or `unclean.recovery.timeout.ms` (cluster-wide, default 5 min) passed
                since this controller saw the partition need recovery — then elect among the
                answers.
    Aggressive  elect among whatever answered, as soon as one did.
`unclean.leader.election.enable=true` keeps its meaning (any usable replica at once, chosen by
replication_control) and so comes first.
"""

from __future__ import annotations

import dataclasses
import uuid

from common.topic_configs import UNCLEAN_RECOVERY_TIMEOUT_MS, unclean_recovery_strategy
from metadata_quorum import records as r
from metadata_quorum.image import MetadataImage

NO_LEADER = -1


@dataclasses.dataclass(frozen=True)
class ReplicaLogInfo:
    """What one replica said about its log (Kafka's GetReplicaLogInfo answer)."""
    broker_epoch: int          # the registration that spoke: a restart may have changed the log
    partition_epoch: int       # the partition state it saw
    last_leader_epoch: int     # leader epoch of its last batch, -1 for an empty log
    log_end_offset: int


def needs_recovery(p) -> bool:
    return p.leader == NO_LEADER and not p.isr and not p.elr


def strategy(image: MetadataImage, topic: str) -> str:
    return unclean_recovery_strategy(image.topic_config(topic), image.broker_config())


def timeout_ms(image: MetadataImage) -> int:
    try:
        return int(image.broker_config().get("unclean.recovery.timeout.ms",
                                             UNCLEAN_RECOVERY_TIMEOUT_MS))
    except ValueError:
        return UNCLEAN_RECOVERY_TIMEOUT_MS


def choose(answers: dict[int, ReplicaLogInfo], p) -> int:
    """The replica with the longest log among `answers` (non-empty)."""
    order = list(p.last_known_elr) + [x for x in p.replicas if x not in p.last_known_elr]

    def rank(broker):
        info = answers[broker]
        pos = order.index(broker) if broker in order else len(order)
        return (info.last_leader_epoch, info.log_end_offset, -pos)
    return max(answers, key=rank)


def ready(kind: str, answered: set, p, waited_ms: int, limit_ms: int) -> bool:
    """Has the strategy heard enough to elect? (`answered` is non-empty.)"""
    if kind == "Aggressive":
        return True
    if kind != "Balanced":
        return False
    last_known = set(p.last_known_elr) & set(p.replicas)
    if last_known and last_known <= answered:
        return True
    return 2 * len(answered & set(p.replicas)) > len(p.replicas) or waited_ms >= limit_ms


class LeaderlessPartitions:
    """Each topic's partitions that need recovery, found again only for a topic whose object
    changed: the image replaces a topic's TopicImage whenever one of its partitions changes
    (never mutated once published), so the same object has the same answer. Every tick of the
    active controller asks (`elections`): scanning every partition cost 3.4 ms per tick at
    30,000 partitions, 1.4 % of a core with nothing to do; now O(topics) plus the partitions
    of the topics that changed."""

    def __init__(self) -> None:
        self._by_name: dict = {}       # topic name → (the TopicImage looked at, its leaderless)

    def of(self, topic) -> list:
        seen = self._by_name.get(topic.name)
        if seen is not None and seen[0] is topic:
            return seen[1]
        found = [p for p in topic.partitions.values() if needs_recovery(p)]
        self._by_name[topic.name] = (topic, found)
        return found

    def keep_only(self, topics: dict) -> None:
        """Forget deleted topics (and the old TopicImages held for them)."""
        if len(self._by_name) > len(topics):
            self._by_name = {n: v for n, v in self._by_name.items() if n in topics}


class ReplicaLogInfos:
    """The reports this controller heard, and when it first saw each partition need recovery."""

    def __init__(self) -> None:
        self.reports: dict = {}        # (topic_id, partition) → {broker: ReplicaLogInfo}
        self.since_ms: dict = {}       # (topic_id, partition) → first tick that saw it need it
        self.leaderless = LeaderlessPartitions()

    def record(self, broker_id: int, broker_epoch: int, infos) -> None:
        """A heartbeat of `broker_id` was accepted carrying `infos`:
        [(topic_id, partition, partition_epoch, last_leader_epoch, log_end_offset)]."""
        for topic_id, partition, partition_epoch, last_epoch, leo in infos:
            self.reports.setdefault((topic_id, partition), {})[broker_id] = ReplicaLogInfo(
                broker_epoch, partition_epoch, last_epoch, leo)

    def answers(self, key, p, usable: dict[int, int]) -> dict[int, ReplicaLogInfo]:
        """Reports that still hold: from a usable replica's current registration, about the
        partition's current state. A reassignment's new replica (adding) never was in sync —
        the move ends when it joins the ISR — so it is not a candidate: its log may be empty.
        `usable`: {broker id: epoch} of the usable brokers (`usable_epochs`)."""
        return {b: info for b, info in self.reports.get(key, {}).items()
                if b in p.replicas and b not in p.adding_replicas
                and usable.get(b) == info.broker_epoch
                and info.partition_epoch == p.partition_epoch}

    def forget_except(self, keys: set) -> None:
        for table in (self.reports, self.since_ms):
            for key in [k for k in table if k not in keys]:
                del table[key]


def usable_epochs(image: MetadataImage) -> dict[int, int]:
    return {b.broker_id: b.broker_epoch for b in image.usable_brokers()}


def elections(image: MetadataImage, infos: ReplicaLogInfos, now_ms: int) -> list:
    """Records electing the longest-log replica of each partition that needs recovery and whose
    strategy has heard enough; forgets the state of partitions that no longer need it. (Every
    tick: while a full restart's brokers are fenced every partition needs recovery, and the
    usable brokers were sorted again for each — seconds of the controller's loop at 30,000.)"""
    records, pending = [], set()
    limit = timeout_ms(image)
    usable = usable_epochs(image)
    for topic in image.topics.values():
        kind = strategy(image, topic.name)
        if kind == "None":
            continue
        for p in infos.leaderless.of(topic):
            key = (topic.topic_id, p.partition_id)
            pending.add(key)
            since = infos.since_ms.setdefault(key, now_ms)
            answers = infos.answers(key, p, usable)
            if answers and ready(kind, set(answers), p, now_ms - since, limit):
                records.append(_elect(topic.topic_id, p, choose(answers, p)))
    infos.forget_except(pending)
    infos.leaderless.keep_only(image.topics)
    return records


def _elect(topic_id: uuid.UUID, p, leader: int) -> r.PartitionChangeRecord:
    # its log is the truth now: nobody else is known to hold the committed records
    return r.PartitionChangeRecord(topic_id, p.partition_id, leader=leader, isr=(leader,),
                                   elr=() if p.elr else None,
                                   last_known_elr=() if p.last_known_elr else None)
