"""Kafka-protocol handlers of the controller listener: decode → controller command → encode.

Every mutation returns NOT_CONTROLLER (41) per item when this node is not the active controller
or loses leadership before the records commit; brokers and admin tools retry another voter.
"""

from __future__ import annotations

import time
import uuid

import trio

from metadata_quorum.records import encode_record  # noqa: F401  (re-exported for tests)
from metadata_quorum.stream_batches import stream_batch
from metadata_quorum.voter_handlers import handle_add_raft_voter, handle_remove_raft_voter
from wire.errors import ErrorCode
from wire.primitives import ZERO_UUID
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS, RESPONSES

METADATA_TOPIC = "__cluster_metadata"
MAX_FETCH_RECORDS = 5000

# What this listener implements (advertised in ApiVersions).
SUPPORTED: dict[int, tuple[int, int]] = {
    ApiKey.FETCH: (12, 12),                   # the metadata stream
    ApiKey.API_VERSIONS: (0, 3),
    ApiKey.CREATE_TOPICS: (2, 7),
    ApiKey.DELETE_TOPICS: (1, 6),
    ApiKey.CREATE_ACLS: (1, 3),
    ApiKey.DELETE_ACLS: (1, 3),
    ApiKey.ALTER_CONFIGS: (0, 2),
    ApiKey.CREATE_PARTITIONS: (0, 3),
    ApiKey.ELECT_LEADERS: (0, 2),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
    ApiKey.DESCRIBE_QUORUM: (0, 2),
    ApiKey.ALTER_PARTITION: (0, 3),
    ApiKey.FETCH_SNAPSHOT: (0, 1),
    ApiKey.BROKER_REGISTRATION: (0, 4),
    ApiKey.BROKER_HEARTBEAT: (0, 1),
    ApiKey.ALLOCATE_PRODUCER_IDS: (0, 0),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),  # forwarded by brokers
    ApiKey.ALTER_CLIENT_QUOTAS: (0, 1),       # forwarded by brokers
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 0),  # forwarded by brokers (KIP-455)
    ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0),   # forwarded by brokers
    ApiKey.ADD_RAFT_VOTER: (0, 0),            # KIP-853: voter_handlers.py
    ApiKey.REMOVE_RAFT_VOTER: (0, 0),
    ApiKey.UNREGISTER_BROKER: (0, 0),         # forwarded by brokers (KIP-631)
    ApiKey.ASSIGN_REPLICAS_TO_DIRS: (0, 0),   # KIP-858: replicas of offline log dirs
}


def _resp(api_key: int, **kw):
    return RESPONSES[api_key](**kw)


async def _mutate(svc, command, in_doubt: int = ErrorCode.NOT_CONTROLLER):
    """(result, None) or (None, NOT_CONTROLLER); `in_doubt`: the error when the command's
    records were proposed but their commit is unknown (a client-facing mutation answers
    REQUEST_TIMED_OUT: NOT_CONTROLLER would have the broker retry a command that may yet
    commit, and a retried CreateTopics then reads TOPIC_ALREADY_EXISTS of its own doing)."""
    from metadata_quorum.service import CommandRefused, CommitInDoubt, NotActive
    try:
        return await svc.mutate(command), None
    except CommitInDoubt:
        return None, in_doubt
    except NotActive:
        return None, ErrorCode.NOT_CONTROLLER
    except CommandRefused:
        return None, ErrorCode.INVALID_REQUEST


async def handle_api_versions(svc, req):
    cls = RESPONSES[ApiKey.API_VERSIONS]
    return cls(error_code=0, api_keys=[cls.ApiVersion(api_key=k, min_version=lo, max_version=hi)
                                       for k, (lo, hi) in sorted(SUPPORTED.items())])


async def handle_broker_registration(svc, req):
    b = req.body
    host, port = "127.0.0.1", 0
    if b.listeners:
        host, port = b.listeners[0].host, b.listeners[0].port
    listeners = tuple((x.name, x.host, x.port, x.security_protocol) for x in b.listeners)
    # v3+ (KIP-966): the epoch of the broker's last clean shutdown, -1 after an unclean one
    previous = b.previous_broker_epoch if req.api_version >= 3 else None
    # v2+: the broker's online log directories (KIP-858), kept in its registration
    dirs = tuple(b.log_dirs or ()) if req.api_version >= 2 else ()
    result, err = await _mutate(svc, lambda now: svc.controller.register_broker(
        b.broker_id, str(b.incarnation_id), host, port, b.rack or None, now, listeners,
        previous, dirs))
    if err:
        return _resp(ApiKey.BROKER_REGISTRATION, error_code=err, broker_epoch=-1)
    return _resp(ApiKey.BROKER_REGISTRATION, error_code=result.error, broker_epoch=result.broker_epoch)


