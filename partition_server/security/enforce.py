"""Authorization of every broker API, in one place (Kafka's KafkaApis authorize calls).

`authorize_and_call(authorizer, ctx, request, call)` is used by the broker's dispatch when an
authorizer is configured. Per API it either refuses the whole request (an error response built
here), or removes the items the principal may not touch *before* the handler runs (so a refused
Produce appends nothing and a refused commit stores nothing) and adds their error entries to the
handler's answer, or filters a read-only answer afterwards (Fetch, Metadata, ListOffsets…).

| API | needs | refusal |
|---|---|---|
| Produce | Write topic (+ Write transactional id) | TOPIC_/TRANSACTIONAL_ID_AUTHORIZATION_FAILED |
| Fetch (consumer) / (follower) | Read topic / ClusterAction cluster | TOPIC_ / CLUSTER_AUTHORIZATION_FAILED |
| ListOffsets, OffsetForLeaderEpoch, Metadata | Describe topic | TOPIC_AUTHORIZATION_FAILED; Metadata hides unlisted topics |
| OffsetCommit / OffsetFetch | Read / Describe group, Read / Describe topic | GROUP_ / TOPIC_AUTHORIZATION_FAILED |
| Join/Sync/Heartbeat/Leave, ConsumerGroupHeartbeat | Read group | GROUP_AUTHORIZATION_FAILED |
| DescribeGroups, ConsumerGroupDescribe, FindCoordinator | Describe group (or transactional id) | GROUP_/TRANSACTIONAL_ID_… |
| ListGroups | Describe cluster, else only groups the principal may Describe | — |
| DeleteGroups, OffsetDelete | Delete group (+ Read topic) | GROUP_AUTHORIZATION_FAILED |
| InitProducerId | Write transactional id; else IdempotentWrite cluster or Write on any topic | TRANSACTIONAL_ID_ / CLUSTER_AUTHORIZATION_FAILED |
| CreateTopics | Create cluster or Create topic | TOPIC_AUTHORIZATION_FAILED |
| DeleteTopics, DeleteRecords | Delete topic | TOPIC_AUTHORIZATION_FAILED |
| CreatePartitions | Alter topic | TOPIC_AUTHORIZATION_FAILED |
| DescribeConfigs / AlterConfigs, IncrementalAlterConfigs | DescribeConfigs / AlterConfigs on topic or cluster | TOPIC_ / CLUSTER_AUTHORIZATION_FAILED |
| DescribeClientQuotas / AlterClientQuotas | DescribeConfigs / AlterConfigs on cluster | CLUSTER_AUTHORIZATION_FAILED |
| Create/DeleteAcls, AlterUserScramCredentials, ElectLeaders | Alter cluster | CLUSTER_AUTHORIZATION_FAILED |
| DescribeAcls, DescribeUserScramCredentials, DescribeCluster, DescribeQuorum, DescribeLogDirs | Describe cluster | CLUSTER_AUTHORIZATION_FAILED |
| AlterReplicaLogDirs | Alter cluster | CLUSTER_AUTHORIZATION_FAILED (per partition) |
| transactions (AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit) | Write transactional id (+ Write topic / Read group) | TRANSACTIONAL_ID_AUTHORIZATION_FAILED |
| WriteTxnMarkers | ClusterAction cluster | CLUSTER_AUTHORIZATION_FAILED |

APIs not in the table are refused to everyone but super users (closed by default).
"""

from __future__ import annotations

from partition_server.security import authorizer as A
from wire.errors import ErrorCode
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import RESPONSES

TOPIC_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
GROUP_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED
CLUSTER_DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
TXN_DENIED = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
BROKER_RESOURCE, TOPIC_RESOURCE = 4, 2          # DescribeConfigs resource types


