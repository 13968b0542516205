"""The producer id, epoch and per-partition sequence numbers (KIP-98 idempotence); no I/O.

Kafka's Java client keeps these in `ProducerIdAndEpoch` and the `TxnPartitionMap` of its
`TransactionManager`; here they are one small object shared by the two parts of the producer
that change them: the `Sender` (takes sequence numbers when it seals a batch, records what was
acknowledged, asks for a new producer id after a failed batch left a gap) and the transactional
calls (`Transactions`: InitProducerId for a transactional.id, the epoch EndTxn v5 hands back).
A new producer id or epoch always restarts every partition's sequence at 0, so `reset` is the
only way to change them.
"""

from __future__ import annotations

from clients.cluster import TopicPartition


class ProducerIdAndEpoch:
    __slots__ = ("producer_id", "producer_epoch", "next_sequence", "acked_next_sequence",
                 "need_new_producer_id")

    def __init__(self):
        self.producer_id = -1           # -1 until the first InitProducerId
        self.producer_epoch = -1
        # the sequence the partition's next new batch takes
        self.next_sequence: dict[TopicPartition, int] = {}
        # the sequence right after the last acknowledged batch of the partition
        self.acked_next_sequence: dict[TopicPartition, int] = {}
        # a batch that took a sequence number failed for good: later batches would leave a gap,
        # so the (non-transactional) producer takes a new producer id before sealing any more
        self.need_new_producer_id = False

    def reset(self, producer_id: int, producer_epoch: int) -> None:
        """A new producer id or epoch: sequences start over at 0."""
        self.producer_id, self.producer_epoch = producer_id, producer_epoch
        self.next_sequence.clear()
        self.acked_next_sequence.clear()
        self.need_new_producer_id = False

    def take_sequence(self, tp: TopicPartition, record_count: int) -> int:
        """The base sequence for a batch of `record_count` records; advances the partition's."""
        seq = self.next_sequence.get(tp, 0)
        self.next_sequence[tp] = (seq + record_count) & 0x7FFFFFFF
        return seq

    def is_current(self, producer_id: int, producer_epoch: int) -> bool:
        return producer_id == self.producer_id and producer_epoch == self.producer_epoch

    def acknowledged(self, tp: TopicPartition, producer_id: int, producer_epoch: int,
                     base_sequence: int, record_count: int) -> None:
        if base_sequence >= 0 and self.is_current(producer_id, producer_epoch):
            self.acked_next_sequence[tp] = (base_sequence + record_count) & 0x7FFFFFFF

    def predecessor_unacked(self, tp: TopicPartition, producer_id: int, producer_epoch: int,
                            base_sequence: int) -> bool:
        """Whether the batch before this one (same partition) was not acknowledged: it failed,
        is being retried, or this one carries a replaced producer id. Then an
        OUT_OF_ORDER_SEQUENCE_NUMBER for it is only a symptom of that gap."""
        if not self.is_current(producer_id, producer_epoch):
            return True
        return self.acked_next_sequence.get(tp, 0) != base_sequence
