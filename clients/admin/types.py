"""The admin client's nouns: Kafka's resource, pattern, operation and config enums (numbered as
in the Java client, since those numbers go on the wire) and the plain records the calls take and
return. Split from admin.py so that module is about the calls; admin.py re-exports them all."""

from __future__ import annotations

import dataclasses
import enum

from clients.cluster import TopicPartition
from wire.errors import KafkaError
# the one ACL shape and Kafka's ACL enums, shared with the controller and the authorizer
from common.acl import (AclBinding, AclBindingFilter, AclOperation,  # noqa: F401 - re-exported
                        AclPermissionType, PatternType, ResourceType)


class ConfigResourceType(enum.IntEnum):    # org.apache.kafka.common.config.ConfigResource.Type
    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16
    GROUP = 32


class AlterConfigOpType(enum.IntEnum):
    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


CONFIG_SOURCES = {0: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG",
                  3: "DYNAMIC_DEFAULT_BROKER_CONFIG", 4: "STATIC_BROKER_CONFIG",
                  5: "DEFAULT_CONFIG", 6: "DYNAMIC_BROKER_LOGGER_CONFIG",
                  7: "CLIENT_METRICS_CONFIG", 8: "GROUP_CONFIG"}

EARLIEST = -2          # ListOffsets timestamp specs
LATEST = -1
MAX_TIMESTAMP = -3


@dataclasses.dataclass
class NewTopic:
    name: str
    num_partitions: int = -1          # -1: the broker's num.partitions
    replication_factor: int = -1      # -1: the broker's default.replication.factor
    configs: dict[str, str] = dataclasses.field(default_factory=dict)
    replica_assignment: dict[int, list[int]] | None = None


@dataclasses.dataclass(frozen=True)
class PartitionDescription:
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class TopicDescription:
    name: str
    topic_id: str
    is_internal: bool
    partitions: list[PartitionDescription]


@dataclasses.dataclass(frozen=True)
class ConfigResource:
    type: ConfigResourceType
    name: str


@dataclasses.dataclass(frozen=True)
class ConfigEntry:
    name: str
    value: str | None
    source: str
    read_only: bool
    sensitive: bool


@dataclasses.dataclass(frozen=True)
class AlterConfigOp:
    name: str
    value: str | None = None
    op: AlterConfigOpType = AlterConfigOpType.SET


@dataclasses.dataclass(frozen=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str
    type: str


@dataclasses.dataclass(frozen=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: list[TopicPartition]


@dataclasses.dataclass(frozen=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: list[MemberDescription]
    coordinator: int


@dataclasses.dataclass(frozen=True)
class OffsetAndMetadata:
    offset: int
    metadata: str = ""
    leader_epoch: int = -1


@dataclasses.dataclass(frozen=True)
class ReplicaInfo:
    """One replica in a log directory (Kafka's ReplicaInfo): bytes on disk, how far its log end
    is behind the high watermark (a follower still copying), and whether it is the future copy
    of an AlterReplicaLogDirs move."""
    size: int
    offset_lag: int
    is_future: bool = False


@dataclasses.dataclass(frozen=True)
class LogDirDescription:
    """One log directory of a broker (Kafka's LogDirDescription): its path, the error it
    reports (None when healthy: KAFKA_STORAGE_ERROR once it failed), the replicas in it and the
    volume's total and usable bytes (-1 when the broker does not say: DescribeLogDirs < v4)."""
    path: str
    error: KafkaError | None
    replicas: dict[TopicPartition, ReplicaInfo]
    total_bytes: int = -1
    usable_bytes: int = -1


@dataclasses.dataclass(frozen=True)
class PartitionReassignment:
    """A move in progress (KIP-455): the replica set now (target + leaving), and both halves."""
    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...]
    removing_replicas: tuple[int, ...]