class Check:
    def __init__(self, authorizer: A.Authorizer, ctx, topic_names=None):
        self.az, self.principal, self.host = authorizer, ctx.principal, ctx.host
        # {topic id: name}: Fetch v13+ names topics by id only, ACLs are by name
        self.topic_names = topic_names or {}

    def __call__(self, op: int, rtype: int, name: str) -> bool:
        return self.az.authorize(self.principal, self.host, op, rtype, name)

    def topic(self, op: int, name) -> bool:
        return name is not None and self(op, A.TOPIC, name)

    def cluster(self, op: int) -> bool:
        return self(op, A.CLUSTER, A.CLUSTER_NAME)


def _split(items, allowed):
    keep, denied = [], []
    for item in items:
        (keep if allowed(item) else denied).append(item)
    return keep, denied


# -- the per-API rules ---------------------------------------------------------------------------

async def _produce(ok: Check, req, call):
    body, cls = req.body, RESPONSES[ApiKey.PRODUCE]
    txn = getattr(body, "transactional_id", None)
    denied_code = TOPIC_DENIED
    if txn and not ok(A.WRITE, A.TRANSACTIONAL_ID, txn):
        body.topic_data, denied = [], list(body.topic_data)
        denied_code = TXN_DENIED
    else:
        body.topic_data, denied = _split(body.topic_data, lambda t: ok.topic(A.WRITE, t.name))
    if body.topic_data or not denied:
        resp = await call(req)
        if resp is None:                       # acks=0: no answer either way
            return None
    elif body.acks == 0:
        return None
    else:
        resp = cls()
    resp.responses.extend(cls.TopicProduceResponse(name=t.name, partition_responses=[
        cls.PartitionProduceResponse(index=p.index, error_code=denied_code, base_offset=-1)
        for p in t.partition_data]) for t in denied)
    return resp


def _is_follower(req) -> bool:
    rid = getattr(req.body, "replica_id", -1)
    state = getattr(req.body, "replica_state", None)
    return (rid is not None and rid >= 0) or (state is not None and getattr(state, "replica_id", -1) >= 0)


async def _fetch(ok: Check, req, call):
    cls = RESPONSES[ApiKey.FETCH]
    if _is_follower(req):
        if not ok.cluster(A.CLUSTER_ACTION):
            return _fetch_denied_all(req, CLUSTER_DENIED)
        return await call(req)
    resp = await call(req)
    if not isinstance(resp, cls):
        return resp
    by_id = req.api_version >= 13
    for topic in resp.responses:
        name = ok.topic_names.get(topic.topic_id) if by_id else topic.topic
        if not ok.topic(A.READ, name):
            # empty records, not null: clients (librdkafka) refuse a null record set
            topic.partitions = [cls.PartitionData(partition_index=p.partition_index,
                                                  error_code=TOPIC_DENIED, high_watermark=-1,
                                                  records=b"")
                                for p in topic.partitions]
    return resp


def _fetch_denied_all(req, code):
    cls = RESPONSES[ApiKey.FETCH]
    return cls(error_code=code, responses=[cls.FetchableTopicResponse(
        topic=t.topic, topic_id=t.topic_id,
        partitions=[cls.PartitionData(partition_index=p.partition, error_code=code,
                                      high_watermark=-1, records=b"") for p in t.partitions])
        for t in req.body.topics])


async def _list_offsets(ok: Check, req, call):
    cls = RESPONSES[ApiKey.LIST_OFFSETS]
    resp = await call(req)
    for t in resp.topics:
        if not ok.topic(A.DESCRIBE, t.name):
            for p in t.partitions:
                p.error_code, p.offset, p.timestamp = TOPIC_DENIED, -1, -1
    return resp


async def _offset_for_leader_epoch(ok: Check, req, call):
    if _is_follower(req) and not ok.cluster(A.CLUSTER_ACTION):
        deny_all = True
    else:
        deny_all = False
    resp = await call(req)
    for t in resp.topics:
        if deny_all or not ok.topic(A.DESCRIBE, t.topic):
            for p in t.partitions:
                p.error_code = CLUSTER_DENIED if deny_all else TOPIC_DENIED
                p.end_offset, p.leader_epoch = -1, -1
    return resp


