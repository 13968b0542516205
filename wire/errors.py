"""Kafka error codes as typed errors.

`ErrorCode` carries every code of Kafka's protocol (names as in Kafka's `Errors` enum) with its
`retriable` and `invalid_metadata` flags (Kafka's RetriableException / InvalidMetadataException
families): a client retries retriable errors and refreshes metadata on invalid-metadata ones.
Each code has an exception class (`ErrorCode.X.exception`, `error_for_code(n)`), all subclasses of
`KafkaError`, for code that prefers raising to returning codes.

`DecodeError` is the one exception a peer's garbage can raise anywhere in `wire/`: a server
answers it by closing that connection, and nothing else.
"""

from __future__ import annotations

import enum


class DecodeError(ValueError):
    """Bytes from a peer that do not decode (truncated, oversized, malformed)."""


R, M = 1, 2   # flags: retriable, invalid metadata

_CODES = [
    # (code, name, flags, message)
    (-1, "UNKNOWN_SERVER_ERROR", 0, "The server experienced an unexpected error when processing the request."),
    (0, "NONE", 0, ""),
    (1, "OFFSET_OUT_OF_RANGE", 0, "The requested offset is not within the range of offsets maintained by the server."),
    (2, "CORRUPT_MESSAGE", R, "This message has failed its CRC checksum, exceeds the valid size, has a null key for a compacted topic, or is otherwise corrupt."),
    (3, "UNKNOWN_TOPIC_OR_PARTITION", R | M, "This server does not host this topic-partition."),
    (4, "INVALID_FETCH_SIZE", 0, "The requested fetch size is invalid."),
    (5, "LEADER_NOT_AVAILABLE", R | M, "There is no leader for this topic-partition as we are in the middle of a leadership election."),
    (6, "NOT_LEADER_OR_FOLLOWER", R | M, "For requests intended only for the leader, this error indicates that the broker is not the current leader. For requests intended for any replica, this error indicates that the broker is not a replica of the topic partition."),
    (7, "REQUEST_TIMED_OUT", R, "The request timed out."),
    (8, "BROKER_NOT_AVAILABLE", 0, "The broker is not available."),
    (9, "REPLICA_NOT_AVAILABLE", R | M, "The replica is not available for the requested topic-partition."),
    (10, "MESSAGE_TOO_LARGE", 0, "The request included a message larger than the max message size the server will accept."),
    (11, "STALE_CONTROLLER_EPOCH", 0, "The controller moved to another broker."),
    (12, "OFFSET_METADATA_TOO_LARGE", 0, "The metadata field of the offset request was too large."),
    (13, "NETWORK_EXCEPTION", R | M, "The server disconnected before a response was received."),
    (14, "COORDINATOR_LOAD_IN_PROGRESS", R, "The coordinator is loading and hence can't process requests."),
    (15, "COORDINATOR_NOT_AVAILABLE", R, "The coordinator is not available."),
    (16, "NOT_COORDINATOR", R, "This is not the correct coordinator."),
    (17, "INVALID_TOPIC_EXCEPTION", 0, "The request attempted to perform an operation on an invalid topic."),
    (18, "RECORD_LIST_TOO_LARGE", 0, "The request included message batch larger than the configured segment size on the server."),
    (19, "NOT_ENOUGH_REPLICAS", R, "Messages are rejected since there are fewer in-sync replicas than required."),
    (20, "NOT_ENOUGH_REPLICAS_AFTER_APPEND", R, "Messages are written to the log, but to fewer in-sync replicas than required."),
    (21, "INVALID_REQUIRED_ACKS", 0, "Produce request specified an invalid value for required acks."),
    (22, "ILLEGAL_GENERATION", 0, "Specified group generation id is not valid."),
    (23, "INCONSISTENT_GROUP_PROTOCOL", 0, "The group member's supported protocols are incompatible with those of existing members or first group member tried to join with empty protocol type or empty protocol list."),
    (24, "INVALID_GROUP_ID", 0, "The group id is invalid."),
    (25, "UNKNOWN_MEMBER_ID", 0, "The coordinator is not aware of this member."),
    (26, "INVALID_SESSION_TIMEOUT", 0, "The session timeout is not within the range allowed by the broker (as configured by group.min.session.timeout.ms and group.max.session.timeout.ms)."),
    (27, "REBALANCE_IN_PROGRESS", 0, "The group is rebalancing, so a rejoin is needed."),
    (28, "INVALID_COMMIT_OFFSET_SIZE", 0, "The committing offset data size is not valid."),
    (29, "TOPIC_AUTHORIZATION_FAILED", 0, "Topic authorization failed."),
    (30, "GROUP_AUTHORIZATION_FAILED", 0, "Group authorization failed."),
    (31, "CLUSTER_AUTHORIZATION_FAILED", 0, "Cluster authorization failed."),
    (32, "INVALID_TIMESTAMP", 0, "The timestamp of the message is out of acceptable range."),
    (33, "UNSUPPORTED_SASL_MECHANISM", 0, "The broker does not support the requested SASL mechanism."),
    (34, "ILLEGAL_SASL_STATE", 0, "Request is not valid given the current SASL state."),
    (35, "UNSUPPORTED_VERSION", 0, "The version of API is not supported."),
    (36, "TOPIC_ALREADY_EXISTS", 0, "Topic with this name already exists."),
    (37, "INVALID_PARTITIONS", 0, "Number of partitions is below 1."),
    (38, "INVALID_REPLICATION_FACTOR", 0, "Replication factor is below 1 or larger than the number of available brokers."),
    (39, "INVALID_REPLICA_ASSIGNMENT", 0, "Replica assignment is invalid."),
    (40, "INVALID_CONFIG", 0, "Configuration is invalid."),
    (41, "NOT_CONTROLLER", R, "This is not the correct controller for this cluster."),
    (42, "INVALID_REQUEST", 0, "This most likely occurs because of a request being malformed by the client library or the message was sent to an incompatible broker. See the broker logs for more details."),
    (43, "UNSUPPORTED_FOR_MESSAGE_FORMAT", 0, "The message format version on the broker does not support the request."),
    (44, "POLICY_VIOLATION", 0, "Request parameters do not satisfy the configured policy."),
    (45, "OUT_OF_ORDER_SEQUENCE_NUMBER", 0, "The broker received an out of order sequence number."),
    (46, "DUPLICATE_SEQUENCE_NUMBER", 0, "The broker received a duplicate sequence number."),
    (47, "INVALID_PRODUCER_EPOCH", 0, "Producer attempted to produce with an old epoch."),
    (48, "INVALID_TXN_STATE", 0, "The producer attempted a transactional operation in an invalid state."),
    (49, "INVALID_PRODUCER_ID_MAPPING", 0, "The producer attempted to use a producer id which is not currently assigned to its transactional id."),
    (50, "INVALID_TRANSACTION_TIMEOUT", 0, "The transaction timeout is larger than the maximum value allowed by the broker (as configured by transaction.max.timeout.ms)."),
    (51, "CONCURRENT_TRANSACTIONS", R, "The producer attempted to update a transaction while another concurrent operation on the same transaction was ongoing."),
    (52, "TRANSACTION_COORDINATOR_FENCED", 0, "Indicates that the transaction coordinator sending a WriteTxnMarker is no longer the current coordinator for a given producer."),
    (53, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", 0, "Transactional Id authorization failed."),
    (54, "SECURITY_DISABLED", 0, "Security features are disabled."),
    (55, "OPERATION_NOT_ATTEMPTED", 0, "The broker did not attempt to execute this operation. This may happen for batched RPCs where some operations in the batch failed, causing the broker to respond without trying the rest."),
    (56, "KAFKA_STORAGE_ERROR", R | M, "Disk error when trying to access log file on the disk."),
    (57, "LOG_DIR_NOT_FOUND", 0, "The user-specified log directory is not found in the broker config."),
    (58, "SASL_AUTHENTICATION_FAILED", 0, "SASL Authentication failed."),
    (59, "UNKNOWN_PRODUCER_ID", 0, "This exception is raised by the broker if it could not locate the producer metadata associated with the producerId in question."),
    (60, "REASSIGNMENT_IN_PROGRESS", 0, "A partition reassignment is in progress."),
    (61, "DELEGATION_TOKEN_AUTH_DISABLED", 0, "Delegation Token feature is not enabled."),
    (62, "DELEGATION_TOKEN_NOT_FOUND", 0, "Delegation Token is not found on server."),
    (63, "DELEGATION_TOKEN_OWNER_MISMATCH", 0, "Specified Principal is not valid Owner/Renewer."),
    (64, "DELEGATION_TOKEN_REQUEST_NOT_ALLOWED", 0, "Delegation Token requests are not allowed on PLAINTEXT/1-way SSL channels and on delegation token authenticated channels."),
    (65, "DELEGATION_TOKEN_AUTHORIZATION_FAILED", 0, "Delegation Token authorization failed."),
    (66, "DELEGATION_TOKEN_EXPIRED", 0, "Delegation Token is expired."),
    (67, "INVALID_PRINCIPAL_TYPE", 0, "Supplied principalType is not supported."),
    (68, "NON_EMPTY_GROUP", 0, "The group is not empty."),
    (69, "GROUP_ID_NOT_FOUND", 0, "The group id does not exist."),
    (70, "FETCH_SESSION_ID_NOT_FOUND", R, "The fetch session ID was not found."),
    (71, "INVALID_FETCH_SESSION_EPOCH", R, "The fetch session epoch is invalid."),
    (72, "LISTENER_NOT_FOUND", R | M, "There is no listener on the leader broker that matches the listener on which metadata request was processed."),
    (73, "TOPIC_DELETION_DISABLED", 0, "Topic deletion is disabled."),
    (74, "FENCED_LEADER_EPOCH", R | M, "The leader epoch in the request is older than the epoch on the broker."),
    (75, "UNKNOWN_LEADER_EPOCH", R, "The leader epoch in the request is newer than the epoch on the broker."),
    (76, "UNSUPPORTED_COMPRESSION_TYPE", 0, "The requesting client does not support the compression type of given partition."),
    (77, "STALE_BROKER_EPOCH", 0, "Broker epoch has changed."),
    (78, "OFFSET_NOT_AVAILABLE", R, "The leader high watermark has not caught up from a recent leader election so the offsets cannot be guaranteed to be monotonically increasing."),
    (79, "MEMBER_ID_REQUIRED", 0, "The group member needs to have a valid member id before actually entering a consumer group."),
    (80, "PREFERRED_LEADER_NOT_AVAILABLE", R | M, "The preferred leader was not available."),
    (81, "GROUP_MAX_SIZE_REACHED", 0, "The group has reached its maximum size."),
    (82, "FENCED_INSTANCE_ID", 0, "The broker rejected this static consumer since another consumer with the same group.instance.id has registered with a different member.id."),
    (83, "ELIGIBLE_LEADERS_NOT_AVAILABLE", R | M, "Eligible topic partition leaders are not available."),
    (84, "ELECTION_NOT_NEEDED", R | M, "Leader election not needed for topic partition."),
    (85, "NO_REASSIGNMENT_IN_PROGRESS", 0, "No partition reassignment is in progress."),
    (86, "GROUP_SUBSCRIBED_TO_TOPIC", 0, "Deleting offsets of a topic is forbidden while the consumer group is actively subscribed to it."),
    (87, "INVALID_RECORD", 0, "This record has failed the validation on broker and hence will be rejected."),
    (88, "UNSTABLE_OFFSET_COMMIT", R, "There are unstable offsets that need to be cleared."),
    (89, "THROTTLING_QUOTA_EXCEEDED", R, "The throttling quota has been exceeded."),
    (90, "PRODUCER_FENCED", 0, "There is a newer producer with the same transactionalId which fences the current one."),
    (91, "RESOURCE_NOT_FOUND", 0, "A request illegally referred to a resource that does not exist."),
    (92, "DUPLICATE_RESOURCE", 0, "A request illegally referred to the same resource twice."),
    (93, "UNACCEPTABLE_CREDENTIAL", 0, "Requested credential would not meet criteria for acceptability."),
    (94, "INCONSISTENT_VOTER_SET", 0, "Indicates that the either the sender or recipient of a voter-only request is not one of the expected voters."),
    (95, "INVALID_UPDATE_VERSION", 0, "The given update version was invalid."),
    (96, "FEATURE_UPDATE_FAILED", 0, "Unable to update finalized features due to an unexpected server error."),
    (97, "PRINCIPAL_DESERIALIZATION_FAILURE", 0, "Request principal deserialization failed during forwarding. This indicates an internal error on the broker cluster security setup."),
    (98, "SNAPSHOT_NOT_FOUND", 0, "Requested snapshot was not found."),
    (99, "POSITION_OUT_OF_RANGE", 0, "Requested position is not greater than or equal to zero, and less than the size of the snapshot."),
    (100, "UNKNOWN_TOPIC_ID", R | M, "This server does not host this topic ID."),
    (101, "DUPLICATE_BROKER_REGISTRATION", 0, "This broker ID is already in use."),
    (102, "BROKER_ID_NOT_REGISTERED", 0, "The given broker ID was not registered."),
    (103, "INCONSISTENT_TOPIC_ID", R | M, "The log's topic ID did not match the topic ID in the request."),
    (104, "INCONSISTENT_CLUSTER_ID", 0, "The clusterId in the request does not match that found on the server."),
    (105, "TRANSACTIONAL_ID_NOT_FOUND", 0, "The transactionalId could not be found."),
    (106, "FETCH_SESSION_TOPIC_ID_ERROR", R, "The fetch session encountered inconsistent topic ID usage."),
    (107, "INELIGIBLE_REPLICA", 0, "The new ISR contains at least one ineligible replica."),
    (108, "NEW_LEADER_ELECTED", 0, "The AlterPartition request successfully updated the partition state but the leader has changed."),
    (109, "OFFSET_MOVED_TO_TIERED_STORAGE", 0, "The requested offset is moved to tiered storage."),
    (110, "FENCED_MEMBER_EPOCH", 0, "The member epoch is fenced by the group coordinator. The member must abandon all its partitions and rejoin."),
    (111, "UNRELEASED_INSTANCE_ID", 0, "The instance ID is still used by another member in the consumer group. That member must leave first."),
    (112, "UNSUPPORTED_ASSIGNOR", 0, "The assignor or its version range is not supported by the consumer group."),
    (113, "STALE_MEMBER_EPOCH", 0, "The member epoch is stale. The member must retry after receiving its updated member epoch via the ConsumerGroupHeartbeat API."),
    (114, "MISMATCHED_ENDPOINT_TYPE", 0, "The request was sent to an endpoint of the wrong type."),
    (115, "UNSUPPORTED_ENDPOINT_TYPE", 0, "This endpoint type is not supported yet."),
    (116, "UNKNOWN_CONTROLLER_ID", 0, "This controller ID is not known."),
    (117, "UNKNOWN_SUBSCRIPTION_ID", 0, "Client sent a push telemetry request with an invalid or outdated subscription ID."),
    (118, "TELEMETRY_TOO_LARGE", 0, "Client sent a push telemetry request larger than the maximum size the broker will accept."),
    (119, "INVALID_REGISTRATION", 0, "The controller has considered the broker registration to be invalid."),
    (120, "TRANSACTION_ABORTABLE", 0, "The server encountered an error with the transaction. The client can abort the transaction to continue using this transactional ID."),
    (121, "INVALID_RECORD_STATE", 0, "The record state is invalid. The acknowledgement of delivery could not be completed."),
    (122, "SHARE_SESSION_NOT_FOUND", R, "The share session was not found."),
    (123, "INVALID_SHARE_SESSION_EPOCH", R, "The share session epoch is invalid."),
    (124, "FENCED_STATE_EPOCH", 0, "The share coordinator rejected the request because the share-group state epoch did not match."),
    (125, "INVALID_VOTER_KEY", 0, "The voter key doesn't match the receiving replica's key."),
    (126, "DUPLICATE_VOTER", 0, "The voter is already part of the set of voters."),
    (127, "VOTER_NOT_FOUND", 0, "The voter is not part of the set of voters."),
    (128, "INVALID_REGULAR_EXPRESSION", 0, "The regular expression is not valid."),
    (129, "REBOOTSTRAP_REQUIRED", 0, "Client metadata is stale, client should rebootstrap to obtain new metadata."),
    # Kafka 4.1 (KIP-1071 streams groups, KIP-932 share groups)
    (130, "STREAMS_INVALID_TOPOLOGY", 0, "The supplied topology is invalid."),
    (131, "STREAMS_INVALID_TOPOLOGY_EPOCH", 0, "The supplied topology epoch is invalid."),
    (132, "STREAMS_TOPOLOGY_FENCED", 0, "The supplied topology epoch is outdated."),
    (133, "SHARE_SESSION_LIMIT_REACHED", R, "The limit of share sessions has been reached."),
]


class ErrorCode(enum.IntEnum):
    """Every Kafka protocol error code, named as in Kafka's `Errors` enum."""

    locals().update({name: code for code, name, _, _ in _CODES})

    @property
    def retriable(self) -> bool:
        return bool(_FLAGS[self] & R)

    @property
    def invalid_metadata(self) -> bool:
        return bool(_FLAGS[self] & M)

    @property
    def message(self) -> str:
        return _MESSAGES[self]

    @property
    def exception(self) -> type["KafkaError"]:
        return _EXCEPTIONS[self]


_FLAGS = {ErrorCode(code): flags for code, _, flags, _ in _CODES}
_MESSAGES = {ErrorCode(code): msg for code, _, _, msg in _CODES}


class KafkaError(Exception):
    """An error that maps to a Kafka error code (`code`, `retriable`, `invalid_metadata`)."""

    code: int = ErrorCode.UNKNOWN_SERVER_ERROR
    retriable = False
    invalid_metadata = False

    def __init__(self, message: str | None = None, code: int | None = None):
        if code is not None:
            self.code = code
        if message is None:
            message = _MESSAGES.get(self.code, f"Kafka error code {self.code}")
        super().__init__(message)

    @property
    def error_code(self) -> ErrorCode | int:
        try:
            return ErrorCode(self.code)
        except ValueError:
            return self.code

    @staticmethod
    def from_code(code: int, message: str | None = None) -> "KafkaError":
        return error_for_code(code)(message, code)


def _class_name(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_")) + "Error"


_EXCEPTIONS: dict[ErrorCode, type[KafkaError]] = {}
for _code, _name, _flags, _msg in _CODES:
    _EXCEPTIONS[ErrorCode(_code)] = type(_class_name(_name), (KafkaError,), {
        "code": ErrorCode(_code), "retriable": bool(_flags & R),
        "invalid_metadata": bool(_flags & M), "__doc__": _msg or "No error.",
        "__module__": __name__})
globals().update({cls.__name__: cls for cls in _EXCEPTIONS.values()})


def error_for_code(code: int) -> type[KafkaError]:
    """The exception class for `code`; unknown codes get the generic `KafkaError`."""
    try:
        return _EXCEPTIONS[ErrorCode(code)]
    except ValueError:
        return KafkaError
