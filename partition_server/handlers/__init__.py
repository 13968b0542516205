"""Broker request handlers, one module per concern; `SUPPORTED` is exactly what ApiVersions
advertises (see DESIGN.md §4 for why Produce is advertised from v0)."""

from __future__ import annotations

import logging

from partition_server.handlers import (admin, client_quotas, cluster, consumer_group, fetch, group,
                                       produce, producer_id, security, txn)

log = logging.getLogger(__name__)

SUPPORTED: dict[int, tuple[int, int]] = {
    0: (0, 11),      # Produce (v0-2 answered with UNSUPPORTED_FOR_MESSAGE_FORMAT: only magic v2)
    1: (4, 12),      # Fetch (v13+ needs topic ids in fetch sessions: not yet)
    2: (1, 8),       # ListOffsets
    3: (0, 12),      # Metadata
    8: (0, 9),       # OffsetCommit (v9: KIP-848 member epochs)
    9: (0, 9),       # OffsetFetch
    10: (0, 4),      # FindCoordinator (groups and transactions)
    11: (0, 9),      # JoinGroup
    12: (0, 4),      # Heartbeat
    13: (0, 5),      # LeaveGroup
    14: (0, 5),      # SyncGroup
    15: (0, 5),      # DescribeGroups
    16: (0, 5),      # ListGroups (v5: group type filter)
    42: (0, 2),      # DeleteGroups
    47: (0, 0),      # OffsetDelete
    68: (0, 1),      # ConsumerGroupHeartbeat (KIP-848)
    69: (0, 0),      # ConsumerGroupDescribe
    18: (0, 3),      # ApiVersions
    22: (0, 4),      # InitProducerId (idempotent and transactional producers)
    24: (0, 4),      # AddPartitionsToTxn (v4: batches, KIP-890 verify-only; broker to broker)
    25: (0, 3),      # AddOffsetsToTxn
    26: (0, 5),      # EndTxn (v5: epoch bump per transaction, KIP-890 part 2)
    27: (0, 1),      # WriteTxnMarkers (coordinator to partition leaders)
    28: (0, 3),      # TxnOffsetCommit
    65: (0, 0),      # DescribeTransactions
    66: (0, 1),      # ListTransactions
    61: (0, 0),      # DescribeProducers (KIP-664: finding hanging transactions)
    19: (2, 7),      # CreateTopics        → forwarded to the active controller
    20: (1, 6),      # DeleteTopics        → forwarded
    21: (0, 2),      # DeleteRecords
    23: (2, 4),      # OffsetForLeaderEpoch
    30: (1, 3),      # CreateAcls          → forwarded (enforcement: the security issue)
    31: (1, 3),      # DeleteAcls          → forwarded
    32: (1, 4),      # DescribeConfigs
    33: (0, 2),      # AlterConfigs        → forwarded
    37: (0, 3),      # CreatePartitions    → forwarded
    43: (0, 2),      # ElectLeaders        → forwarded
    44: (0, 1),      # IncrementalAlterConfigs → forwarded
    55: (0, 2),      # DescribeQuorum      → forwarded
    60: (0, 1),      # DescribeCluster
    29: (1, 3),      # DescribeAcls        (from the metadata image)
    50: (0, 0),      # DescribeUserScramCredentials (from the metadata image)
    51: (0, 0),      # AlterUserScramCredentials → forwarded
    48: (0, 1),      # DescribeClientQuotas (from the metadata image)
    49: (0, 1),      # AlterClientQuotas   → forwarded
}

HANDLERS = {
    0: produce.handle_produce,
    1: fetch.handle_fetch,
    2: fetch.handle_list_offsets,
    3: cluster.handle_metadata,
    18: cluster.handle_api_versions,
    8: group.handle_offset_commit, 9: group.handle_offset_fetch,
    10: txn.handle_find_coordinator, 11: group.handle_join_group, 12: group.handle_heartbeat,
    13: group.handle_leave_group, 14: group.handle_sync_group, 15: group.handle_describe_groups,
    16: group.handle_list_groups, 42: group.handle_delete_groups, 47: group.handle_offset_delete,
    68: consumer_group.handle_consumer_group_heartbeat,
    69: consumer_group.handle_consumer_group_describe,
    19: admin.forward, 20: admin.forward, 33: admin.forward, 37: admin.forward,
    43: admin.forward, 44: admin.forward, 55: admin.forward, 30: admin.forward, 31: admin.forward,
    21: fetch.handle_delete_records,
    22: txn.handle_init_producer_id,
    24: txn.handle_add_partitions_to_txn, 25: txn.handle_add_offsets_to_txn,
    26: txn.handle_end_txn, 27: txn.handle_write_txn_markers, 28: txn.handle_txn_offset_commit,
    65: txn.handle_describe_transactions, 66: txn.handle_list_transactions,
    61: txn.handle_describe_producers,
    23: fetch.handle_offset_for_leader_epoch,
    32: cluster.handle_describe_configs,
    60: cluster.handle_describe_cluster,
    29: security.handle_describe_acls, 50: security.handle_describe_user_scram_credentials,
    51: admin.forward,
    48: client_quotas.handle_describe_client_quotas, 49: client_quotas.handle_alter_client_quotas,
}
assert set(HANDLERS) == set(SUPPORTED)


async def dispatch(broker, ctx, request):
    # client quotas (handlers/client_quotas.py) meter and throttle around authorization + handler
    return await client_quotas.enforce(broker, ctx, request,
                                       lambda req: _authorized(broker, ctx, req))


async def _authorized(broker, ctx, request):
    handler = HANDLERS[request.api_key]
    if getattr(broker, "authorizer", None) is None:
        return await handler(broker, request)
    # ACLs (partition_server/security/enforce.py): one rule per API, checked here so the
    # handlers stay unaware of principals
    from partition_server.security.enforce import authorize_and_call
    return await authorize_and_call(broker.authorizer, ctx, request,
                                    lambda req: handler(broker, req))