async def _metadata(ok: Check, req, call):
    cls = RESPONSES[ApiKey.METADATA]
    listed_all = req.body.topics is None or (req.api_version == 0 and not req.body.topics)
    if req.body.topics and getattr(req.body, "allow_auto_topic_creation", False):
        # auto-creation needs Create; without it the topic is simply not created
        if not (ok.cluster(A.CREATE)):
            for t in req.body.topics:
                if t.name is not None and not ok.topic(A.CREATE, t.name):
                    req.body.allow_auto_topic_creation = False
    resp = await call(req)
    topics = []
    for t in resp.topics:
        if ok.topic(A.DESCRIBE, t.name):
            topics.append(t)
        elif not listed_all:
            topics.append(cls.MetadataResponseTopic(error_code=TOPIC_DENIED, name=t.name,
                                                    topic_id=cls.MetadataResponseTopic().topic_id))
    resp.topics = topics
    return resp


def _group_denied_response(api_key: int, req, code=GROUP_DENIED):
    cls = RESPONSES[api_key]
    return cls(error_code=code) if any(f.name == "error_code" for f in cls.FIELDS) else None


async def _group_read(ok: Check, req, call):
    """JoinGroup, SyncGroup, Heartbeat, LeaveGroup, ConsumerGroupHeartbeat."""
    if not ok(A.READ, A.GROUP, req.body.group_id):
        return _group_denied_response(req.api_key, req)
    return await call(req)


async def _offset_commit(ok: Check, req, call):
    cls = RESPONSES[ApiKey.OFFSET_COMMIT]
    group_ok = ok(A.READ, A.GROUP, req.body.group_id)
    body = req.body
    if not group_ok:
        body.topics, denied = [], list(body.topics)
    else:
        body.topics, denied = _split(body.topics, lambda t: ok.topic(A.READ, t.name))
    resp = await call(req) if body.topics or not denied else cls()
    resp.topics.extend(cls.OffsetCommitResponseTopic(name=t.name, partitions=[
        cls.OffsetCommitResponsePartition(partition_index=p.partition_index,
                                          error_code=TOPIC_DENIED if group_ok else GROUP_DENIED)
        for p in t.partitions]) for t in denied)
    return resp


async def _offset_fetch(ok: Check, req, call):
    cls = RESPONSES[ApiKey.OFFSET_FETCH]
    if req.api_version < 8:
        if not ok(A.DESCRIBE, A.GROUP, req.body.group_id):
            # v0-1 have no top-level error: each requested partition carries it
            return cls(error_code=GROUP_DENIED, topics=[cls.OffsetFetchResponseTopic(
                name=t.name, partitions=[cls.OffsetFetchResponsePartition(
                    partition_index=p, committed_offset=-1, error_code=GROUP_DENIED)
                    for p in t.partition_indexes]) for t in req.body.topics or []])
        resp = await call(req)
        resp.topics = [t for t in resp.topics if _topic_visible(ok, t, req.body.topics)]
        return resp
    denied_groups = [g.group_id for g in req.body.groups
                     if not ok(A.DESCRIBE, A.GROUP, g.group_id)]
    req.body.groups = [g for g in req.body.groups if g.group_id not in denied_groups]
    resp = await call(req) if req.body.groups else cls()
    for g in resp.groups:
        g.topics = [t for t in g.topics if ok.topic(A.DESCRIBE, t.name)]
    resp.groups.extend(cls.OffsetFetchResponseGroup(group_id=g, error_code=GROUP_DENIED)
                       for g in denied_groups)
    return resp


def _topic_visible(ok, t, requested) -> bool:
    # committed offsets of topics the principal may not describe are left out, as in Kafka
    return ok.topic(A.DESCRIBE, t.name)