async def handle_broker_heartbeat(svc, req):
    b = req.body
    offline = tuple(b.offline_log_dirs or ()) if req.api_version >= 1 else None  # KIP-858
    result, err = await _mutate(svc, lambda now: svc.controller.broker_heartbeat(
        b.broker_id, b.broker_epoch, b.current_metadata_offset, b.want_fence, b.want_shut_down,
        now, offline))
    if err:
        return _resp(ApiKey.BROKER_HEARTBEAT, error_code=err, is_fenced=True)
    if result.error == ErrorCode.NONE and b.raftka_partition_sizes is not None:
        # Raftka's tagged fields: the balancer's disk goal (controller/load_reports.py)
        svc.controller.loads.record(b.broker_id, b.raftka_load_report_full, {
            (t.name, p.partition_index): p.size_bytes
            for t in b.raftka_partition_sizes for p in t.partitions})
    if result.error == ErrorCode.NONE and b.raftka_replica_log_info is not None:
        # KIP-966 unclean recovery: replicas' log ends (controller/unclean_recovery.py)
        svc.controller.log_infos.record(b.broker_id, b.broker_epoch, [
            (t.topic_id, p.partition_index, p.partition_epoch, p.last_written_leader_epoch,
             p.log_end_offset) for t in b.raftka_replica_log_info for p in t.partitions])
    return _resp(ApiKey.BROKER_HEARTBEAT, error_code=result.error, is_caught_up=result.is_caught_up,
                 is_fenced=result.is_fenced, should_shut_down=result.should_shut_down)


async def handle_assign_replicas_to_dirs(svc, req):
    b = req.body
    dirs = {d.id: {t.topic_id: [p.partition_index for p in t.partitions] for t in d.topics}
            for d in b.directories}
    cls = RESPONSES[ApiKey.ASSIGN_REPLICAS_TO_DIRS]
    result, err = await _mutate(svc, lambda now: svc.controller.assign_replicas_to_dirs(
        b.broker_id, b.broker_epoch, dirs))
    if err:
        return cls(error_code=err)
    code, errors = result
    return cls(error_code=code, directories=[cls.DirectoryData(id=d, topics=[
        cls.TopicData(topic_id=tid, partitions=[
            cls.PartitionData(partition_index=p, error_code=e) for p, e in ps.items()])
        for tid, ps in topics.items()]) for d, topics in errors.items()])


async def handle_create_topics(svc, req):
    cls = RESPONSES[ApiKey.CREATE_TOPICS]
    topics = []
    for t in req.body.topics:
        assignments = {a.partition_index: list(a.broker_ids) for a in t.assignments} or None
        topics.append({"name": t.name, "num_partitions": t.num_partitions,
                       "replication_factor": t.replication_factor, "assignments": assignments,
                       "configs": {c.name: c.value for c in t.configs if c.value is not None}})
    results, err = await _mutate(svc, lambda now: svc.controller.create_topics(
        topics, req.body.validate_only), ErrorCode.REQUEST_TIMED_OUT)
    out = []
    for i, t in enumerate(topics):
        if err:
            out.append(cls.CreatableTopicResult(name=t["name"], error_code=err))
            continue
        res = results[i]
        out.append(cls.CreatableTopicResult(
            name=res.name, error_code=res.error, error_message=res.message,
            topic_id=res.topic_id or cls.CreatableTopicResult().topic_id,
            num_partitions=res.num_partitions, replication_factor=res.replication_factor))
    return cls(topics=out)


async def handle_delete_topics(svc, req):
    cls = RESPONSES[ApiKey.DELETE_TOPICS]
    names = list(req.body.topic_names)
    ids = []
    for t in req.body.topics:
        if t.name is not None:
            names.append(t.name)
        else:
            ids.append(t.topic_id)
    results, err = await _mutate(svc, lambda now: svc.controller.delete_topics(names, ids),
                                 ErrorCode.REQUEST_TIMED_OUT)
    if err:
        return cls(responses=[cls.DeletableTopicResult(name=n, error_code=err) for n in names])
    return cls(responses=[cls.DeletableTopicResult(name=r.name, topic_id=r.topic_id or
                                                   cls.DeletableTopicResult().topic_id,
                                                   error_code=r.error, error_message=r.message)
                          for r in results])


