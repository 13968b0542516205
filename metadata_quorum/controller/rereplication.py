"""Self-healing (issue 19 item 6a; Kafka leaves this to Cruise Control, Redpanda's continuous
balancing does it): the replicas of a broker unreachable for longer than
`raftka.rereplication.timeout.ms` (a dynamic cluster-wide broker config; -1, the default,
never) are re-placed onto usable brokers, so every partition regains its replication factor.

A pure decision over the image, the active controller's heartbeat times and the clock:

    broker fenced, last heartbeat ≤ now − timeout  ──▶  LOST
    broker unregistered (UnregisterBroker) yet named in a replica list  ──▶  LOST at once
    for each partition with a LOST replica and no move in progress:
        target = its replicas with each LOST one replaced in place by a usable broker (the
                 placement rule of CreateTopics and decommission: rack-aware, fewest replicas,
                 replication factor kept — a partition that cannot keep it is left alone)
    ──▶ AlterPartitionReassignments-style moves (reassignment.alter), at most
        MAX_MOVES_IN_FLIGHT in progress at once, so copies are not all started together

The moves are ordinary reassignments (KIP-455): the new replica copies from the leader, joins
the ISR, and only then does the lost one leave the replica set — so a lost broker's last copy
is never dropped before another is in sync (a partition without a usable leader — its in-sync
copies all on lost brokers — is left as it is: nothing could copy from it). A lost broker that
returns finds its replicas moved and deletes the stray logs. Heartbeat times are soft state: a
newly elected controller starts every session afresh, so a failover restarts the clock (later
healing, never earlier). A partition already moving (an operator's reassignment) is left
alone, unless its target names a lost broker: that move could never finish, so it is replaced
by its target with the lost replicas re-placed (refused, and retried, when reverting it would
need an unclean election).
"""

from __future__ import annotations

from metadata_quorum.controller import reassignment
from metadata_quorum.controller.placement import drain_plan
from metadata_quorum.image import MetadataImage

TIMEOUT_CONFIG = "raftka.rereplication.timeout.ms"
MAX_MOVES_IN_FLIGHT = 16


def timeout_ms(image: MetadataImage) -> int:
    """The cluster-wide timeout; -1 (off) when unset or unreadable."""
    try:
        return int(image.broker_config().get(TIMEOUT_CONFIG, "-1"))
    except ValueError:
        return -1


def lost_brokers(image: MetadataImage, last_seen: dict[int, int], now_ms: int,
                 timeout: int) -> set[int]:
    """Fenced brokers whose last heartbeat is at least `timeout` old. A broker without a
    heartbeat time (none since this controller became active) is not lost: its clock starts
    with the controller's session reset."""
    if timeout < 0:
        return set()
    return {b.broker_id for b in image.brokers.values()
            if b.fenced and b.broker_id in last_seen
            and now_ms - last_seen[b.broker_id] >= timeout}


def plan(image: MetadataImage, last_seen: dict[int, int], now_ms: int) -> list:
    """[(topic, partition, target)] to start now (see the module docstring)."""
    timeout = timeout_ms(image)
    if timeout < 0:
        return []
    lost = lost_brokers(image, last_seen, now_ms, timeout)
    replicas, moving = {}, []       # replicas: every partition (for the load), a move's target
    for t in image.topics.values():
        for p in t.partitions.values():
            key = (t.name, p.partition_id)
            if not reassignment.in_progress(p):
                replicas[key] = p.replicas
                continue
            replicas[key] = tuple(x for x in p.replicas if x not in p.removing_replicas)
            moving.append(key)
    # replicas of an unregistered broker (UnregisterBroker leaves them listed, as KRaft) are
    # lost at once: nothing will come back to serve them
    lost |= {b for rs in replicas.values() for b in rs if b not in image.brokers}
    if not lost:
        return []
    usable = {b.broker_id: b.rack for b in image.usable_brokers()}
    # a move onto a lost broker can never finish: "stuck"
    stuck = {key for key in moving if set(replicas[key]) & lost}
    moving = len(moving) - len(stuck)
    targets = drain_plan(usable, replicas, lost, skip_short=True)
    # without a usable leader a new replica has nothing to copy from
    targets = {key: target for key, target in targets.items()
               if image.topics[key[0]].partitions[key[1]].leader in usable}
    # a stuck move is replaced (the same partition, no new copy in flight); new moves wait
    # for room
    fixes = sorted(key for key in targets if key in stuck)
    room = max(0, MAX_MOVES_IN_FLIGHT - moving - len(fixes))
    chosen = fixes + sorted(key for key in targets if key not in stuck)[:room]
    return [(topic, partition, targets[(topic, partition)]) for topic, partition in chosen]


def records(image: MetadataImage, last_seen: dict[int, int], now_ms: int) -> list:
    """The reassignment records of `plan`, each move computed against the image the previous
    ones leave (as AlterPartitionReassignments does)."""
    out = []
    for topic, partition, target in plan(image, last_seen, now_ms):
        recs, _, _ = reassignment.alter(image, topic, partition, target)
        if recs:
            out += recs
            image = image.apply_all(image.offset + 1, recs)
    return out