async def _find_coordinator(ok: Check, req, call):
    cls = RESPONSES[ApiKey.FIND_COORDINATOR]
    key_type = getattr(req.body, "key_type", 0)
    rtype, code = (A.TRANSACTIONAL_ID, TXN_DENIED) if key_type == 1 else (A.GROUP, GROUP_DENIED)
    if req.api_version < 4:
        if not ok(A.DESCRIBE, rtype, req.body.key):
            return cls(error_code=code, node_id=-1, host="", port=-1)
        return await call(req)
    keys = list(req.body.coordinator_keys)
    denied = [k for k in keys if not ok(A.DESCRIBE, rtype, k)]
    req.body.coordinator_keys = [k for k in keys if k not in denied]
    resp = await call(req) if req.body.coordinator_keys else cls()
    resp.coordinators.extend(cls.Coordinator(key=k, node_id=-1, host="", port=-1, error_code=code)
                             for k in denied)
    return resp


async def _describe_groups(ok: Check, req, call):
    cls = RESPONSES[ApiKey.DESCRIBE_GROUPS]
    denied = [g for g in req.body.groups if not ok(A.DESCRIBE, A.GROUP, g)]
    req.body.groups = [g for g in req.body.groups if g not in denied]
    resp = await call(req) if req.body.groups else cls()
    resp.groups.extend(cls.DescribedGroup(group_id=g, error_code=GROUP_DENIED) for g in denied)
    return resp


async def _consumer_group_describe(ok: Check, req, call):
    cls = RESPONSES[ApiKey.CONSUMER_GROUP_DESCRIBE]
    denied = [g for g in req.body.group_ids if not ok(A.DESCRIBE, A.GROUP, g)]
    req.body.group_ids = [g for g in req.body.group_ids if g not in denied]
    resp = await call(req) if req.body.group_ids else cls()
    resp.groups.extend(cls.DescribedGroup(group_id=g, error_code=GROUP_DENIED) for g in denied)
    return resp


async def _list_groups(ok: Check, req, call):
    resp = await call(req)
    if not ok.cluster(A.DESCRIBE):
        resp.groups = [g for g in resp.groups if ok(A.DESCRIBE, A.GROUP, g.group_id)]
    return resp


async def _delete_groups(ok: Check, req, call):
    cls = RESPONSES[ApiKey.DELETE_GROUPS]
    denied = [g for g in req.body.groups_names if not ok(A.DELETE, A.GROUP, g)]
    req.body.groups_names = [g for g in req.body.groups_names if g not in denied]
    resp = await call(req) if req.body.groups_names else cls()
    resp.results.extend(cls.DeletableGroupResult(group_id=g, error_code=GROUP_DENIED) for g in denied)
    return resp


async def _offset_delete(ok: Check, req, call):
    cls = RESPONSES[ApiKey.OFFSET_DELETE]
    if not ok(A.DELETE, A.GROUP, req.body.group_id):
        return cls(error_code=GROUP_DENIED)
    req.body.topics, denied = _split(req.body.topics, lambda t: ok.topic(A.READ, t.name))
    resp = await call(req) if req.body.topics or not denied else cls()
    resp.topics.extend(cls.OffsetDeleteResponseTopic(name=t.name, partitions=[
        cls.OffsetDeleteResponsePartition(partition_index=p.partition_index, error_code=TOPIC_DENIED)
        for p in t.partitions]) for t in denied)
    return resp


async def _init_producer_id(ok: Check, req, call):
    cls = RESPONSES[ApiKey.INIT_PRODUCER_ID]
    txn = req.body.transactional_id
    if txn:
        if not ok(A.WRITE, A.TRANSACTIONAL_ID, txn):
            return cls(error_code=TXN_DENIED, producer_id=-1, producer_epoch=-1)
    elif not (ok.cluster(A.IDEMPOTENT_WRITE)
              or ok.az.authorize_any(ok.principal, ok.host, A.WRITE, A.TOPIC)):
        return cls(error_code=CLUSTER_DENIED, producer_id=-1, producer_epoch=-1)
    return await call(req)