async def handle_create_partitions(svc, req):
    cls = RESPONSES[ApiKey.CREATE_PARTITIONS]
    reqs = [(t.name, t.count, [list(a.broker_ids) for a in t.assignments] if t.assignments else None)
            for t in req.body.topics]
    results, err = await _mutate(svc, lambda now: svc.controller.create_partitions(
        reqs, req.body.validate_only), ErrorCode.REQUEST_TIMED_OUT)
    if err:
        return cls(results=[cls.CreatePartitionsTopicResult(name=n, error_code=err) for n, _, _ in reqs])
    return cls(results=[cls.CreatePartitionsTopicResult(name=r.name, error_code=r.error,
                                                        error_message=r.message) for r in results])


async def handle_incremental_alter_configs(svc, req):
    cls = RESPONSES[ApiKey.INCREMENTAL_ALTER_CONFIGS]
    resources = [(r.resource_type, r.resource_name,
                  [(c.name, c.config_operation, c.value) for c in r.configs])
                 for r in req.body.resources]
    results, err = await _mutate(svc, lambda now: svc.controller.incremental_alter_configs(
        resources, req.body.validate_only))
    out = []
    for i, (rtype, name, _) in enumerate(resources):
        code, msg = (err, None) if err else results[i]
        out.append(cls.AlterConfigsResourceResponse(error_code=code, error_message=msg,
                                                    resource_type=rtype, resource_name=name))
    return cls(responses=out)


async def handle_alter_configs(svc, req):
    cls = RESPONSES[ApiKey.ALTER_CONFIGS]
    resources = [(r.resource_type, r.resource_name, {c.name: c.value for c in r.configs})
                 for r in req.body.resources]
    results, err = await _mutate(svc, lambda now: svc.controller.alter_configs(
        resources, req.body.validate_only))
    out = []
    for i, (rtype, name, _) in enumerate(resources):
        code, msg = (err, None) if err else results[i]
        out.append(cls.AlterConfigsResourceResponse(error_code=code, error_message=msg,
                                                    resource_type=rtype, resource_name=name))
    return cls(responses=out)


async def handle_alter_partition(svc, req):
    cls = RESPONSES[ApiKey.ALTER_PARTITION]
    b = req.body
    v = req.api_version
    items = []
    for t in b.topics:
        topic_id = t.topic_id
        if v < 2:
            topic = svc.controller.image.topics.get(t.topic_name)
            topic_id = topic.topic_id if topic else None
        for p in t.partitions:
            isr = list(p.new_isr) if v < 3 else [x.broker_id for x in p.new_isr_with_epochs]
            items.append((t, topic_id, p, isr))

    def command(now):
        records, results = [], []
        for t, topic_id, p, isr in items:
            if topic_id is None:
                results.append(None)
                continue
            recs, res = svc.controller.alter_partition(b.broker_id, b.broker_epoch, topic_id,
                                                       p.partition_index, p.leader_epoch,
                                                       p.partition_epoch, isr)
            records += recs
            results.append(res)
        return records, results

    results, err = await _mutate(svc, command)
    by_topic: dict = {}
    for i, (t, topic_id, p, isr) in enumerate(items):
        res = results[i] if results else None
        entry = by_topic.setdefault(id(t), cls.TopicData(topic_name=t.topic_name, topic_id=t.topic_id))
        if err or res is None:
            code = err or ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            entry.partitions.append(cls.PartitionData(partition_index=p.partition_index, error_code=code))
        else:
            entry.partitions.append(cls.PartitionData(
                partition_index=p.partition_index, error_code=res.error, leader_id=res.leader,
                leader_epoch=res.leader_epoch, isr=list(res.isr), partition_epoch=res.partition_epoch))
    return cls(error_code=0, topics=list(by_topic.values()))


async def handle_elect_leaders(svc, req):
    cls = RESPONSES[ApiKey.ELECT_LEADERS]
    parts = [(t.topic, p) for t in (req.body.topic_partitions or []) for p in t.partitions]
    results, err = await _mutate(svc, lambda now: svc.controller.elect_leaders(
        req.body.election_type, parts))
    by_topic: dict = {}
    for i, (topic, p) in enumerate(parts):
        code = err or results[i][2]
        by_topic.setdefault(topic, []).append(cls.PartitionResult(partition_id=p, error_code=code))
    return cls(error_code=0, replica_election_results=[
        cls.ReplicaElectionResult(topic=t, partition_result=ps) for t, ps in by_topic.items()])


