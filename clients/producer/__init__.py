"""The producer (Kafka's KafkaProducer), trio-native, and its blocking facade.

    producer.py             Producer: configuration, lifecycle, send, flush (the facade)
    accumulator.py          batches being filled, DeliveryFuture, RecordAccumulator (no I/O)
    partitioner.py          murmur2 for keyed records, sticky (KIP-480) for keyless ones
    sender.py               Sender: drain ready batches, Produce, answers, retries, in-flight
    pipe.py                 ProduceConnections: a pipelined connection per node, its turnstile
    idempotence.py          ProducerIdAndEpoch: producer id, epoch, sequence numbers (no I/O)
    transactions.py         Transactions: the transactional calls (KIP-98, KIP-890 part 2)
    transaction_manager.py  the transaction state machine (pure)
    sync.py                 SyncProducer: the blocking facade on a loop thread

`Producer` owns one of each collaborator (as Kafka's KafkaProducer owns its RecordAccumulator,
Sender and TransactionManager) and hands each only what it uses; producer.py's docstring
describes the whole.
"""

from clients.producer.accumulator import (DeliveryFuture, ProducerBatch, RecordAccumulator,
                                          RecordMetadata)
from clients.producer.producer import Producer
from clients.producer.sync import SendFuture, SyncProducer
from clients.producer.transaction_manager import TransactionAbortedError, TransactionStateError

__all__ = ["DeliveryFuture", "Producer", "ProducerBatch", "RecordAccumulator", "RecordMetadata",
           "SendFuture", "SyncProducer", "TransactionAbortedError", "TransactionStateError"]
