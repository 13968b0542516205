"""The admin client (Kafka's Admin), trio-native, and its blocking facade.

    admin.py    AdminClient: topics, partitions, configs, ACLs, groups, offsets, quorum
    reassignments.py  its partition reassignment calls (KIP-455)
    brokers.py  its broker membership calls (UnregisterBroker, KIP-631)
    config.py   its configuration table (Kafka's keys and defaults)
    types.py    the calls' nouns: resource/ACL/config enums and the records calls take and return
    sync.py     SyncAdmin: the blocking facade on a loop thread
"""

from clients.admin.admin import AdminClient, decode_assignment
from clients.admin.sync import SyncAdmin
from clients.admin.types import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType,
                                 AlterConfigOp, AlterConfigOpType, CONFIG_SOURCES, ConfigEntry,
                                 ConfigResource, ConfigResourceType, EARLIEST, GroupDescription,
                                 GroupListing, LATEST, MAX_TIMESTAMP, MemberDescription, NewTopic,
                                 OffsetAndMetadata, PartitionDescription, PartitionReassignment,
                                 PatternType,
                                 ResourceType, TopicDescription)

__all__ = ["AclBinding", "AclBindingFilter", "AclOperation", "AclPermissionType", "AdminClient",
           "AlterConfigOp", "AlterConfigOpType", "CONFIG_SOURCES", "ConfigEntry", "ConfigResource",
           "ConfigResourceType", "EARLIEST", "GroupDescription", "GroupListing", "LATEST",
           "MAX_TIMESTAMP", "MemberDescription", "NewTopic", "OffsetAndMetadata",
           "PartitionDescription", "PartitionReassignment", "PatternType", "ResourceType", "SyncAdmin", "TopicDescription",
           "decode_assignment"]