async def handle_create_acls(svc, req):
    from metadata_quorum.controller.acl_control import AclBinding
    cls = RESPONSES[ApiKey.CREATE_ACLS]
    bindings = [AclBinding(c.resource_type, c.resource_name, c.resource_pattern_type, c.principal,
                           c.host, c.operation, c.permission_type) for c in req.body.creations]
    results, err = await _mutate(svc, lambda now: svc.controller.create_acls(bindings))
    if err:
        return cls(results=[cls.AclCreationResult(error_code=err) for _ in bindings])
    return cls(results=[cls.AclCreationResult(error_code=x.error, error_message=x.message)
                        for x in results])


async def handle_delete_acls(svc, req):
    from metadata_quorum.controller.acl_control import AclFilter
    cls = RESPONSES[ApiKey.DELETE_ACLS]
    filters = [AclFilter(f.resource_type_filter, f.resource_name_filter, f.pattern_type_filter,
                         f.principal_filter, f.host_filter, f.operation, f.permission_type)
               for f in req.body.filters]
    results, err = await _mutate(svc, lambda now: svc.controller.delete_acls(filters))
    if err:
        return cls(filter_results=[cls.DeleteAclsFilterResult(error_code=err) for _ in filters])
    return cls(filter_results=[cls.DeleteAclsFilterResult(
        error_code=x.error, error_message=x.message, matching_acls=[cls.DeleteAclsMatchingAcl(
            resource_type=b.resource_type, resource_name=b.resource_name,
            pattern_type=b.pattern_type, principal=b.principal, host=b.host,
            operation=b.operation, permission_type=b.permission_type) for b in x.matches])
        for x in results])


async def handle_alter_user_scram_credentials(svc, req):
    """Only salted keys reach the log (feature_control turns salted passwords into keys)."""
    from metadata_quorum.controller.feature_control import ScramUpsertion
    cls = RESPONSES[ApiKey.ALTER_USER_SCRAM_CREDENTIALS]
    b = req.body
    deletions = [(d.name, d.mechanism) for d in b.deletions]
    upsertions = [ScramUpsertion(u.name, u.mechanism, u.iterations, bytes(u.salt),
                                 bytes(u.salted_password)) for u in b.upsertions]
    users = list(dict.fromkeys([n for n, _ in deletions] + [u.name for u in upsertions]))
    results, err = await _mutate(svc, lambda now: svc.controller.alter_user_scram_credentials(
        deletions, upsertions))
    if err:
        return cls(results=[cls.AlterUserScramCredentialsResult(user=u, error_code=err)
                            for u in users])
    return cls(results=[cls.AlterUserScramCredentialsResult(
        user=u, error_code=results[u][0], error_message=results[u][1]) for u in users])


async def handle_alter_client_quotas(svc, req):
    """KIP-546; validation and records in controller/quota_control.py."""
    cls = RESPONSES[ApiKey.ALTER_CLIENT_QUOTAS]
    entries = [(tuple((e.entity_type, e.entity_name) for e in x.entity),
                [(o.key, o.value, o.remove) for o in x.ops]) for x in req.body.entries]
    results, err = await _mutate(svc, lambda now: svc.controller.alter_client_quotas(
        entries, req.body.validate_only))
    out = []
    for i, x in enumerate(req.body.entries):
        code, msg = (err, None) if err else results[i]
        out.append(cls.EntryData(error_code=code, error_message=msg, entity=[
            cls.EntityData(entity_type=e.entity_type, entity_name=e.entity_name)
            for e in x.entity]))
    return cls(entries=out)


async def handle_alter_partition_reassignments(svc, req):
    """KIP-455; decisions in controller/reassignment.py. Per partition: NONE,
    UNKNOWN_TOPIC_OR_PARTITION, NO_REASSIGNMENT_IN_PROGRESS, INVALID_REPLICA_ASSIGNMENT; top-level
    NOT_CONTROLLER when this node is not (or stops being) the active controller."""
    cls = RESPONSES[ApiKey.ALTER_PARTITION_REASSIGNMENTS]
    moves = [(t.name, p.partition_index, None if p.replicas is None else list(p.replicas))
             for t in req.body.topics for p in t.partitions]
    results, err = await _mutate(svc, lambda now: svc.controller.alter_partition_reassignments(
        moves))
    if err:
        return cls(error_code=err, error_message=err.name, responses=[])
    by_topic: dict = {}
    for (topic, partition, _), (code, message) in zip(moves, results):
        by_topic.setdefault(topic, []).append(cls.ReassignablePartitionResponse(
            partition_index=partition, error_code=code, error_message=message))
    return cls(error_code=0, responses=[cls.ReassignableTopicResponse(name=t, partitions=ps)
                                        for t, ps in by_topic.items()])


