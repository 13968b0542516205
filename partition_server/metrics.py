"""A Prometheus text endpoint (`GET /metrics`) on `raftka.metrics.listener` (host:port; off when
unset). Read-only and cheap: it renders what the broker already keeps — partition offsets and
ISR for the partitions it leads, group state, and the consumer lag table of `group/lag.py`.
Served by common/http_endpoint.py with `/health/live` and `/health/ready` (partition_server/
health.py); anything else is a 404. Also Kafka's alerting gauges (under-replicated, under-min-ISR,
offline and leaderless partitions, ISR shrinks/expands), per-API request counters and latency
histograms (common/request_metrics.py) and the process's CPU/RSS/fds.

`MetricSources` names what is rendered (not the broker): the replica manager, the fetch session
cache, the follower fetchers' statistics, the group coordinator, the client quota manager (a
callable: the broker creates it on first use), the cache of open segment files and the
replication throttles."""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Callable

import trio

from common.http_endpoint import PROMETHEUS, Route, live_answer, serve_http
from common.prometheus import labels as _labels
from common.prometheus import render_families
from common.process_metrics import process_families
from partition_server.broker_metrics import coordinator_families, log_families, traffic_families
from partition_server.replication.partition import Role

if TYPE_CHECKING:
    from partition_server.fetch_session import FetchSessionCache
    from partition_server.group.coordinator import GroupCoordinator
    from partition_server.log.file_cache import OpenFileCache
    from partition_server.quotas import QuotaManager
    from partition_server.replica_manager import ReplicaManager
    from partition_server.replication.fetcher import FetcherManager
    from partition_server.replication.throttle import ReplicationQuotas

log = logging.getLogger(__name__)


@dataclasses.dataclass(eq=False)
class MetricSources:
    replicas: ReplicaManager
    fetch_sessions: FetchSessionCache
    fetchers: FetcherManager
    groups: GroupCoordinator
    client_quotas: Callable[[], QuotaManager | None]
    segment_files: OpenFileCache | None = None
    replication_quotas: ReplicationQuotas | None = None
    image: Callable[[], object] | None = None          # the broker's applied metadata image
    requests: object | None = None                     # common.request_metrics.RequestStats
    txns: dict | None = None                           # transactional id → TransactionMetadata
    txn_loads: object | None = None                    # the transaction coordinator's replays
    log_dir: str | list | None = None            # the log directories (JBOD: several)


def render(sources: MetricSources) -> str:
    lines = []

    def family(name: str, kind: str, doc: str, samples) -> None:
        lines.append(f"# HELP {name} {doc}")
        lines.append(f"# TYPE {name} {kind}")
        lines.extend(f"{name}{labels} {value}" for labels, value in samples)

    led = []
    for topic, partition in sorted(sources.replicas.hosted_keys()):
        hosted = sources.replicas.get(topic, partition)
        if hosted is not None and hosted.state.role is Role.LEADER:
            led.append((topic, partition, hosted))
    family("raftka_partition_log_end_offset", "gauge", "Log end offset of partitions led here.",
           [(_labels(topic=t, partition=p), h.log.log_end_offset) for t, p, h in led])
    family("raftka_partition_high_watermark", "gauge", "High watermark of partitions led here.",
           [(_labels(topic=t, partition=p), h.state.high_watermark) for t, p, h in led])
    family("raftka_partition_isr_size", "gauge", "In-sync replicas of partitions led here.",
           [(_labels(topic=t, partition=p), len(h.state.isr)) for t, p, h in led])
    family("raftka_fetch_sessions", "gauge", "Incremental fetch sessions (KIP-227) cached here.",
           [("", len(sources.fetch_sessions.sessions))])
    files = sources.segment_files
    if files is not None:
        family("raftka_log_open_segment_files", "gauge",
               "Segment files held open by the cache (raftka.log.max.open.files), and pinned.",
               [(_labels(kind="cached"), files.cached), (_labels(kind="pinned"), files.pinned)])
        family("raftka_log_segment_file_opens_total", "counter",
               "Segment files opened (first open or reopen after an eviction), and evictions.",
               [(_labels(kind="opens"), files.opens), (_labels(kind="evictions"), files.evictions)])
    fetch_stats = sorted(sources.fetchers.stats.items())
    family("raftka_replica_fetch_request_partitions", "gauge",
           "Partitions named (fetched or forgotten) by the last follower fetch, per leader.",
           [(_labels(leader=b), s.request_partitions) for b, s in fetch_stats])
    family("raftka_replica_fetch_response_partitions", "gauge",
           "Partitions in the answer to the last follower fetch, per leader.",
           [(_labels(leader=b), s.response_partitions) for b, s in fetch_stats])
    family("raftka_replica_fetch_requests_total", "counter",
           "Follower fetches sent, per leader and kind (full or incremental, KIP-227).",
           [(_labels(leader=b, kind=k), n) for b, s in fetch_stats
            for k, n in (("full", s.full_fetches), ("incremental", s.incremental_fetches))])
    for name, kind, doc, samples in _throttle_families(sources.replication_quotas):
        family(name, kind, doc, samples)
    groups = sources.groups
    family("raftka_consumer_group_members", "gauge", "Members of the groups coordinated here.",
           [(_labels(group=gid, type="classic", state=g.state.value), len(g.members))
            for gid, g in sorted(groups.state.groups.items())] +
           [(_labels(group=gid, type="consumer", state=g.state), len(g.members))
            for gid, g in sorted(groups.consumer.groups.items())])
    table = sorted(groups.lag.table.items())
    family("raftka_consumer_group_lag_messages", "gauge",
           "High watermark minus the committed offset, per group and partition.",
           [(_labels(group=g, topic=t, partition=p), v.messages) for (g, t, p), v in table])
    family("raftka_consumer_group_lag_seconds", "gauge",
           "Age of the next unconsumed record (0 when none), per group and partition.",
           [(_labels(group=g, topic=t, partition=p), f"{v.seconds:.3f}") for (g, t, p), v in table])
    family("raftka_consumer_group_committed_offset", "gauge", "Committed offset per group and partition.",
           [(_labels(group=g, topic=t, partition=p), v.committed) for (g, t, p), v in table])
    from partition_server.handlers.client_quotas import metric_families   # client quotas
    for name, kind, doc, samples in metric_families(sources.client_quotas(), _labels):
        family(name, kind, doc, samples)
    image = sources.image() if sources.image else None
    extra = partition_families(led, image, sources.replicas)
    extra += traffic_families(sources.replicas.topic_traffic, image)
    extra += coordinator_families(groups, sources.txns, sources.txn_loads)
    extra += log_families(sources.replicas, sources.log_dir)
    if sources.requests is not None:
        extra += sources.requests.families()
    lines += render_families(extra + process_families())
    return "\n".join(lines) + "\n"


