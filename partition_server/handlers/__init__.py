"""Broker request handlers, one module per concern; `SUPPORTED` is exactly what ApiVersions
advertises. Produce is advertised from v0 although v0-2 are refused: older librdkafka otherwise
quietly stops compressing."""

from __future__ import annotations

import logging

from partition_server.handlers import (admin, client_quotas, cluster, consumer_group,
                                       describe_configs, fetch, group,
                                       log_dirs, produce, producer_id, security, txn)
from partition_server.handlers.context import HandlerContext
from wire.messages.api_keys import ApiKey

log = logging.getLogger(__name__)

SUPPORTED: dict[int, tuple[int, int]] = {
    ApiKey.PRODUCE: (0, 11),                  # v0-2 answered UNSUPPORTED_FOR_MESSAGE_FORMAT: magic v2 only
    ApiKey.FETCH: (4, 17),                    # v13+: topics by id (UNKNOWN_TOPIC_ID); v15: ReplicaState
    ApiKey.LIST_OFFSETS: (1, 8),
    ApiKey.METADATA: (0, 12),
    ApiKey.OFFSET_COMMIT: (0, 9),             # v9: KIP-848 member epochs
    ApiKey.OFFSET_FETCH: (0, 9),
    ApiKey.FIND_COORDINATOR: (0, 4),          # groups and transactions
    ApiKey.JOIN_GROUP: (0, 9),
    ApiKey.HEARTBEAT: (0, 4),
    ApiKey.LEAVE_GROUP: (0, 5),
    ApiKey.SYNC_GROUP: (0, 5),
    ApiKey.DESCRIBE_GROUPS: (0, 5),
    ApiKey.LIST_GROUPS: (0, 5),               # v5: group type filter
    ApiKey.DELETE_GROUPS: (0, 2),
    ApiKey.OFFSET_DELETE: (0, 0),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (0, 1),  # KIP-848
    ApiKey.CONSUMER_GROUP_DESCRIBE: (0, 0),
    ApiKey.API_VERSIONS: (0, 3),
    ApiKey.INIT_PRODUCER_ID: (0, 4),          # idempotent and transactional producers
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 4),     # v4: batches, KIP-890 verify-only; broker to broker
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 3),
    ApiKey.END_TXN: (0, 5),                   # v5: epoch bump per transaction, KIP-890 part 2
    ApiKey.WRITE_TXN_MARKERS: (0, 1),         # coordinator to partition leaders
    ApiKey.TXN_OFFSET_COMMIT: (0, 3),
    ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
    ApiKey.LIST_TRANSACTIONS: (0, 1),
    ApiKey.DESCRIBE_PRODUCERS: (0, 0),        # KIP-664: finding hanging transactions
    ApiKey.CREATE_TOPICS: (2, 7),             # → forwarded to the active controller
    ApiKey.DELETE_TOPICS: (1, 6),             # → forwarded
    ApiKey.DELETE_RECORDS: (0, 2),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (2, 4),
    ApiKey.CREATE_ACLS: (1, 3),               # → forwarded (enforcement: the security issue)
    ApiKey.DELETE_ACLS: (1, 3),               # → forwarded
    ApiKey.DESCRIBE_CONFIGS: (1, 4),
    ApiKey.ALTER_CONFIGS: (0, 2),             # → forwarded
    ApiKey.CREATE_PARTITIONS: (0, 3),         # → forwarded
    ApiKey.ELECT_LEADERS: (0, 2),             # → forwarded
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),  # → forwarded
    ApiKey.DESCRIBE_QUORUM: (0, 2),           # → forwarded
    ApiKey.DESCRIBE_CLUSTER: (0, 1),
    ApiKey.DESCRIBE_LOG_DIRS: (1, 4),         # per log directory: sizes, lag, future logs
    ApiKey.ALTER_REPLICA_LOG_DIRS: (0, 2),    # move a replica between log dirs (JBOD)
    ApiKey.DESCRIBE_ACLS: (1, 3),             # from the metadata image
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),  # from the metadata image
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),  # → forwarded
    ApiKey.DESCRIBE_CLIENT_QUOTAS: (0, 1),    # from the metadata image
    ApiKey.ALTER_CLIENT_QUOTAS: (0, 1),       # → forwarded
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 0),  # → forwarded (KIP-455)
    ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0),   # → forwarded: the active controller's view
    ApiKey.ADD_RAFT_VOTER: (0, 0),            # → forwarded (KIP-853)
    ApiKey.REMOVE_RAFT_VOTER: (0, 0),         # → forwarded
    ApiKey.UNREGISTER_BROKER: (0, 0),         # → forwarded (KIP-631)
}

