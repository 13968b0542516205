"""One ACL binding shape for every layer: Kafka's resource, pattern, operation and permission
enums (numbered as in the Java client, since those numbers go on the wire) and the 7-field
binding and filter that the admin client sends, the controller stores (as
AccessControlEntryRecord) and describes, and the broker's authorizer decides with.

Fields are plain ints on the wire side (the controller builds bindings from decoded requests and
records) or the IntEnums below (the admin client); an IntEnum is an int, so both compare equal.
"""

from __future__ import annotations

import dataclasses
import enum


class ResourceType(enum.IntEnum):          # org.apache.kafka.common.resource.ResourceType
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):           # org.apache.kafka.common.resource.PatternType
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):          # org.apache.kafka.common.acl.AclOperation
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(enum.IntEnum):     # org.apache.kafka.common.acl.AclPermissionType
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


@dataclasses.dataclass(frozen=True)
class AclBinding:
    """A resource pattern plus an access control entry (Kafka's AclBinding, flattened)."""
    resource_type: int                     # ResourceType
    resource_name: str
    pattern_type: int                      # PatternType
    principal: str                         # "User:alice", "User:*"
    host: str                              # an address or "*"
    operation: int                         # AclOperation
    permission_type: int                   # AclPermissionType

    @property
    def permission(self) -> int:
        """The admin client's name for `permission_type`."""
        return self.permission_type

    def as_tuple(self) -> tuple:
        """The seven fields as plain ints and strings (enum members become their numbers)."""
        return tuple(int(v) if isinstance(v, int) else v for v in dataclasses.astuple(self))

    def as_dict(self) -> dict:
        """Enum names, for output (the CLI's --json)."""
        return {"resource_type": ResourceType(self.resource_type).name,
                "resource_name": self.resource_name,
                "pattern_type": PatternType(self.pattern_type).name, "principal": self.principal,
                "host": self.host, "operation": AclOperation(self.operation).name,
                "permission": AclPermissionType(self.permission_type).name}


@dataclasses.dataclass(frozen=True)
class AclBindingFilter:
    """None / ANY match everything; pattern MATCH matches literal, '*' and prefixes."""
    resource_type: int = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: int = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: int = AclOperation.ANY
    permission_type: int = AclPermissionType.ANY

    @property
    def permission(self) -> int:
        """The admin client's name for `permission_type`."""
        return self.permission_type
