"""Leader → controller ISR changes (AlterPartition, KIP-497).

The partition state machine proposes one change at a time (`isr_change_needed`); we send them in
one AlterPartition with the partition epoch we know. On success the controller's committed record
reaches us through the metadata stream, which re-applies leadership with the new ISR. Only
INELIGIBLE_REPLICA and INVALID_REQUEST prove the change was not applied (the controller checked
them after matching our partition epoch): the pending change is dropped. A timeout or any other
error leaves it pending and it is sent again — a timed-out earlier attempt may have been
committed, and forgetting it would let the high watermark move without a replica the controller
already counts in the ISR (found by the seeded simulation, chaos_tests/sim).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from partition_server.controller_client import ControllerClient, ControllerUnavailable
from wire.errors import ErrorCode
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS

if TYPE_CHECKING:
    from partition_server.purgatory import Purgatory
    from partition_server.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

# refusals the controller makes only after our partition epoch matched its own
NOT_APPLIED = (ErrorCode.INELIGIBLE_REPLICA, ErrorCode.INVALID_REQUEST)


async def send_alter_partition(client: ControllerClient, broker_id: int,
                               replicas: ReplicaManager, purgatory: Purgatory, changes) -> None:
    """One AlterPartition with every proposed ISR change [(hosted, change)]; applied at once
    when accepted, flagged to be sent again when the answer is uncertain."""
    cls = REQUESTS[ApiKey.ALTER_PARTITION]
    by_topic: dict = {}
    for hosted, change in changes:
        by_topic.setdefault((hosted.topic, hosted.topic_id), []).append(cls.PartitionData(
            partition_index=change.partition, leader_epoch=change.leader_epoch,
            new_isr_with_epochs=[cls.BrokerState(broker_id=b, broker_epoch=-1)
                                 for b in change.new_isr],
            partition_epoch=change.partition_epoch))
    req = cls(broker_id=broker_id, broker_epoch=client.broker_epoch,
              topics=[cls.TopicData(topic_id=tid, partitions=ps)
                      for (_, tid), ps in by_topic.items()])
    before = {id(hosted): len(hosted.state.isr) for hosted, _ in changes}
    try:
        resp = await client.call_active(
            req, timeout_s=5,
            error_of=lambda r: next((p.error_code for t in r.topics for p in t.partitions), 0))
    except ControllerUnavailable:
        for hosted, _ in changes:
            hosted.state.isr_change_uncertain()
            replicas.isr_candidates.add((hosted.topic, hosted.partition))   # send again
        return
    results = {(t.topic_id, p.partition_index): p for t in resp.topics for p in t.partitions}
    changed, refused = _Lines("ISR changes"), _Lines("refused ISR changes")
    for hosted, change in changes:
        res = results.get((hosted.topic_id, change.partition))
        if res is None or res.error_code != ErrorCode.NONE:
            code = res.error_code if res is not None else -1
            refused.note("AlterPartition %s-%d → %s refused: %s", hosted.topic, change.partition,
                         list(change.new_isr),
                         ErrorCode(code).name if code in ErrorCode._value2member_map_ else code)
            if code in NOT_APPLIED:
                hosted.state.isr_change_failed()
            else:
                hosted.state.isr_change_uncertain()
                replicas.isr_candidates.add((hosted.topic, hosted.partition))
        elif replicas.get(hosted.topic, change.partition) is not hosted:
            # no longer hosted here: e.g. a reassignment this ISR change completed removed us
            # (the completion is the controller's next record), and the stream got here first
            continue
        else:
            changed.note("ISR of %s-%d is now %s", hosted.topic, change.partition, res.isr)
            # Kafka's IsrShrinks/IsrExpands, against the ISR when proposed: the metadata
            # stream may have brought the new ISR in before this answer
            if len(res.isr) < before[id(hosted)]:
                replicas.isr_shrinks += 1
            elif len(res.isr) > before[id(hosted)]:
                replicas.isr_expands += 1
            # Apply at once (same leader epoch); the metadata stream will confirm it.
            hosted.state.become_leader(res.leader_epoch, res.partition_epoch,
                                       list(hosted.state.replicas), list(res.isr), 0)
            hosted.state.maybe_advance_high_watermark()
            purgatory.notify((hosted.topic, hosted.partition))
    changed.flush()
    refused.flush()


LOGGED_EACH = 10        # more lines of one kind per answer: the first few and a count


class _Lines:
    """One AlterPartition answer's log lines of one kind: each when few, the first few and a
    count when thousands (a broker's restart at 30,000 partitions logged ~10,000 "ISR of ...
    is now" lines in seconds: a fifth of its CPU while it caught up, its event loop held)."""

    def __init__(self, kind: str):
        self.kind, self.lines, self.count = kind, [], 0

    def note(self, fmt: str, *args) -> None:
        self.count += 1
        if len(self.lines) < LOGGED_EACH:
            self.lines.append((fmt, args))

    def flush(self) -> None:
        for fmt, args in self.lines:
            log.info(fmt, *args)
        if self.count > len(self.lines):
            log.info("... and %d more %s in the same AlterPartition answer",
                     self.count - len(self.lines), self.kind)