async def _create_topics(ok: Check, req, call):
    cls = RESPONSES[ApiKey.CREATE_TOPICS]
    cluster_ok = ok.cluster(A.CREATE)
    req.body.topics, denied = _split(req.body.topics,
                                     lambda t: cluster_ok or ok.topic(A.CREATE, t.name))
    resp = await call(req) if req.body.topics or not denied else cls()
    resp.topics.extend(cls.CreatableTopicResult(name=t.name, error_code=TOPIC_DENIED,
                                                num_partitions=-1, replication_factor=-1)
                       for t in denied)
    return resp


async def _delete_topics(ok: Check, req, call):
    cls = RESPONSES[ApiKey.DELETE_TOPICS]
    body = req.body
    body.topic_names, denied = _split(body.topic_names, lambda n: ok.topic(A.DELETE, n))
    # v6 names topics by struct (name or id); ids are resolved by the handler, so an id-only
    # entry needs Delete on every topic (we cannot name it here)
    kept, denied_structs = _split(body.topics, lambda t: ok.topic(A.DELETE, t.name)
                                  if t.name is not None else ok.topic(A.DELETE, "*"))
    body.topics = kept
    denied += [t.name for t in denied_structs]
    resp = await call(req) if body.topic_names or body.topics or not denied else cls()
    resp.responses.extend(cls.DeletableTopicResult(name=n, error_code=TOPIC_DENIED) for n in denied)
    return resp


async def _delete_records(ok: Check, req, call):
    cls = RESPONSES[ApiKey.DELETE_RECORDS]
    req.body.topics, denied = _split(req.body.topics, lambda t: ok.topic(A.DELETE, t.name))
    resp = await call(req) if req.body.topics or not denied else cls()
    resp.topics.extend(cls.DeleteRecordsTopicResult(name=t.name, partitions=[
        cls.DeleteRecordsPartitionResult(partition_index=p.partition_index, low_watermark=-1,
                                         error_code=TOPIC_DENIED) for p in t.partitions])
        for t in denied)
    return resp


async def _create_partitions(ok: Check, req, call):
    cls = RESPONSES[ApiKey.CREATE_PARTITIONS]
    req.body.topics, denied = _split(req.body.topics, lambda t: ok.topic(A.ALTER, t.name))
    resp = await call(req) if req.body.topics or not denied else cls()
    resp.results.extend(cls.CreatePartitionsTopicResult(name=t.name, error_code=TOPIC_DENIED)
                        for t in denied)
    return resp


def _config_allowed(ok: Check, op: int, resource) -> bool:
    if resource.resource_type == TOPIC_RESOURCE:
        return ok.topic(op, resource.resource_name)
    return ok.cluster(op)       # broker and broker-logger resources are the cluster's


def _config_code(resource) -> int:
    return TOPIC_DENIED if resource.resource_type == TOPIC_RESOURCE else CLUSTER_DENIED


async def _describe_configs(ok: Check, req, call):
    cls = RESPONSES[ApiKey.DESCRIBE_CONFIGS]
    req.body.resources, denied = _split(req.body.resources,
                                        lambda r: _config_allowed(ok, A.DESCRIBE_CONFIGS, r))
    resp = await call(req) if req.body.resources or not denied else cls()
    resp.results.extend(cls.DescribeConfigsResult(
        error_code=_config_code(r), resource_type=r.resource_type, resource_name=r.resource_name)
        for r in denied)
    return resp


async def _alter_configs(ok: Check, req, call):
    cls = RESPONSES[req.api_key]
    req.body.resources, denied = _split(req.body.resources,
                                        lambda r: _config_allowed(ok, A.ALTER_CONFIGS, r))
    resp = await call(req) if req.body.resources or not denied else cls()
    resp.responses.extend(cls.AlterConfigsResourceResponse(
        error_code=_config_code(r), resource_type=r.resource_type, resource_name=r.resource_name)
        for r in denied)
    return resp


