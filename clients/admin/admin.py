"""The admin client: topics, partitions, configs, ACLs, groups and offsets, cluster and quorum.

    async with AdminClient("127.0.0.1:9092") as admin:
        errors = await admin.create_topics([NewTopic("events", 6, 3)])
        print(await admin.describe_topics(["events"]))

Calls that act on several items (topics, groups, ACL creations...) return a dict/list of
per-item outcomes — `None` for success or the typed `KafkaError` the broker answered — because
one bad name must not hide what happened to the others; the CLI prints each. Calls that fail as a
whole (cluster unreachable, request timed out) raise.

Routing follows Kafka's admin client: topic/ACL/config mutations go to the controller named in
metadata (brokers forward them to the active controller anyway), group calls to the group's
coordinator, per-partition calls (ListOffsets, DeleteRecords) to each partition's leader, and
everything else to any broker. Retriable answers (NOT_CONTROLLER, NOT_COORDINATOR, LEADER moves,
timeouts) are retried with backoff within `default.api.timeout.ms`.
"""

from __future__ import annotations

from typing import Iterable

import trio

from clients.admin.config import ADMIN
from clients.admin.brokers import BrokerCalls
from clients.admin.reassignments import ReassignmentCalls
from clients.admin.types import (
    ResourceType, PatternType, AclOperation, AclPermissionType, ConfigResourceType, NewTopic,
    PartitionDescription, TopicDescription, ConfigResource, ConfigEntry, AlterConfigOp, AclBinding,
    AclBindingFilter, GroupListing, MemberDescription, GroupDescription, OffsetAndMetadata,
    CONFIG_SOURCES, EARLIEST, LATEST)
from clients.cluster import COORDINATOR_GROUP, Cluster, TopicPartition
from common.security import ClientSecurity
from clients.errors import (KafkaConnectionError, KafkaTimeoutError, Retry, UnknownTopicError,
                            check, classify)
from wire.errors import ErrorCode, KafkaError
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS
from wire.messages.consumer_protocol_assignment_generated import ConsumerProtocolAssignment


def _uuid_str(u) -> str:
    if u is None:
        return ""
    return str(u)


def decode_assignment(data: bytes | None) -> list[TopicPartition]:
    """A classic consumer's assignment bytes -> partitions ([] for other protocols/garbage)."""
    if not data or len(data) < 2:
        return []
    try:
        version = int.from_bytes(data[:2], "big", signed=True)
        version = max(0, min(version, ConsumerProtocolAssignment.VALID_VERSIONS[1]))
        msg, _ = ConsumerProtocolAssignment.decode_from(memoryview(bytes(data)), 2, version)
    except Exception:  # noqa: BLE001 - a non-consumer protocol's bytes are not ours to judge
        return []
    return [TopicPartition(t.topic, p) for t in msg.assigned_partitions for p in t.partitions]


def _err(code: int, message: str | None = None, what: str = "") -> KafkaError | None:
    if not code:
        return None
    try:
        check(code, message, what)
    except KafkaError as exc:
        return exc
    return None