def partition_families(led, image, replicas) -> list:
    """Kafka's alerting gauges. Under-replicated and under-min-ISR: partitions led here (Kafka's
    UnderReplicatedPartitions / UnderMinIsrPartitionCount, per broker: sum them). Offline and
    leaderless: from this broker's metadata image, so every broker reports the cluster-wide
    count (Kafka reports OfflinePartitionsCount on the active controller only; the controllers'
    endpoint has it too): offline = no leader at all, leaderless = no leader or a leader
    whose broker is fenced or gone (about to go offline or move)."""
    under = sum(1 for _, _, h in led if len(h.state.isr) < len(h.state.replicas))
    under_min = sum(1 for _, _, h in led if len(h.state.isr) < h.state.min_insync_replicas)
    offline, leaderless = image.leaderless_counts() if image is not None else (0, 0)
    return [
        ("raftka_under_replicated_partitions", "gauge",
         "Partitions led here whose ISR is smaller than their replica set.", [("", under)]),
        ("raftka_under_min_isr_partitions", "gauge",
         "Partitions led here whose ISR is below min.insync.replicas.", [("", under_min)]),
        ("raftka_offline_partitions", "gauge",
         "Partitions without a leader, in this broker's metadata image.", [("", offline)]),
        ("raftka_leaderless_partitions", "gauge",
         "Partitions without a leader or whose leader is fenced or unregistered (image).",
         [("", leaderless)]),
        ("raftka_isr_shrinks_total", "counter", "ISR shrinks made by this leader.",
         [("", replicas.isr_shrinks)]),
        ("raftka_isr_expands_total", "counter", "ISR expansions made by this leader.",
         [("", replicas.isr_expands)]),
    ]


def _throttle_families(rq: ReplicationQuotas | None):
    """Replication throttles (replication/throttle.py), per side: bytes metered, hold-backs, the
    bound when one is set."""
    if rq is None:
        return []
    sides = (("leader", rq.leader), ("follower", rq.follower))
    return [
        ("raftka_replication_throttled_bytes_total", "counter",
         "Bytes of partitions listed in *.replication.throttled.replicas: served to followers "
         "(leader) or fetched (follower).", [(_labels(side=n), q.recorded) for n, q in sides]),
        ("raftka_replication_throttle_held_back_total", "counter",
         "Times a throttled replica out of the ISR was held back (no records served, or left "
         "out of a fetch).", [(_labels(side=n), q.held_back) for n, q in sides]),
        ("raftka_replication_throttle_rate_bytes", "gauge",
         "The throttle in bytes/s (*.replication.throttled.rate), when one is set.",
         [(_labels(side=n), int(q.bound)) for n, q in sides if q.bound is not None])]


def routes(sources: MetricSources, ready: Callable[[], tuple[int, str, bytes]]) -> dict[str, Route]:
    return {"/metrics": lambda: (200, PROMETHEUS, render(sources).encode()),
            "/health/live": live_answer, "/health/ready": ready}


async def serve_metrics(sources: MetricSources, ready, listener: str,
                        task_status=trio.TASK_STATUS_IGNORED) -> None:
    await serve_http(routes(sources, ready), listener, task_status=task_status)