def _cluster_rule(op: int, deny):
    async def rule(ok: Check, req, call):
        if not ok.cluster(op):
            return deny(req)
        return await call(req)
    return rule


def _deny_acl_create(req):
    cls = RESPONSES[ApiKey.CREATE_ACLS]
    return cls(results=[cls.AclCreationResult(error_code=CLUSTER_DENIED) for _ in req.body.creations])


def _deny_acl_delete(req):
    cls = RESPONSES[ApiKey.DELETE_ACLS]
    return cls(filter_results=[cls.DeleteAclsFilterResult(error_code=CLUSTER_DENIED)
                               for _ in req.body.filters])


def _deny_scram_alter(req):
    cls = RESPONSES[ApiKey.ALTER_USER_SCRAM_CREDENTIALS]
    users = [d.name for d in req.body.deletions] + [u.name for u in req.body.upsertions]
    return cls(results=[cls.AlterUserScramCredentialsResult(user=u, error_code=CLUSTER_DENIED)
                        for u in dict.fromkeys(users)])


def _deny_elect(req):
    return RESPONSES[ApiKey.ELECT_LEADERS](error_code=CLUSTER_DENIED)


def _deny_quota_alter(req):
    from partition_server.handlers.client_quotas import deny_alter
    return deny_alter(req)


def _deny_alter_log_dirs(req):
    cls = RESPONSES[ApiKey.ALTER_REPLICA_LOG_DIRS]
    by_topic: dict[str, list] = {}
    for d in req.body.dirs:
        for t in d.topics:
            by_topic.setdefault(t.name, []).extend(cls.AlterReplicaLogDirPartitionResult(
                partition_index=p, error_code=CLUSTER_DENIED) for p in t.partitions)
    return cls(results=[cls.AlterReplicaLogDirTopicResult(topic_name=n, partitions=ps)
                        for n, ps in by_topic.items()])


def _top_level(api_key: int, code=CLUSTER_DENIED):
    return lambda req: RESPONSES[api_key](error_code=code)


def _txn_rule(extra=None):
    """Transactional APIs: Write on the transactional id, then `extra(ok, req)` may refuse."""
    async def rule(ok: Check, req, call):
        txn = getattr(req.body, "transactional_id", None)
        if txn is not None and not ok(A.WRITE, A.TRANSACTIONAL_ID, txn):
            return _txn_denied(req)
        if extra is not None and not extra(ok, req):
            group_api = req.api_key in (ApiKey.ADD_OFFSETS_TO_TXN, ApiKey.TXN_OFFSET_COMMIT)
            return _txn_denied(req, GROUP_DENIED if group_api else TOPIC_DENIED)
        return await call(req)
    return rule


def _txn_denied(req, code=TXN_DENIED):
    cls = RESPONSES[req.api_key]
    # AddPartitionsToTxn v0-3 and TxnOffsetCommit carry per-partition results only
    if req.api_key == ApiKey.ADD_PARTITIONS_TO_TXN:
        return cls(error_code=code, results_by_topic_v3_and_below=[cls.AddPartitionsToTxnTopicResult(
            name=t.name, results_by_partition=[cls.AddPartitionsToTxnPartitionResult(
                partition_index=p, partition_error_code=code) for p in t.partitions])
            for t in req.body.v3_and_below_topics])
    if req.api_key == ApiKey.TXN_OFFSET_COMMIT:
        return cls(topics=[cls.TxnOffsetCommitResponseTopic(name=t.name, partitions=[
            cls.TxnOffsetCommitResponsePartition(partition_index=p.partition_index, error_code=code)
            for p in t.partitions]) for t in req.body.topics])
    return cls(error_code=code)


