"""The producer's collaborators work alone, given only their narrow dependencies (no Producer):
the producer id/sequence bookkeeping, and a Sender sealing and settling batches of an
accumulator it was handed."""

from __future__ import annotations

from clients.cluster import TopicPartition
from clients.producer.accumulator import RecordAccumulator
from clients.producer.config import PRODUCER
from clients.producer.idempotence import ProducerIdAndEpoch
from clients.producer.sender import Sender
from wire.records.batch import decode_batch

TP = TopicPartition("t", 0)


def test_sequences_restart_with_each_producer_id():
    ids = ProducerIdAndEpoch()
    ids.reset(7, 0)
    assert ids.take_sequence(TP, 3) == 0 and ids.take_sequence(TP, 2) == 3
    ids.acknowledged(TP, 7, 0, 0, 3)
    assert not ids.predecessor_unacked(TP, 7, 0, 3)      # follows the acknowledged batch
    assert ids.predecessor_unacked(TP, 7, 0, 5)          # a batch before it is missing
    assert ids.predecessor_unacked(TP, 6, 0, 3)          # sealed under a replaced id
    ids.need_new_producer_id = True
    ids.reset(8, 0)
    assert ids.take_sequence(TP, 1) == 0 and not ids.need_new_producer_id
    assert ids.next_sequence[TP] == 1 and TP not in ids.acked_next_sequence


def test_sender_alone_seals_with_sequences_and_completes():
    cfg = PRODUCER.parse({"bootstrap.servers": "unused:9092"})
    acc = RecordAccumulator(cfg["batch.size"], 0.0, cfg["buffer.memory"], 0)
    ids = ProducerIdAndEpoch()
    ids.reset(42, 3)
    sender = Sender(None, acc, ids, cfg, idempotent=True, connections=None)
    got = []
    for value in (b"a", b"b"):
        fut, _ = acc.append(TP, None, value, None, 1000, now=0.0)
        fut.add_callback(lambda meta, exc: got.append((meta.offset, exc)))
        sender.incomplete += 1
    (batch,) = acc.drain([TP], 1 << 20)
    header = decode_batch(sender._seal(batch)).header
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (42, 3, 0)
    assert ids.next_sequence[TP] == 2
    sender._complete_batch(batch, 100, -1)
    assert got == [(100, None), (101, None)]
    assert sender.incomplete == 0 and acc.used == 0
    assert ids.acked_next_sequence[TP] == 2