class AdminClient(ReassignmentCalls, BrokerCalls):  # KIP-455 calls; UnregisterBroker
    def __init__(self, bootstrap: str | Cluster | None = None, config: dict | None = None,
                 *, security: ClientSecurity | None = None, **kwargs):
        props = dict(config or {})
        props.update({k.replace("_", "."): v for k, v in kwargs.items()})
        if isinstance(bootstrap, str):
            props["bootstrap.servers"] = bootstrap
        self.config = cfg = ADMIN.parse(props)
        if isinstance(bootstrap, Cluster):
            self.cluster, self._own_cluster = bootstrap, False
        else:
            self.cluster = Cluster.from_config(cfg, security)
            self._own_cluster = True
        self.timeout_s = cfg["default.api.timeout.ms"] / 1000
        self.backoff_s = cfg["retry.backoff.ms"] / 1000

    async def start(self) -> "AdminClient":
        if self._own_cluster:
            await self.cluster.start()
        return self

    async def aclose(self) -> None:
        if self._own_cluster:
            await self.cluster.aclose()

    async def __aenter__(self) -> "AdminClient":
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    # -- plumbing --------------------------------------------------------------------------------

    async def _retrying(self, attempt, retriable_codes=lambda resp: []):
        """Run `attempt()` until it answers without retriable errors or the api timeout passes.
        `retriable_codes(resp)` lists the per-item codes in an answer."""
        deadline = trio.current_time() + self.timeout_s
        while True:
            try:
                resp = await attempt()
                codes = [c for c in retriable_codes(resp) if classify(c) is not Retry.NO]
                if not codes:
                    return resp
                last: Exception = KafkaError.from_code(codes[0])
                refresh = any(classify(c) is Retry.REFRESH_AND_RETRY for c in codes)
            except (KafkaConnectionError, KafkaTimeoutError) as exc:
                last, refresh = exc, True
            if trio.current_time() + self.backoff_s >= deadline:
                raise KafkaTimeoutError(f"gave up after {self.timeout_s:g} s: {last}")
            if refresh:
                try:
                    await self.cluster.refresh_metadata(force=True)
                except KafkaError:
                    pass
            await trio.sleep(self.backoff_s)

    # -- topics ----------------------------------------------------------------------------------

    async def create_topics(self, topics: list[NewTopic], *, validate_only: bool = False,
                            timeout_ms: int = 30_000) -> dict[str, KafkaError | None]:
        ct = REQUESTS[ApiKey.CREATE_TOPICS]
        req = ct(topics=[ct.CreatableTopic(
            name=t.name, num_partitions=t.num_partitions if not t.replica_assignment else -1,
            replication_factor=t.replication_factor if not t.replica_assignment else -1,
            assignments=[ct.CreatableReplicaAssignment(partition_index=p, broker_ids=list(b))
                         for p, b in sorted((t.replica_assignment or {}).items())],
            configs=[ct.CreatableTopicConfig(name=k, value=str(v)) for k, v in t.configs.items()])
            for t in topics], timeout_ms=timeout_ms, validate_only=validate_only)
        resp = await self._retrying(lambda: self.cluster.call_controller(req, min_version=2),
                                    lambda r: [t.error_code for t in r.topics
                                               if t.error_code == ErrorCode.NOT_CONTROLLER])
        out = {t.name: _err(t.error_code, t.error_message, f"topic {t.name!r}")
               for t in resp.topics}
        created = [n for n, e in out.items() if e is None]
        if created and not validate_only:
            self.cluster.add_topics(created)
        return out

    async def list_topics(self, include_internal: bool = False) -> list[str]:
        md = await self._retrying(lambda: self.cluster.refresh_metadata(force=True,
                                                                        all_topics=True))
        return sorted(n for n, t in md.topics.items() if include_internal or not t.is_internal)

    async def describe_topics(self, names: Iterable[str] | None = None
                              ) -> dict[str, TopicDescription | KafkaError]:
        """Descriptions of `names` (None: every non-internal topic); unknown ones map to their
        error."""
        names = None if names is None else list(names)
        md = await self._retrying(lambda: self.cluster.refresh_metadata(
            names or [], force=True, all_topics=names is None))
        out: dict[str, TopicDescription | KafkaError] = {}
        wanted = names if names is not None else sorted(
            n for n, t in md.topics.items() if not t.is_internal)
        for n in wanted:
            t = md.topics.get(n)
            if t is None:
                code = md.topic_errors.get(n, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                out[n] = _err(code, None, f"topic {n!r}")
                continue
            out[n] = TopicDescription(n, _uuid_str(t.topic_id), t.is_internal, [
                PartitionDescription(p.partition, p.leader, p.leader_epoch, p.replicas, p.isr,
                                     p.offline) for _, p in sorted(t.partitions.items())])
        return out

    async def create_partitions(self, new_counts: dict[str, int], *, validate_only: bool = False,
                                timeout_ms: int = 30_000) -> dict[str, KafkaError | None]:
        cp = REQUESTS[ApiKey.CREATE_PARTITIONS]
        req = cp(topics=[cp.CreatePartitionsTopic(name=n, count=c, assignments=None)
                         for n, c in new_counts.items()], timeout_ms=timeout_ms,
                 validate_only=validate_only)
        resp = await self._retrying(lambda: self.cluster.call_controller(req),
                                    lambda r: [t.error_code for t in r.results
                                               if t.error_code == ErrorCode.NOT_CONTROLLER])
        return {t.name: _err(t.error_code, t.error_message, f"topic {t.name!r}")
                for t in resp.results}

    async def delete_topics(self, names: list[str], *, timeout_ms: int = 30_000
                            ) -> dict[str, KafkaError | None]:
        dt = REQUESTS[ApiKey.DELETE_TOPICS]

        def build(v):
            if v >= 6:
                return dt(topics=[dt.DeleteTopicState(name=n) for n in names],
                          timeout_ms=timeout_ms)
            return dt(topic_names=list(names), timeout_ms=timeout_ms)

        async def attempt():
            node = self.cluster.metadata.controller_id
            if node not in self.cluster.metadata.brokers:
                node = self.cluster.any_node()
            return await self.cluster.call_versioned(node, build, ApiKey.DELETE_TOPICS)
        resp = await self._retrying(attempt, lambda r: [t.error_code for t in r.responses
                                                        if t.error_code == ErrorCode.NOT_CONTROLLER])
        return {t.name: _err(t.error_code, t.error_message, f"topic {t.name!r}")
                for t in resp.responses}

    # -- configs ---------------------------------------------------------------------------------

    async def describe_configs(self, resources: list[ConfigResource]
                               ) -> dict[ConfigResource, list[ConfigEntry] | KafkaError]:
        dc = REQUESTS[ApiKey.DESCRIBE_CONFIGS]
        out: dict[ConfigResource, list[ConfigEntry] | KafkaError] = {}
        # broker resources must be asked of that broker; the rest of any broker
        groups: dict[int | None, list[ConfigResource]] = {}
        for r in resources:
            node = int(r.name) if r.type in (ConfigResourceType.BROKER,
                                              ConfigResourceType.BROKER_LOGGER) and r.name else None
            groups.setdefault(node, []).append(r)
        for node, rs in groups.items():
            req = dc(resources=[dc.DescribeConfigsResource(
                resource_type=int(r.type), resource_name=r.name, configuration_keys=None)
                for r in rs], include_synonyms=False, include_documentation=False)
            if node is not None and node not in self.cluster.metadata.brokers:
                for r in rs:
                    out[r] = _err(ErrorCode.BROKER_NOT_AVAILABLE, f"no broker {node}",
                                  f"broker {node}")
                continue
            resp = await self._retrying(
                lambda req=req, node=node: self.cluster.call(node, req) if node is not None
                else self.cluster.call_any(req))
            for res in resp.results:
                key = ConfigResource(ConfigResourceType(res.resource_type), res.resource_name)
                if res.error_code:
                    out[key] = _err(res.error_code, res.error_message,
                                    f"{key.type.name.lower()} {key.name!r}")
                else:
                    out[key] = [ConfigEntry(c.name, c.value,
                                            CONFIG_SOURCES.get(c.config_source, "UNKNOWN"),
                                            bool(c.read_only), bool(c.is_sensitive))
                                for c in res.configs]
        return out

    async def incremental_alter_configs(self, changes: dict[ConfigResource, list[AlterConfigOp]],
                                        *, validate_only: bool = False
                                        ) -> dict[ConfigResource, KafkaError | None]:
        ia = REQUESTS[ApiKey.INCREMENTAL_ALTER_CONFIGS]
        req = ia(resources=[ia.AlterConfigsResource(
            resource_type=int(r.type), resource_name=r.name, configs=[ia.AlterableConfig(
                name=op.name, config_operation=int(op.op), value=op.value) for op in ops])
            for r, ops in changes.items()], validate_only=validate_only)
        resp = await self._retrying(lambda: self.cluster.call_controller(req),
                                    lambda r: [x.error_code for x in r.responses
                                               if x.error_code == ErrorCode.NOT_CONTROLLER])
        out = {}
        for x in resp.responses:
            key = ConfigResource(ConfigResourceType(x.resource_type), x.resource_name)
            out[key] = _err(x.error_code, x.error_message, f"{key.type.name.lower()} {key.name!r}")
        return out

    # -- ACLs ------------------------------------------------------------------------------------

    async def create_acls(self, bindings: list[AclBinding]) -> list[KafkaError | None]:
        ca = REQUESTS[ApiKey.CREATE_ACLS]
        req = ca(creations=[ca.AclCreation(
            resource_type=int(b.resource_type), resource_name=b.resource_name,
            resource_pattern_type=int(b.pattern_type), principal=b.principal, host=b.host,
            operation=int(b.operation), permission_type=int(b.permission_type)) for b in bindings])
        resp = await self._retrying(lambda: self.cluster.call_controller(req, min_version=1))
        return [_err(r.error_code, r.error_message) for r in resp.results]

    async def describe_acls(self, f: AclBindingFilter = AclBindingFilter()) -> list[AclBinding]:
        da = REQUESTS[ApiKey.DESCRIBE_ACLS]
        req = da(resource_type_filter=int(f.resource_type), resource_name_filter=f.resource_name,
                 pattern_type_filter=int(f.pattern_type), principal_filter=f.principal,
                 host_filter=f.host, operation=int(f.operation), permission_type=int(f.permission_type))
        resp = await self._retrying(lambda: self.cluster.call_any(req, min_version=1))
        check(resp.error_code, resp.error_message, "describe ACLs")
        return [AclBinding(ResourceType(r.resource_type), r.resource_name,
                           PatternType(r.pattern_type), a.principal, a.host,
                           AclOperation(a.operation), AclPermissionType(a.permission_type))
                for r in resp.resources for a in r.acls]

    async def delete_acls(self, filters: list[AclBindingFilter]
                          ) -> list[list[AclBinding] | KafkaError]:
        dl = REQUESTS[ApiKey.DELETE_ACLS]
        req = dl(filters=[dl.DeleteAclsFilter(
            resource_type_filter=int(f.resource_type), resource_name_filter=f.resource_name,
            pattern_type_filter=int(f.pattern_type), principal_filter=f.principal,
            host_filter=f.host, operation=int(f.operation), permission_type=int(f.permission_type))
            for f in filters])
        resp = await self._retrying(lambda: self.cluster.call_controller(req, min_version=1))
        out: list = []
        for fr in resp.filter_results:
            if fr.error_code:
                out.append(_err(fr.error_code, fr.error_message, "delete ACLs"))
                continue
            out.append([AclBinding(ResourceType(m.resource_type), m.resource_name,
                                   PatternType(m.pattern_type), m.principal, m.host,
                                   AclOperation(m.operation), AclPermissionType(m.permission_type))
                        for m in fr.matching_acls if not m.error_code])
        return out

    # -- groups ----------------------------------------------------------------------------------

    async def list_groups(self) -> list[GroupListing]:
        """Every group on every broker (each coordinator knows only its own)."""
        await self.cluster.refresh_metadata(force=True)
        lg = REQUESTS[ApiKey.LIST_GROUPS]
        out: dict[str, GroupListing] = {}
        for node in sorted(self.cluster.metadata.brokers):
            resp = await self._retrying(lambda node=node: self.cluster.call(
                node, lg(states_filter=[], types_filter=[])), lambda r: [r.error_code])
            check(resp.error_code, None, f"list groups on broker {node}")
            for g in resp.groups:
                out[g.group_id] = GroupListing(g.group_id, g.protocol_type or "",
                                               g.group_state or "", g.group_type or "")
        return sorted(out.values(), key=lambda g: g.group_id)

    async def _on_coordinator(self, group: str, call, codes=lambda r: []):
        async def attempt():
            node = await self.cluster.find_coordinator(group, COORDINATOR_GROUP,
                                                       timeout_s=self.timeout_s)
            resp = await call(node)
            if any(c in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE)
                   for c in codes(resp)):
                self.cluster.forget_coordinator(group)
            return node, resp
        return await self._retrying(attempt, lambda nr: codes(nr[1]))

    async def describe_groups(self, group_ids: list[str]
                              ) -> dict[str, GroupDescription | KafkaError]:
        dg = REQUESTS[ApiKey.DESCRIBE_GROUPS]
        out: dict[str, GroupDescription | KafkaError] = {}
        for gid in group_ids:
            node, resp = await self._on_coordinator(
                gid, lambda n, gid=gid: self.cluster.call(n, dg(
                    groups=[gid], include_authorized_operations=False)),
                lambda r: [g.error_code for g in r.groups])
            g = resp.groups[0]
            if g.error_code:
                out[gid] = _err(g.error_code, None, f"group {gid!r}")
                continue
            members = [MemberDescription(
                m.member_id, m.group_instance_id, m.client_id, m.client_host,
                decode_assignment(m.member_assignment) if g.protocol_type == "consumer" else [])
                for m in g.members]
            out[gid] = GroupDescription(gid, g.group_state, g.protocol_type or "",
                                        g.protocol_data or "", members, node)
        return out

    async def delete_groups(self, group_ids: list[str]) -> dict[str, KafkaError | None]:
        dg = REQUESTS[ApiKey.DELETE_GROUPS]
        out = {}
        for gid in group_ids:
            _, resp = await self._on_coordinator(
                gid, lambda n, gid=gid: self.cluster.call(n, dg(groups_names=[gid])),
                lambda r: [x.error_code for x in r.results])
            x = resp.results[0]
            out[gid] = _err(x.error_code, None, f"group {gid!r}")
        return out

    async def list_group_offsets(self, group: str, partitions: list[TopicPartition] | None = None
                                 ) -> dict[TopicPartition, OffsetAndMetadata]:
        of = REQUESTS[ApiKey.OFFSET_FETCH]
        by_topic: dict[str, list[int]] = {}
        for tp in partitions or ():
            by_topic.setdefault(tp.topic, []).append(tp.partition)

        def build(v):
            if v >= 8:
                return of(groups=[of.OffsetFetchRequestGroup(
                    group_id=group, member_id=None, member_epoch=-1,
                    topics=None if partitions is None else [
                        of.OffsetFetchRequestTopics(name=t, partition_indexes=ps)
                        for t, ps in by_topic.items()])], require_stable=False)
            return of(group_id=group, topics=None if partitions is None else [
                of.OffsetFetchRequestTopic(name=t, partition_indexes=ps)
                for t, ps in by_topic.items()], require_stable=False)

        def codes(r):
            if r.groups:
                return [r.groups[0].error_code]
            return [r.error_code or 0]

        _, resp = await self._on_coordinator(
            group, lambda n: self.cluster.call_versioned(n, build, ApiKey.OFFSET_FETCH, max_version=8), codes)
        if resp.groups:
            g = resp.groups[0]
            check(g.error_code, None, f"group {group!r}")
            topics = g.topics
        else:
            check(resp.error_code or 0, None, f"group {group!r}")
            topics = resp.topics
        out = {}
        for t in topics:
            for p in t.partitions:
                if p.error_code or p.committed_offset < 0:
                    continue
                out[TopicPartition(t.name, p.partition_index)] = OffsetAndMetadata(
                    p.committed_offset, p.metadata or "",
                    p.committed_leader_epoch if p.committed_leader_epoch is not None else -1)
        return out

    async def alter_group_offsets(self, group: str, offsets: dict[TopicPartition, int]
                                  ) -> dict[TopicPartition, KafkaError | None]:
        """Commit offsets for a group with no active members (Kafka refuses otherwise:
        UNKNOWN_MEMBER_ID / REBALANCE_IN_PROGRESS come back per partition)."""
        oc = REQUESTS[ApiKey.OFFSET_COMMIT]
        by_topic: dict[str, list] = {}
        for tp, off in offsets.items():
            by_topic.setdefault(tp.topic, []).append(oc.OffsetCommitRequestPartition(
                partition_index=tp.partition, committed_offset=int(off),
                committed_leader_epoch=-1, committed_metadata=""))
        req = oc(group_id=group, generation_id_or_member_epoch=-1, member_id="",
                 group_instance_id=None, retention_time_ms=-1, topics=[
                     oc.OffsetCommitRequestTopic(name=t, partitions=ps)
                     for t, ps in by_topic.items()])
        _, resp = await self._on_coordinator(
            group, lambda n: self.cluster.call(n, req, max_version=8),
            lambda r: [p.error_code for t in r.topics for p in t.partitions])
        return {TopicPartition(t.name, p.partition_index): _err(
            p.error_code, None, f"{t.name}-{p.partition_index}")
            for t in resp.topics for p in t.partitions}

    async def reset_group_offsets(self, group: str, topics: list[str], to: str,
                                  value: int | None = None, *, dry_run: bool = False
                                  ) -> dict[TopicPartition, int]:
        """Kafka's `--reset-offsets`: `to` is earliest, latest, offset (value), timestamp
        (value, ms) or shift-by (value, from the committed offset, clamped to the log).
        Returns the new offsets (not committed with `dry_run`)."""
        tps: list[TopicPartition] = []
        desc = await self.describe_topics(topics)
        for t in topics:
            d = desc[t]
            if isinstance(d, KafkaError):
                raise d
            tps += [TopicPartition(t, p.partition) for p in d.partitions]
        earliest = await self.list_offsets({tp: EARLIEST for tp in tps})
        latest = await self.list_offsets({tp: LATEST for tp in tps})
        target: dict[TopicPartition, int] = {}
        if to == "earliest":
            target = {tp: earliest[tp][0] for tp in tps}
        elif to == "latest":
            target = {tp: latest[tp][0] for tp in tps}
        elif to == "offset":
            target = {tp: int(value) for tp in tps}
        elif to == "timestamp":
            found = await self.list_offsets({tp: int(value) for tp in tps})
            target = {tp: (found[tp][0] if found[tp][0] >= 0 else latest[tp][0]) for tp in tps}
        elif to == "shift-by":
            committed = await self.list_group_offsets(group, tps)
            target = {tp: (committed[tp].offset if tp in committed else latest[tp][0]) + int(value)
                      for tp in tps}
        else:
            raise ValueError(f"unknown reset target {to!r}")
        # like Kafka: never outside [log start, log end]
        target = {tp: max(earliest[tp][0], min(latest[tp][0], off)) for tp, off in target.items()}
        if not dry_run:
            errors = await self.alter_group_offsets(group, target)
            bad = [e for e in errors.values() if e is not None]
            if bad:
                raise bad[0]
        return target

    # -- offsets, records ------------------------------------------------------------------------

    async def _by_leader(self, tps: Iterable[TopicPartition]) -> dict[int, list[TopicPartition]]:
        tps = list(tps)
        missing = {tp.topic for tp in tps if self.cluster.leader_for(*tp) is None}
        if missing:
            for t in missing:
                await self.cluster.wait_for_topic(t, timeout_s=min(self.timeout_s, 10))
        out: dict[int, list[TopicPartition]] = {}
        for tp in tps:
            leader = self.cluster.leader_for(*tp)
            if leader is None:
                if tp.partition not in (self.cluster.partitions_for(tp.topic) or []):
                    raise UnknownTopicError(f"unknown partition {tp.topic}-{tp.partition}")
                raise KafkaError(f"{tp.topic}-{tp.partition} has no leader",
                                 ErrorCode.LEADER_NOT_AVAILABLE)
            out.setdefault(leader, []).append(tp)
        return out

    async def list_offsets(self, specs: dict[TopicPartition, int]
                           ) -> dict[TopicPartition, tuple[int, int]]:
        """{tp: EARLIEST | LATEST | MAX_TIMESTAMP | timestamp ms} -> {tp: (offset, timestamp)};
        offset -1 when no record has a timestamp at or after the one asked for."""
        lo = REQUESTS[ApiKey.LIST_OFFSETS]
        out: dict[TopicPartition, tuple[int, int]] = {}
        todo = dict(specs)
        deadline = trio.current_time() + self.timeout_s
        while todo:
            retry: dict[TopicPartition, int] = {}
            for node, tps in (await self._by_leader(todo)).items():
                by_topic: dict[str, list] = {}
                for tp in tps:
                    by_topic.setdefault(tp.topic, []).append(lo.ListOffsetsPartition(
                        partition_index=tp.partition, current_leader_epoch=-1,
                        timestamp=todo[tp], max_num_offsets=1))
                req = lo(replica_id=-1, isolation_level=0, topics=[
                    lo.ListOffsetsTopic(name=t, partitions=ps) for t, ps in by_topic.items()],
                    timeout_ms=int(self.timeout_s * 1000))
                try:
                    resp = await self.cluster.call(node, req, min_version=1)
                except (KafkaConnectionError, KafkaTimeoutError):
                    retry.update({tp: todo[tp] for tp in tps})
                    continue
                for t in resp.topics:
                    for p in t.partitions:
                        tp = TopicPartition(t.name, p.partition_index)
                        if p.error_code == 0:
                            out[tp] = (p.offset, p.timestamp)
                        elif classify(p.error_code) is not Retry.NO:
                            retry[tp] = todo[tp]
                        else:
                            check(p.error_code, None, f"{t.name}-{p.partition_index}")
            todo = retry
            if todo:
                if trio.current_time() >= deadline:
                    raise KafkaTimeoutError(f"list offsets: no answer for {sorted(todo)}")
                await trio.sleep(self.backoff_s)
                await self.cluster.refresh_metadata(force=True)
        return out

    async def delete_records(self, before: dict[TopicPartition, int]
                             ) -> dict[TopicPartition, int | KafkaError]:
        """Delete records before each offset (-1: the high watermark); -> new log start offsets."""
        dr = REQUESTS[ApiKey.DELETE_RECORDS]
        out: dict[TopicPartition, int | KafkaError] = {}
        for node, tps in (await self._by_leader(before)).items():
            by_topic: dict[str, list] = {}
            for tp in tps:
                by_topic.setdefault(tp.topic, []).append(dr.DeleteRecordsPartition(
                    partition_index=tp.partition, offset=before[tp]))
            req = dr(topics=[dr.DeleteRecordsTopic(name=t, partitions=ps)
                             for t, ps in by_topic.items()], timeout_ms=30000)
            resp = await self._retrying(lambda req=req, node=node: self.cluster.call(node, req))
            for t in resp.topics:
                for p in t.partitions:
                    tp = TopicPartition(t.name, p.partition_index)
                    out[tp] = (_err(p.error_code, None, f"{t.name}-{p.partition_index}")
                               if p.error_code else p.low_watermark)
        return out

    # -- cluster ---------------------------------------------------------------------------------

    async def describe_quorum(self) -> dict:
        """The metadata quorum (DescribeQuorum, forwarded by brokers to the active controller)."""
        dq = REQUESTS[ApiKey.DESCRIBE_QUORUM]
        req = dq(topics=[dq.TopicData(topic_name="__cluster_metadata",
                                      partitions=[dq.PartitionData(partition_index=0)])])
        resp = await self._retrying(lambda: self.cluster.call_any(req))
        check(resp.error_code, getattr(resp, "error_message", None), "describe quorum")
        p = resp.topics[0].partitions[0]
        check(p.error_code, None, "describe quorum")
        return {"leader_id": p.leader_id, "leader_epoch": p.leader_epoch,
                "high_watermark": p.high_watermark,
                "voters": [{"id": v.replica_id, "log_end_offset": v.log_end_offset}
                           for v in p.current_voters],
                "observers": [{"id": o.replica_id, "log_end_offset": o.log_end_offset}
                              for o in p.observers]}

    # -- client quotas (KIP-546) -----------------------------------------------------------------

    async def alter_client_quotas(self, alterations: list[tuple[dict, dict]], *,
                                  validate_only: bool = False) -> list[KafkaError | None]:
        """alterations: [({"user"|"client-id": name or None (= <default>)},
        {key: value, or None to remove})] → one error (or None) per alteration."""
        aq = REQUESTS[ApiKey.ALTER_CLIENT_QUOTAS]
        req = aq(entries=[aq.EntryData(
            entity=[aq.EntityData(entity_type=t, entity_name=n) for t, n in entity.items()],
            ops=[aq.OpData(key=k, value=float(v if v is not None else 0.0), remove=v is None)
                 for k, v in ops.items()]) for entity, ops in alterations],
            validate_only=validate_only)
        resp = await self._retrying(lambda: self.cluster.call_controller(req),
                                    lambda r: [e.error_code for e in r.entries
                                               if e.error_code == ErrorCode.NOT_CONTROLLER])
        return [_err(e.error_code, e.error_message, "client quota") for e in resp.entries]

    async def describe_client_quotas(self, components: list[tuple[str, int, str | None]] = (),
                                     *, strict: bool = False) -> list[tuple[dict, dict]]:
        """components: [(entity type, match type 0 exact / 1 default / 2 any named, name)] →
        [({entity type: name or None}, {key: value})]."""
        dq = REQUESTS[ApiKey.DESCRIBE_CLIENT_QUOTAS]
        req = dq(components=[dq.ComponentData(entity_type=t, match_type=m, match=n)
                             for t, m, n in components], strict=strict)
        resp = await self._retrying(lambda: self.cluster.call_any(req))
        check(resp.error_code, resp.error_message, "describe client quotas")
        return [({e.entity_type: e.entity_name for e in x.entity},
                 {v.key: v.value for v in x.values}) for x in resp.entries or []]