async def _add_partitions_to_txn(ok: Check, req, call):
    if req.api_version >= 4:         # the batched form is broker to broker (KIP-890)
        if not ok.cluster(A.CLUSTER_ACTION):
            return RESPONSES[ApiKey.ADD_PARTITIONS_TO_TXN](error_code=CLUSTER_DENIED)
        return await call(req)
    body = req.body
    code = None
    if not ok(A.WRITE, A.TRANSACTIONAL_ID, body.v3_and_below_transactional_id or ""):
        code = TXN_DENIED
    elif not all(ok.topic(A.WRITE, t.name) for t in body.v3_and_below_topics):
        code = TOPIC_DENIED
    if code is None:
        return await call(req)
    return _txn_denied(req, code)


async def _describe_transactions(ok: Check, req, call):
    cls = RESPONSES[ApiKey.DESCRIBE_TRANSACTIONS]
    ids = list(req.body.transactional_ids)
    denied = [t for t in ids if not ok(A.DESCRIBE, A.TRANSACTIONAL_ID, t)]
    req.body.transactional_ids = [t for t in ids if t not in denied]
    resp = await call(req) if req.body.transactional_ids else cls()
    resp.transaction_states.extend(cls.TransactionState(transactional_id=t, error_code=TXN_DENIED)
                                   for t in denied)
    return resp


async def _list_transactions(ok: Check, req, call):
    resp = await call(req)
    resp.transaction_states = [t for t in resp.transaction_states
                               if ok(A.DESCRIBE, A.TRANSACTIONAL_ID, t.transactional_id)]
    return resp