async def handle_list_partition_reassignments(svc, req):
    """Moves in progress, from the active controller's image (NOT_CONTROLLER elsewhere: a
    follower's image may lag behind a move just accepted)."""
    cls = RESPONSES[ApiKey.LIST_PARTITION_REASSIGNMENTS]
    topics = None if req.body.topics is None else [
        (t.name, list(t.partition_indexes)) for t in req.body.topics]
    found, err = await _mutate(svc, lambda now: (
        [], svc.controller.list_partition_reassignments(topics)))
    if err:
        return cls(error_code=err, error_message=err.name)
    return cls(error_code=0, topics=[cls.OngoingTopicReassignment(name=name, partitions=[
        cls.OngoingPartitionReassignment(partition_index=o.partition, replicas=list(o.replicas),
                                         adding_replicas=list(o.adding),
                                         removing_replicas=list(o.removing)) for o in moves])
        for name, moves in found])


async def handle_unregister_broker(svc, req):
    """KIP-631: the broker's registration goes (it disappears from Metadata); its leaderships
    move and it leaves every ISR where it is not the last member, as in KRaft. Replicas it still
    hosts stay in their replica lists (under-replicated, as Kafka leaves them): drain it first
    (`raftka cluster decommission`). BROKER_ID_NOT_REGISTERED for an unknown id; NOT_CONTROLLER
    when this node is not (or stops being) the active controller."""
    cls = RESPONSES[ApiKey.UNREGISTER_BROKER]
    broker_id = req.body.broker_id
    code, err = await _mutate(svc, lambda now: svc.controller.unregister_broker(broker_id))
    code = err or code
    message = (f"Broker ID {broker_id} is not currently registered."
               if code == ErrorCode.BROKER_ID_NOT_REGISTERED else None)
    return cls(error_code=code, error_message=message)


async def handle_allocate_producer_ids(svc, req):
    res, err = await _mutate(svc, lambda now: svc.controller.allocate_producer_ids(
        req.body.broker_id, req.body.broker_epoch))
    if err:
        return _resp(ApiKey.ALLOCATE_PRODUCER_IDS, error_code=err)
    code, start, length = res
    return _resp(ApiKey.ALLOCATE_PRODUCER_IDS, error_code=code, producer_id_start=start,
                 producer_id_len=length)


async def handle_describe_quorum(svc, req):
    """Voters: the committed voter set (VotersRecord, else the configured one), with the
    listeners of each in Nodes (v2). Observers: the brokers following the metadata stream."""
    cls = RESPONSES[ApiKey.DESCRIBE_QUORUM]
    st = svc.quorum.status()
    voters = []
    current = svc.current_voters()
    for nid in sorted(current):
        # Voters' positions are Raft log indexes (pysyncobj's), known only on the leader.
        if nid == svc.config.node_id:
            leo = st["commit_index"]
        else:
            leo = st["match_index"].get(nid, -1) if svc.active else -1
        voters.append(cls.ReplicaState(replica_id=nid, replica_directory_id=_directory_uuid(
                                           st.get("voter_directories", {}).get(nid)),
                                       log_end_offset=leo,
                                       last_fetch_timestamp=-1, last_caught_up_timestamp=-1))
    observers = [cls.ReplicaState(replica_id=b, log_end_offset=off, last_fetch_timestamp=ts,
                                  last_caught_up_timestamp=ts if off >= svc.next_offset else -1)
                 for b, (off, ts) in sorted(svc.observers.items())]
    part = cls.PartitionData(partition_index=0, leader_id=st["leader_id"], leader_epoch=st["term"],
                             high_watermark=svc.next_offset, current_voters=voters,
                             observers=observers)
    nodes = [cls.Node(node_id=nid, listeners=[cls.Listener(name="CONTROLLER", host=v.host,
                                                           port=v.port)])
             for nid, v in sorted(current.items())]
    return cls(error_code=0, topics=[cls.TopicData(topic_name=METADATA_TOPIC, partitions=[part])],
               nodes=nodes)


def _directory_uuid(directory: str | None) -> uuid.UUID:
    """A voter's directory id as DescribeQuorum v2 carries it (zero: not known here)."""
    try:
        return uuid.UUID(hex=directory) if directory else ZERO_UUID
    except ValueError:
        return ZERO_UUID


