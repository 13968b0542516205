"""The consumer (Kafka's KafkaConsumer), trio-native, and its blocking facade.

    consumer.py     Consumer: subscribe/assign, poll, positions, seek, commit
    config.py       the consumer's configuration table
    fetcher.py      Fetch answers -> ConsumerRecords (pure: CRC, decompression, read_committed)
    offsets.py      ListOffsets by leader: earliest, latest, by timestamp
    group/          membership in a consumer group: classic (JoinGroup/SyncGroup) and
                    KIP-848 (ConsumerGroupHeartbeat), offset commits, rebalance listeners
    assignors/      client-side assignors of the classic protocol (range, roundrobin, sticky,
                    cooperative-sticky)
    sync.py         SyncConsumer: the blocking facade on a loop thread
"""

from clients.consumer.config import parse_config
from clients.consumer.consumer import Consumer
from clients.consumer.fetcher import ConsumerRecord, TopicPartition
from clients.consumer.group.coordinator import CommitFailedError
from clients.consumer.offsets import NoOffsetForPartitionError
from clients.consumer.sync import SyncConsumer

__all__ = ["CommitFailedError", "Consumer", "ConsumerRecord", "NoOffsetForPartitionError",
           "SyncConsumer", "TopicPartition", "parse_config"]
