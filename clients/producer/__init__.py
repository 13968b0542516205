"""The producer (Kafka's KafkaProducer), trio-native, and its blocking facade.

    producer.py             Producer: configuration, lifecycle, send, flush (the facade)
    accumulator.py          batches being filled, DeliveryFuture, RecordAccumulator (no I/O)
    partitioner.py          murmur2 for keyed records, sticky (KIP-480) for keyless ones
    sender.py               the sender loop: drain ready batches, Produce, answers, retries
    pipe.py                 ProduceConnections: a pipelined connection per node, its turnstile
    transactions.py         the transactional calls (KIP-98, KIP-890 part 2)
    transaction_manager.py  the transaction state machine (pure)
    sync.py                 SyncProducer: the blocking facade on a loop thread

`Producer` is still one object built from mixins (`Sender` in sender.py, `Transactions` in
transactions.py) that share its state (accumulator, producer id and sequences, in-flight
counts); the per-node connections are a collaborator (`ProduceConnections`). producer.py's
docstring describes the whole.
"""

from clients.producer.accumulator import (DeliveryFuture, ProducerBatch, RecordAccumulator,
                                          RecordMetadata)
from clients.producer.producer import Producer
from clients.producer.sync import SendFuture, SyncProducer
from clients.producer.transaction_manager import TransactionAbortedError, TransactionStateError

__all__ = ["DeliveryFuture", "Producer", "ProducerBatch", "RecordAccumulator", "RecordMetadata",
           "SendFuture", "SyncProducer", "TransactionAbortedError", "TransactionStateError"]