async def handle_fetch(svc, req):
    """The metadata stream (see service.py)."""
    cls = RESPONSES[ApiKey.FETCH]
    b = req.body
    try:
        part = b.topics[0].partitions[0]
    except IndexError:
        return cls(error_code=ErrorCode.INVALID_REQUEST)
    offset = part.fetch_offset
    if not svc.is_voter:
        # removed from the quorum (or not added yet): no new records reach this controller
        return cls(responses=[cls.FetchableTopicResponse(topic=METADATA_TOPIC, partitions=[
            cls.PartitionData(partition_index=0, error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER)])])
    with trio.move_on_after(max(b.max_wait_ms, 0) / 1000):
        while offset >= svc.next_offset and offset >= svc.tail_start:
            await svc.new_data.wait()
    svc.observers[b.replica_id] = (offset, int(time.time() * 1000))
    pd = cls.PartitionData(partition_index=0, high_watermark=svc.next_offset,
                           last_stable_offset=svc.next_offset, log_start_offset=svc.tail_start)
    encoded = svc.tail[offset - svc.tail_start:offset - svc.tail_start + MAX_FETCH_RECORDS] \
        if svc.tail_start <= offset < svc.next_offset else []
    if offset > svc.next_offset:
        # this voter is behind the broker (restarting, or cut off): the broker asks another
        pd.error_code = ErrorCode.OFFSET_OUT_OF_RANGE
    elif offset < svc.tail_start or (offset < svc.next_offset and not encoded):
        # older than the records kept for the stream: the broker loads the image (FetchSnapshot)
        pd.snapshot_id = cls.SnapshotId(end_offset=svc.next_offset, epoch=0)
    elif encoded:
        pd.records = await stream_batch(offset, encoded)
    return cls(responses=[cls.FetchableTopicResponse(topic=METADATA_TOPIC, partitions=[pd])])


async def handle_fetch_snapshot(svc, req):
    cls = RESPONSES[ApiKey.FETCH_SNAPSHOT]
    image = svc.committed_image             # not the speculative one: it pairs with next_offset
    end = svc.next_offset
    data = await svc.snapshot_batches.batch(image, end)
    pd = cls.PartitionSnapshot(index=0, snapshot_id=cls.SnapshotId(end_offset=end, epoch=0),
                               size=len(data), position=0, unaligned_records=data)
    return cls(topics=[cls.TopicSnapshot(name=METADATA_TOPIC, partitions=[pd])])


HANDLERS = {
    ApiKey.FETCH: handle_fetch,
    ApiKey.API_VERSIONS: handle_api_versions,
    ApiKey.CREATE_TOPICS: handle_create_topics,
    ApiKey.DELETE_TOPICS: handle_delete_topics,
    ApiKey.CREATE_ACLS: handle_create_acls,
    ApiKey.DELETE_ACLS: handle_delete_acls,
    ApiKey.ALTER_CONFIGS: handle_alter_configs,
    ApiKey.CREATE_PARTITIONS: handle_create_partitions,
    ApiKey.ELECT_LEADERS: handle_elect_leaders,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: handle_incremental_alter_configs,
    ApiKey.DESCRIBE_QUORUM: handle_describe_quorum,
    ApiKey.ALTER_PARTITION: handle_alter_partition,
    ApiKey.FETCH_SNAPSHOT: handle_fetch_snapshot,
    ApiKey.BROKER_REGISTRATION: handle_broker_registration,
    ApiKey.BROKER_HEARTBEAT: handle_broker_heartbeat,
    ApiKey.ALLOCATE_PRODUCER_IDS: handle_allocate_producer_ids,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: handle_alter_user_scram_credentials,
    ApiKey.ALTER_CLIENT_QUOTAS: handle_alter_client_quotas,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: handle_alter_partition_reassignments,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: handle_list_partition_reassignments,
    ApiKey.ADD_RAFT_VOTER: handle_add_raft_voter,
    ApiKey.REMOVE_RAFT_VOTER: handle_remove_raft_voter,
    ApiKey.UNREGISTER_BROKER: handle_unregister_broker,
    ApiKey.ASSIGN_REPLICAS_TO_DIRS: handle_assign_replicas_to_dirs,
}
assert set(HANDLERS) == set(SUPPORTED)
assert all(REQUESTS[k].VALID_VERSIONS[0] <= lo and hi <= REQUESTS[k].VALID_VERSIONS[1]
           for k, (lo, hi) in SUPPORTED.items())
