"""The controller's state machine façade (Kafka's QuorumController, minus the threads).

Holds the committed `MetadataImage` (changed only by `replay`) and the heartbeat soft state.
Commands read the image and return `(records, result)`; they never change it. The service
proposes the records through Raft and replays them when committed, then answers the caller.

Every command returns a `ControllerResult(records, response)` — a named tuple, so
`records, response = controller.create_topics(...)` works too. Concerns live in
`cluster_control` (registration, heartbeats, fencing; KIP-631), `replication_control` (topics,
placement, elections, AlterPartition; KIP-497/KIP-841), `config_control` (typed config table),
`acl_control`, `feature_control` (features KIP-584, SCRAM KIP-554), `reassignment` (partition
reassignment, KIP-455), `rereplication` (replicas of lost brokers re-placed; issue 19), `balancer` (replica and
preferred-leader counts evened; issue 19), `unclean_recovery` (the longest log leads a partition
whose every last copy came back untrusted; KIP-966).
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

from metadata_quorum import records as r
from metadata_quorum.controller import (acl_control, balancer, cluster_control, config_control,
                                        feature_control, load_reports, log_dirs, quota_control,
                                        reassignment, replication_control, rereplication,
                                        unclean_recovery)
from metadata_quorum.image import MetadataImage

PRODUCER_ID_BLOCK = 1000


class ControllerResult(NamedTuple):
    records: list
    response: Any


def _result(method):
    """Wrap a command's `(records, response)` as a ControllerResult."""
    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        records, response = method(*args, **kwargs)
        ctl = args[0]       # an offline replica is never elected (controller/log_dirs.py)
        records = log_dirs.without_offline_leaders(ctl.image, list(records))
        return ControllerResult(records, response)
    return wrapper