RULES = {
    ApiKey.PRODUCE: _produce,
    ApiKey.FETCH: _fetch,
    ApiKey.LIST_OFFSETS: _list_offsets,
    ApiKey.METADATA: _metadata,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: _offset_for_leader_epoch,
    ApiKey.OFFSET_COMMIT: _offset_commit,
    ApiKey.OFFSET_FETCH: _offset_fetch,
    ApiKey.FIND_COORDINATOR: _find_coordinator,
    ApiKey.JOIN_GROUP: _group_read,
    ApiKey.HEARTBEAT: _group_read,
    ApiKey.LEAVE_GROUP: _group_read,
    ApiKey.SYNC_GROUP: _group_read,
    ApiKey.CONSUMER_GROUP_HEARTBEAT: _group_read,
    ApiKey.DESCRIBE_GROUPS: _describe_groups,
    ApiKey.CONSUMER_GROUP_DESCRIBE: _consumer_group_describe,
    ApiKey.LIST_GROUPS: _list_groups,
    ApiKey.DELETE_GROUPS: _delete_groups,
    ApiKey.OFFSET_DELETE: _offset_delete,
    ApiKey.INIT_PRODUCER_ID: _init_producer_id,
    ApiKey.CREATE_TOPICS: _create_topics,
    ApiKey.DELETE_TOPICS: _delete_topics,
    ApiKey.DELETE_RECORDS: _delete_records,
    ApiKey.CREATE_PARTITIONS: _create_partitions,
    ApiKey.DESCRIBE_CONFIGS: _describe_configs,
    ApiKey.ALTER_CONFIGS: _alter_configs,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: _alter_configs,
    ApiKey.CREATE_ACLS: _cluster_rule(A.ALTER, _deny_acl_create),
    ApiKey.DELETE_ACLS: _cluster_rule(A.ALTER, _deny_acl_delete),
    ApiKey.DESCRIBE_ACLS: _cluster_rule(A.DESCRIBE, _top_level(ApiKey.DESCRIBE_ACLS)),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: _cluster_rule(A.ALTER, _deny_scram_alter),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS:
        _cluster_rule(A.DESCRIBE, _top_level(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS)),
    ApiKey.ELECT_LEADERS: _cluster_rule(A.ALTER, _deny_elect),
    # partition reassignment (KIP-455), as in Kafka: Alter / Describe on the cluster
    ApiKey.ALTER_PARTITION_REASSIGNMENTS:
        _cluster_rule(A.ALTER, _top_level(ApiKey.ALTER_PARTITION_REASSIGNMENTS)),
    ApiKey.LIST_PARTITION_REASSIGNMENTS:
        _cluster_rule(A.DESCRIBE, _top_level(ApiKey.LIST_PARTITION_REASSIGNMENTS)),
    # KIP-631: Alter on the cluster, as in Kafka
    ApiKey.UNREGISTER_BROKER: _cluster_rule(A.ALTER, _top_level(ApiKey.UNREGISTER_BROKER)),
    ApiKey.DESCRIBE_QUORUM: _cluster_rule(A.DESCRIBE, _top_level(ApiKey.DESCRIBE_QUORUM)),
    # controller membership (KIP-853), as in Kafka: Alter on the cluster
    ApiKey.ADD_RAFT_VOTER: _cluster_rule(A.ALTER, _top_level(ApiKey.ADD_RAFT_VOTER)),
    ApiKey.REMOVE_RAFT_VOTER: _cluster_rule(A.ALTER, _top_level(ApiKey.REMOVE_RAFT_VOTER)),
    ApiKey.DESCRIBE_LOG_DIRS: _cluster_rule(A.DESCRIBE, _top_level(ApiKey.DESCRIBE_LOG_DIRS)),
    # Kafka: Alter on the cluster, CLUSTER_AUTHORIZATION_FAILED for every partition asked
    ApiKey.ALTER_REPLICA_LOG_DIRS: _cluster_rule(A.ALTER, _deny_alter_log_dirs),
    ApiKey.DESCRIBE_CLUSTER: _cluster_rule(A.DESCRIBE, _top_level(ApiKey.DESCRIBE_CLUSTER)),
    ApiKey.WRITE_TXN_MARKERS:
        _cluster_rule(A.CLUSTER_ACTION, lambda req: RESPONSES[ApiKey.WRITE_TXN_MARKERS]()),
    # client quotas, as in Kafka
    ApiKey.DESCRIBE_CLIENT_QUOTAS:
        _cluster_rule(A.DESCRIBE_CONFIGS, _top_level(ApiKey.DESCRIBE_CLIENT_QUOTAS)),
    ApiKey.ALTER_CLIENT_QUOTAS:
        _cluster_rule(A.ALTER_CONFIGS, lambda req: _deny_quota_alter(req)),
    ApiKey.ADD_PARTITIONS_TO_TXN: _add_partitions_to_txn,
    ApiKey.DESCRIBE_TRANSACTIONS: _describe_transactions,
    ApiKey.LIST_TRANSACTIONS: _list_transactions,
    ApiKey.ADD_OFFSETS_TO_TXN:
        _txn_rule(lambda ok, req: ok(A.READ, A.GROUP, req.body.group_id)),
    ApiKey.END_TXN: _txn_rule(),
    ApiKey.TXN_OFFSET_COMMIT:
        _txn_rule(lambda ok, req: ok(A.READ, A.GROUP, req.body.group_id)),
}
ALWAYS_ALLOWED = {ApiKey.API_VERSIONS}


async def authorize_and_call(authorizer: A.Authorizer, ctx, request, call, topic_names=None):
    """`call(request)` runs the real handler; returns the (possibly amended) response.
    `topic_names`: {topic id: name} of the metadata image, for requests naming topics by id."""
    if request.api_key in ALWAYS_ALLOWED or ctx.principal in authorizer.super_users:
        return await call(request)
    rule = RULES.get(request.api_key)
    if rule is None:
        return _unknown_denied(request)
    return await rule(Check(authorizer, ctx, topic_names), request, call)


def _unknown_denied(request):
    cls = RESPONSES[request.api_key]
    if any(f.name == "error_code" for f in cls.FIELDS):
        return cls(error_code=CLUSTER_DENIED)
    raise PermissionError(f"{request.name} is not open to {request.api_key}")