HANDLERS = {
    ApiKey.PRODUCE: produce.handle_produce,
    ApiKey.FETCH: fetch.handle_fetch,
    ApiKey.LIST_OFFSETS: fetch.handle_list_offsets,
    ApiKey.METADATA: cluster.handle_metadata,
    ApiKey.API_VERSIONS: cluster.handle_api_versions,
    ApiKey.OFFSET_COMMIT: group.handle_offset_commit,
    ApiKey.OFFSET_FETCH: group.handle_offset_fetch,
    ApiKey.FIND_COORDINATOR: txn.handle_find_coordinator,
    ApiKey.JOIN_GROUP: group.handle_join_group,
    ApiKey.HEARTBEAT: group.handle_heartbeat,
    ApiKey.LEAVE_GROUP: group.handle_leave_group,
    ApiKey.SYNC_GROUP: group.handle_sync_group,
    ApiKey.DESCRIBE_GROUPS: group.handle_describe_groups,
    ApiKey.LIST_GROUPS: group.handle_list_groups,
    ApiKey.DELETE_GROUPS: group.handle_delete_groups,
    ApiKey.OFFSET_DELETE: group.handle_offset_delete,
    ApiKey.CONSUMER_GROUP_HEARTBEAT: consumer_group.handle_consumer_group_heartbeat,
    ApiKey.CONSUMER_GROUP_DESCRIBE: consumer_group.handle_consumer_group_describe,
    ApiKey.CREATE_TOPICS: admin.forward,
    ApiKey.DELETE_TOPICS: admin.forward,
    ApiKey.ALTER_CONFIGS: admin.forward,
    ApiKey.CREATE_PARTITIONS: admin.forward,
    ApiKey.ELECT_LEADERS: admin.forward,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: admin.forward,
    ApiKey.DESCRIBE_QUORUM: admin.forward,
    ApiKey.CREATE_ACLS: admin.forward,
    ApiKey.DELETE_ACLS: admin.forward,
    ApiKey.DELETE_RECORDS: fetch.handle_delete_records,
    ApiKey.INIT_PRODUCER_ID: txn.handle_init_producer_id,
    ApiKey.ADD_PARTITIONS_TO_TXN: txn.handle_add_partitions_to_txn,
    ApiKey.ADD_OFFSETS_TO_TXN: txn.handle_add_offsets_to_txn,
    ApiKey.END_TXN: txn.handle_end_txn,
    ApiKey.WRITE_TXN_MARKERS: txn.handle_write_txn_markers,
    ApiKey.TXN_OFFSET_COMMIT: txn.handle_txn_offset_commit,
    ApiKey.DESCRIBE_TRANSACTIONS: txn.handle_describe_transactions,
    ApiKey.LIST_TRANSACTIONS: txn.handle_list_transactions,
    ApiKey.DESCRIBE_PRODUCERS: txn.handle_describe_producers,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: fetch.handle_offset_for_leader_epoch,
    ApiKey.DESCRIBE_CONFIGS: describe_configs.handle_describe_configs,
    ApiKey.DESCRIBE_CLUSTER: cluster.handle_describe_cluster,
    ApiKey.DESCRIBE_LOG_DIRS: log_dirs.handle_describe_log_dirs,
    ApiKey.ALTER_REPLICA_LOG_DIRS: log_dirs.handle_alter_replica_log_dirs,
    ApiKey.DESCRIBE_ACLS: security.handle_describe_acls,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: security.handle_describe_user_scram_credentials,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: admin.forward,
    ApiKey.DESCRIBE_CLIENT_QUOTAS: client_quotas.handle_describe_client_quotas,
    ApiKey.ALTER_CLIENT_QUOTAS: client_quotas.handle_alter_client_quotas,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: admin.forward,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: admin.forward,
    ApiKey.ADD_RAFT_VOTER: admin.forward,
    ApiKey.REMOVE_RAFT_VOTER: admin.forward,
    ApiKey.UNREGISTER_BROKER: admin.forward,
}
assert set(HANDLERS) == set(SUPPORTED)


async def dispatch(hctx: HandlerContext, ctx, request):
    # client quotas (handlers/client_quotas.py) meter and throttle around authorization + handler
    return await client_quotas.enforce(hctx, ctx, request,
                                       lambda req: _authorized(hctx, ctx, req))


async def _authorized(hctx: HandlerContext, ctx, request):
    handler = HANDLERS[request.api_key]
    if getattr(hctx, "authorizer", None) is None:
        return await handler(hctx, request)
    # ACLs (partition_server/security/enforce.py): one rule per API, checked here so the
    # handlers stay unaware of principals
    from partition_server.security.enforce import authorize_and_call
    return await authorize_and_call(hctx.authorizer, ctx, request,
                                    lambda req: handler(hctx, req), hctx.image.topic_names)