class QuorumController:
    def __init__(self, session_timeout_ms: int = 9000, default_partitions: int = 1,
                 default_replication_factor: int = 1, default_min_isr: int = 1):
        self.image = MetadataImage()
        # min.insync.replicas of topics without a topic or cluster-wide setting, for the ELR
        # (KIP-966); must equal the brokers' own default (see metadata_quorum/config.py)
        self.default_min_isr = default_min_isr
        self.heartbeats = cluster_control.HeartbeatTracker(session_timeout_ms)
        self.default_partitions = default_partitions
        self.default_replication_factor = default_replication_factor
        # the balancer's last decision (soft state, for tests and the simulation; `raftka
        # cluster balance --status` recomputes it client-side: balancer.py)
        self.balancer_decision: balancer.Decision | None = None
        # partition sizes from the brokers' heartbeats, for the balancer's disk goal (soft state)
        self.loads = load_reports.LoadReports()
        # replicas' log ends from their heartbeats, for KIP-966 unclean recovery (soft state)
        self.log_infos = unclean_recovery.ReplicaLogInfos()

    # -- replay -----------------------------------------------------------------------------------

    def replay(self, offset: int, record: r.Record) -> None:
        self.image = self.image.apply(offset, record)

    def load_image(self, image: MetadataImage) -> None:
        self.image = image

    def become_active(self, now_ms: int) -> None:
        """A newly elected controller gives every broker a full session before fencing anyone."""
        self.heartbeats.reset_sessions(self.image.brokers, now_ms)
        self.log_infos = unclean_recovery.ReplicaLogInfos()   # recovery waits start afresh

    # -- cluster ----------------------------------------------------------------------------------

    @_result
    def register_broker(self, broker_id, incarnation_id, host, port, rack, now_ms, listeners=(),
                        previous_broker_epoch=None, log_dirs=()):
        return cluster_control.register_broker(self.image, self.heartbeats, broker_id,
                                               incarnation_id, host, port, rack, now_ms, listeners,
                                               previous_broker_epoch, self.default_min_isr,
                                               log_dirs)

    @_result
    def broker_heartbeat(self, broker_id, broker_epoch, metadata_offset, want_fence,
                         want_shutdown, now_ms, offline_log_dirs=None):
        """`offline_log_dirs` (v1+, KIP-858): first the directories go offline (records), then
        the heartbeat is handled on the image they leave, so it elects none of their replicas."""
        image = self.image
        records = log_dirs.heartbeat_records(image, broker_id, broker_epoch, offline_log_dirs,
                                             self.default_min_isr)
        if records:
            image = image.apply_all(image.offset + 1, records)
        more, result = cluster_control.broker_heartbeat(image, self.heartbeats, broker_id,
                                                        broker_epoch, metadata_offset, want_fence,
                                                        want_shutdown, now_ms,
                                                        self.default_min_isr)
        return records + log_dirs.without_offline_leaders(image, more), result

    @_result
    def assign_replicas_to_dirs(self, broker_id: int, broker_epoch: int, directories: dict):
        """KIP-858 AssignReplicasToDirs: replicas of an offline directory leave leadership and
        ISRs (controller/log_dirs.py)."""
        return log_dirs.assign_replicas_to_dirs(self.image, broker_id, broker_epoch,
                                                directories, self.default_min_isr)

    @_result
    def controlled_shutdown(self, broker_id, broker_epoch, now_ms):
        """A heartbeat asking to shut down: leaderships move away first (KIP-631)."""
        return self.broker_heartbeat(broker_id, broker_epoch, self.image.offset, False, True,
                                     now_ms)

    @_result
    def unregister_broker(self, broker_id: int):
        """Remove a broker's registration (KIP-631 UnregisterBroker); moves its leaderships."""
        b = self.image.brokers.get(broker_id)
        if b is None:
            return [], replication_control.ErrorCode.BROKER_ID_NOT_REGISTERED
        records = replication_control.leadership_changes(self.image, {broker_id},
                                                         default_min_isr=self.default_min_isr)
        records.append(r.UnregisterBrokerRecord(broker_id, b.broker_epoch))
        self.heartbeats.last_seen.pop(broker_id, None)
        return records, replication_control.ErrorCode.NONE

    def tick(self, now_ms: int, rebalance: bool = False) -> list:
        """Fence lapsed brokers; elect out-of-sync leaders where unclean election was just
        allowed, then the longest logs where unclean recovery may (KIP-966); with `rebalance`,
        also restore preferred leaders."""
        records = cluster_control.fence_expired(self.image, self.heartbeats, now_ms,
                                                self.default_min_isr)
        if not records:
            records = replication_control.unclean_recoveries(self.image)
        if not records:
            records = unclean_recovery.elections(self.image, self.log_infos, now_ms)
        if rebalance and not records:
            # first a move that can finish (normally AlterPartition finished it: see
            # reassignment.py), so that it is not taken for an unbalanced leadership; then
            # replicas of lost brokers re-placed (rereplication.py, off unless configured); then
            # counts evened (balancer.py, off unless configured)
            records = (reassignment.completions(self.image)
                       or rereplication.records(self.image, self.heartbeats.last_seen, now_ms)
                       or self._balance()
                       or replication_control.preferred_rebalance(self.image))
        return log_dirs.without_offline_leaders(self.image, records)

    def _balance(self) -> list:
        records, self.balancer_decision = balancer.records(self.image, self.loads)
        return records

    # -- topics -----------------------------------------------------------------------------------

    @_result
    def create_topics(self, topics: list[dict], validate_only: bool = False):
        """topics: [{name, num_partitions, replication_factor, assignments, configs}]."""
        records, results = [], []
        image = self.image
        for t in topics:
            configs = t.get("configs", {})
            problem = config_control.validate_topic_configs(configs)
            if problem:
                results.append(replication_control.TopicResult(
                    t["name"], replication_control.ErrorCode.INVALID_CONFIG, problem))
                continue
            if any(res.name == t["name"] for res in results):
                results.append(replication_control.TopicResult(
                    t["name"], replication_control.ErrorCode.INVALID_REQUEST, "duplicate topic"))
                continue
            recs, res = replication_control.create_topic(
                image, t["name"], t.get("num_partitions", -1), t.get("replication_factor", -1),
                t.get("assignments"), configs, self.default_partitions,
                self.default_replication_factor)
            results.append(res)
            if recs and not validate_only:
                records += recs
                image = image.apply_all(image.offset + 1, recs)   # later topics see this one
        return records, results

    @_result
    def delete_topics(self, names: list[str | None], ids: list = ()):
        records, results = [], []
        for name, topic_id in list(zip(names, [None] * len(names))) + [(None, i) for i in ids]:
            recs, res = replication_control.delete_topic(self.image, name, topic_id)
            records += recs
            results.append(res)
        return records, results

    @_result
    def create_partitions(self, requests: list[tuple[str, int, list | None]], validate_only=False):
        records, results = [], []
        for name, count, assignments in requests:
            recs, res = replication_control.create_partitions(self.image, name, count, assignments)
            results.append(res)
            if not validate_only:
                records += recs
        return records, results

    @_result
    def alter_partition(self, broker_id, broker_epoch, topic_id, partition, leader_epoch,
                        partition_epoch, new_isr):
        """An ISR change; when it completes a reassignment, the completion is a second record,
        so the answer (the ISR change alone) never names a leadership the leader no longer
        has: a later partition epoch from the metadata stream supersedes it."""
        records, result = replication_control.alter_partition(
            self.image, broker_id, broker_epoch, topic_id, partition, leader_epoch,
            partition_epoch, new_isr, self.default_min_isr)
        # only a partition under reassignment can complete: the image is applied ahead for
        # those alone (per partition, it was half the cost of an AlterPartition from a leader
        # taking a restarted broker back into 20,000 ISRs)
        if records and reassignment.in_progress(
                self.image.topic_by_id(topic_id).partitions[partition]):
            after = self.image.apply_all(self.image.offset + 1, records)
            done = reassignment.after_isr_change(after, topic_id, partition, result.isr)
            if done is not None:
                records.append(done)
        return records, result

    @_result
    def alter_partition_reassignments(self, moves: list[tuple[str, int, list | None]]):
        """moves: [(topic, partition, target replicas or None to cancel)] → results
        [(error, message)], one per move (KIP-455)."""
        records, results = [], []
        image = self.image
        for topic, partition, target in moves:
            recs, code, message = reassignment.alter(image, topic, partition, target)
            results.append((code, message))
            if recs:
                records += recs
                image = image.apply_all(image.offset + 1, recs)  # a later move sees this one
        return records, results

    def list_partition_reassignments(self, topics: list[tuple[str, list[int]]] | None):
        return reassignment.ongoing(self.image, topics)

    @_result
    def elect_leaders(self, election_type: int, partitions: list[tuple[str, int]]):
        records, results = [], []
        for topic, partition in partitions:
            fn = replication_control.preferred_election if election_type == 0 \
                else replication_control.unclean_election
            recs, code = fn(self.image, topic, partition)
            records += recs
            results.append((topic, partition, code))
        return records, results

    # -- configs ----------------------------------------------------------------------------------

    @_result
    def incremental_alter_configs(self, resources, validate_only=False):
        """resources: [(resource_type, name, [(key, op, value)])] → results [(error, message)]."""
        records, results = [], []
        for rtype, name, ops in resources:
            recs, err, msg = config_control.incremental_alter(self.image, rtype, name, ops)
            results.append((err, msg))
            if not validate_only:
                records += recs
        return records, results

    @_result
    def alter_configs(self, resources, validate_only=False):
        records, results = [], []
        for rtype, name, configs in resources:
            recs, err, msg = config_control.legacy_alter(self.image, rtype, name, configs)
            results.append((err, msg))
            if not validate_only:
                records += recs
        return records, results

    # -- producer ids -----------------------------------------------------------------------------

    @_result
    def allocate_producer_ids(self, broker_id: int, broker_epoch: int):
        b = self.image.brokers.get(broker_id)
        if b is None or b.broker_epoch != broker_epoch:
            return [], (replication_control.ErrorCode.STALE_BROKER_EPOCH, -1, 0)
        start = self.image.next_producer_id
        return ([r.ProducerIdsRecord(broker_id, broker_epoch, start + PRODUCER_ID_BLOCK)],
                (replication_control.ErrorCode.NONE, start, PRODUCER_ID_BLOCK))

    # -- acls, scram, features --------------------------------------------------------------------

    @_result
    def create_acls(self, bindings: list[acl_control.AclBinding]):
        return acl_control.create_acls(self.image, bindings)

    @_result
    def delete_acls(self, filters: list[acl_control.AclFilter]):
        return acl_control.delete_acls(self.image, filters)

    def describe_acls(self, acl_filter: acl_control.AclFilter) -> acl_control.AclResult:
        return acl_control.describe_acls(self.image, acl_filter)

    @_result
    def alter_user_scram_credentials(self, deletions, upsertions):
        return feature_control.alter_user_scram_credentials(self.image, deletions, upsertions)

    @_result
    def update_features(self, updates, validate_only=False):
        return feature_control.update_features(self.image, updates, validate_only)

    # -- client quotas (KIP-546) ------------------------------------------------------------------

    @_result
    def alter_client_quotas(self, entries, validate_only=False):
        return quota_control.alter_client_quotas(self.image, entries, validate_only)
