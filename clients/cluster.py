"""The client's view of a cluster: bootstrap, the Metadata cache, and connections per node.

Everything in `clients/` that talks to brokers goes through a `Cluster`:

- `await cluster.start()` connects to the first bootstrap server that answers and loads metadata
  (brokers, controller id, cluster id, and the topics asked for).
- `cluster.metadata` is an immutable snapshot (`ClusterMetadata`); a refresh swaps it whole, so a
  reader never sees half an update. `leader_for(tp)`, `partitions_for(topic)` read it.
- `await cluster.refresh_metadata(topics)` coalesces: callers that wait while a refresh is in
  flight share its answer instead of each sending their own (a storm of NOT_LEADER errors after a
  leader change becomes one Metadata request).
- `await cluster.call(node_id, message)` sends one request on the pooled connection to that node,
  negotiating the version from the broker's ApiVersions. Connections are keyed by (node id,
  channel): requests on one connection are answered in order, so a long-polling Fetch gets its
  own channel and does not hold up heartbeats or admin calls.
- `await cluster.find_coordinator(key, key_type)` finds (and caches) a group or transaction
  coordinator; `forget_coordinator` after NOT_COORDINATOR.

Connection failures surface as `KafkaConnectionError` (retriable, refresh metadata first); the
pooled connection is dropped so the next call reconnects.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Iterable, NamedTuple

import trio

from clients.config import ConfigError, client_security
from clients.connection import BrokerConnection, ConnectionClosed
from common.security import PLAINTEXT, ClientSecurity
from clients.errors import (KafkaConnectionError, KafkaTimeoutError, NoBrokersAvailable, Retry,
                            UnknownTopicError, check, classify)
from wire.errors import ErrorCode, KafkaError
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS

# Highest versions we ask for, per api key, where the newest schema changes meaning in a way this
# client does not implement (Produce v12+/Fetch v13+ name topics by id, Metadata we read by name).
MAX_VERSIONS: dict[int, int] = {ApiKey.PRODUCE: 11, ApiKey.FETCH: 12, ApiKey.METADATA: 12}

COORDINATOR_GROUP = 0
COORDINATOR_TRANSACTION = 1


class TopicPartition(NamedTuple):
    topic: str
    partition: int


@dataclasses.dataclass(frozen=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclasses.dataclass(frozen=True)
class PartitionInfo:
    topic: str
    partition: int
    leader: int                    # -1 while there is none
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline: tuple[int, ...]
    error_code: int = 0


@dataclasses.dataclass(frozen=True)
class TopicInfo:
    name: str
    topic_id: object
    is_internal: bool
    partitions: dict[int, PartitionInfo]
    error_code: int = 0


@dataclasses.dataclass(frozen=True)
class ClusterMetadata:
    cluster_id: str | None = None
    controller_id: int = -1
    brokers: dict[int, BrokerInfo] = dataclasses.field(default_factory=dict)
    topics: dict[str, TopicInfo] = dataclasses.field(default_factory=dict)
    # topics the last refresh asked for that the brokers do not know (name -> error code)
    topic_errors: dict[str, int] = dataclasses.field(default_factory=dict)
    version: int = 0               # bumped by every refresh

    def leader_for(self, tp: TopicPartition) -> int | None:
        t = self.topics.get(tp.topic)
        p = t.partitions.get(tp.partition) if t else None
        if p is None or p.leader < 0:
            return None
        return p.leader

    def partitions_for(self, topic: str) -> list[int] | None:
        t = self.topics.get(topic)
        return sorted(t.partitions) if t else None


def parse_bootstrap(bootstrap: str | Iterable[str]) -> list[tuple[str, int]]:
    """"h1:9092,h2:9092" (or a list of such) -> [(host, port)]; ValueError on garbage."""
    items = bootstrap.split(",") if isinstance(bootstrap, str) else list(bootstrap)
    out = []
    for item in items:
        item = item.strip()
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"bootstrap server must be host:port, got {item!r}")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise ValueError("no bootstrap servers given")
    return out


class Cluster:
    """Shared metadata and connections for one client (producer, consumer or admin)."""

    @classmethod
    def from_config(cls, cfg: dict, security: ClientSecurity | None = None) -> "Cluster":
        """The cluster a client's typed config (clients/config.py's COMMON keys) describes; its
        TLS/SASL come from `security`, else from the config's own properties."""
        if not cfg["bootstrap.servers"]:
            raise ConfigError("bootstrap.servers is required")
        return cls(cfg["bootstrap.servers"], client_id=cfg["client.id"],
                   request_timeout_ms=cfg["request.timeout.ms"],
                   connect_timeout_ms=cfg["socket.connection.setup.timeout.ms"],
                   retry_backoff_ms=cfg["retry.backoff.ms"],
                   metadata_max_age_ms=cfg["metadata.max.age.ms"],
                   security=security or client_security(cfg))

    def __init__(self, bootstrap: str | Iterable[str], *, client_id: str = "raftka",
                 request_timeout_ms: int = 30_000, connect_timeout_ms: int = 10_000,
                 retry_backoff_ms: int = 100, metadata_max_age_ms: int = 300_000,
                 security: ClientSecurity = PLAINTEXT):
        self.bootstrap_servers = parse_bootstrap(bootstrap)
        self.client_id = client_id
        self.security = security                  # TLS/SASL of every connection this opens
        self.request_timeout_s = request_timeout_ms / 1000
        self.connect_timeout_s = connect_timeout_ms / 1000
        self.retry_backoff_s = retry_backoff_ms / 1000
        self.metadata_max_age_s = metadata_max_age_ms / 1000
        self.metadata = ClusterMetadata()
        self._interest: set[str] = set()          # topics refreshes ask for
        self._all_topics = False                  # True: refreshes ask for every topic
        self._conns: dict[tuple[int, str], BrokerConnection] = {}
        self._conn_locks: dict[tuple[int, str], trio.Lock] = {}
        self._bootstrap_conn: BrokerConnection | None = None
        self._refresh_lock = trio.Lock()
        self._last_refresh = 0.0
        self._coordinators: dict[tuple[int, str], int] = {}
        self.closed = False

    # -- lifecycle -------------------------------------------------------------------------------

    async def start(self, topics: Iterable[str] = ()) -> "Cluster":
        self._interest.update(topics)
        await self.refresh_metadata(force=True)
        return self

    async def aclose(self) -> None:
        self.closed = True
        conns = list(self._conns.values())
        if self._bootstrap_conn is not None:
            conns.append(self._bootstrap_conn)
        self._conns.clear()
        self._bootstrap_conn = None
        for conn in conns:
            with trio.CancelScope(shield=True):
                try:
                    await conn.aclose()
                except Exception:  # noqa: BLE001 - closing a dead socket is not an error
                    pass

    async def __aenter__(self) -> "Cluster":
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    # -- metadata --------------------------------------------------------------------------------

    def leader_for(self, topic: str, partition: int) -> int | None:
        return self.metadata.leader_for(TopicPartition(topic, partition))

    def partitions_for(self, topic: str) -> list[int] | None:
        return self.metadata.partitions_for(topic)

    def partition_info(self, topic: str, partition: int) -> PartitionInfo | None:
        t = self.metadata.topics.get(topic)
        return t.partitions.get(partition) if t else None

    def add_topics(self, topics: Iterable[str]) -> None:
        self._interest.update(topics)

    def want_all_topics(self, flag: bool = True) -> None:
        self._all_topics = flag

    def metadata_stale(self) -> bool:
        return trio.current_time() - self._last_refresh > self.metadata_max_age_s

    async def refresh_metadata(self, topics: Iterable[str] | None = None, *,
                               force: bool = False, all_topics: bool = False) -> ClusterMetadata:
        """Load metadata for the topics of interest (plus `topics`). Concurrent callers share one
        request unless `force`."""
        new = set(topics or ()) - self._interest
        self._interest.update(topics or ())
        seen_version = self.metadata.version
        async with self._refresh_lock:
            if not force and not new and not all_topics and self.metadata.version != seen_version:
                return self.metadata          # someone refreshed while we waited
            names = None if (all_topics or self._all_topics) else sorted(self._interest)
            resp = await self._metadata_request(names)
            self._apply_metadata(resp, names)
        return self.metadata

    async def _metadata_request(self, names: list[str] | None):
        md = REQUESTS[ApiKey.METADATA]
        msg = md(topics=None if names is None else [md.MetadataRequestTopic(name=n) for n in names],
                 allow_auto_topic_creation=False)
        last: Exception | None = None
        # Prefer a known broker (any), then the bootstrap list: a bootstrap host may be down while
        # the cluster is fine.
        candidates = list(self.metadata.brokers)
        random.shuffle(candidates)
        for node_id in candidates:
            try:
                return await self.call(node_id, msg)
            except (KafkaConnectionError, KafkaTimeoutError) as exc:
                last = exc
        for host, port in self.bootstrap_servers:
            try:
                conn = self._bootstrap_conn
                if conn is None or conn.host != host or conn.port != port:
                    conn = await self._open(host, port)
                    if self._bootstrap_conn is not None:
                        await self._bootstrap_conn.aclose()
                    self._bootstrap_conn = conn
                version = conn.version_for(ApiKey.METADATA, (0, MAX_VERSIONS[ApiKey.METADATA]))
                return await conn.request(msg, version, timeout_s=self.request_timeout_s)
            except (ConnectionClosed, OSError, trio.TooSlowError, KafkaConnectionError) as exc:
                last = exc
                if self._bootstrap_conn is not None:
                    await self._bootstrap_conn.aclose()
                    self._bootstrap_conn = None
        servers = ",".join(f"{h}:{p}" for h, p in self.bootstrap_servers)
        raise NoBrokersAvailable(f"no broker reachable (bootstrap {servers}): {last}")

    def _apply_metadata(self, resp, names: list[str] | None) -> None:
        brokers = {b.node_id: BrokerInfo(b.node_id, b.host, b.port, b.rack) for b in resp.brokers}
        topics = {} if names is None else {
            n: t for n, t in self.metadata.topics.items() if n not in set(names)}
        errors: dict[str, int] = {}
        for t in resp.topics:
            if t.error_code and t.error_code != ErrorCode.LEADER_NOT_AVAILABLE:
                errors[t.name] = t.error_code
                topics.pop(t.name, None)
                continue
            parts = {p.partition_index: PartitionInfo(
                t.name, p.partition_index, p.leader_id,
                p.leader_epoch if p.leader_epoch is not None else -1,
                tuple(p.replica_nodes), tuple(p.isr_nodes), tuple(p.offline_replicas or ()),
                p.error_code) for p in t.partitions}
            topics[t.name] = TopicInfo(t.name, t.topic_id, bool(t.is_internal), parts, t.error_code)
        self.metadata = ClusterMetadata(resp.cluster_id, resp.controller_id
                                        if resp.controller_id is not None else -1,
                                        brokers, topics, errors, self.metadata.version + 1)
        self._last_refresh = trio.current_time()

    async def wait_for_topic(self, topic: str, timeout_s: float = 10.0,
                             need_leaders: bool = True) -> TopicInfo:
        """Metadata for `topic`, refreshing until it (and, if asked, every leader) is known.
        Raises UnknownTopicError if the cluster keeps saying it does not exist."""
        deadline = trio.current_time() + timeout_s
        while True:
            md = await self.refresh_metadata([topic], force=True)
            t = md.topics.get(topic)
            if t is not None and t.partitions and (
                    not need_leaders or all(p.leader >= 0 for p in t.partitions.values())):
                return t
            if trio.current_time() >= deadline:
                if t is None:
                    code = md.topic_errors.get(topic, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                    if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                        raise UnknownTopicError(f"unknown topic {topic!r}")
                    check(code, None, f"topic {topic!r}")
                raise KafkaTimeoutError(f"topic {topic!r} has partitions without a leader")
            await trio.sleep(min(self.retry_backoff_s * 2, max(0.0, deadline - trio.current_time())))

    # -- connections -----------------------------------------------------------------------------

    async def _open(self, host: str, port: int) -> BrokerConnection:
        conn = BrokerConnection(host, port, self.client_id, security=self.security)
        try:
            await conn.connect(timeout_s=self.connect_timeout_s)
        except trio.TooSlowError:
            await conn.aclose()
            raise KafkaConnectionError(f"timed out connecting to {host}:{port}") from None
        except (ConnectionClosed, OSError) as exc:
            await conn.aclose()
            raise KafkaConnectionError(f"cannot reach {host}:{port}: {exc}") from None
        return conn

    async def connection(self, node_id: int, channel: str = "default") -> BrokerConnection:
        """The pooled connection to `node_id` on `channel`, connecting if needed."""
        if self.closed:
            raise KafkaConnectionError("client closed")
        key = (node_id, channel)
        conn = self._conns.get(key)
        if conn is not None and conn._stream is not None:
            return conn
        lock = self._conn_locks.setdefault(key, trio.Lock())
        async with lock:
            conn = self._conns.get(key)
            if conn is not None and conn._stream is not None:
                return conn
            broker = self.metadata.brokers.get(node_id)
            if broker is None:
                raise KafkaConnectionError(f"node {node_id} is not in the cluster metadata")
            conn = await self._open(broker.host, broker.port)
            self._conns[key] = conn
            return conn

    async def drop_connection(self, node_id: int, channel: str = "default") -> None:
        conn = self._conns.pop((node_id, channel), None)
        if conn is not None:
            with trio.CancelScope(shield=True):
                await conn.aclose()

    def version_for(self, conn: BrokerConnection, api_key: int, max_version: int | None = None,
                    min_version: int = 0) -> int:
        ours_hi = REQUESTS[api_key].VALID_VERSIONS[1]
        ours_hi = min(ours_hi, MAX_VERSIONS.get(api_key, ours_hi))
        if max_version is not None:
            ours_hi = min(ours_hi, max_version)
        try:
            return conn.version_for(api_key, (min_version, ours_hi))
        except ValueError as exc:
            raise KafkaError(f"{REQUESTS[api_key].NAME}: {exc}",
                             ErrorCode.UNSUPPORTED_VERSION) from None

    async def call(self, node_id: int, message, *, channel: str = "default",
                   max_version: int | None = None, min_version: int = 0,
                   timeout_s: float | None = None, expect_response: bool = True):
        """Send `message` to `node_id` and return the response (None if not expected)."""
        conn = await self.connection(node_id, channel)
        version = self.version_for(conn, message.API_KEY, max_version, min_version)
        try:
            return await conn.request(message, version,
                                      timeout_s=timeout_s or self.request_timeout_s,
                                      expect_response=expect_response)
        except trio.TooSlowError:
            # the answer may still arrive and would be read as the next request's: drop it
            await self.drop_connection(node_id, channel)
            raise KafkaTimeoutError(f"{message.NAME} to node {node_id} timed out") from None
        except (ConnectionClosed, OSError) as exc:
            await self.drop_connection(node_id, channel)
            raise KafkaConnectionError(f"node {node_id}: {exc}") from None

    async def call_versioned(self, node_id: int, build, api_key: int, *, channel: str = "default",
                             max_version: int | None = None, timeout_s: float | None = None):
        """Like `call`, for requests whose shape depends on the version: `build(version)` makes
        the message once the version is known."""
        conn = await self.connection(node_id, channel)
        version = self.version_for(conn, api_key, max_version)
        try:
            return await conn.request(build(version), version,
                                      timeout_s=timeout_s or self.request_timeout_s)
        except trio.TooSlowError:
            await self.drop_connection(node_id, channel)
            raise KafkaTimeoutError(f"{REQUESTS[api_key].NAME} to node {node_id} timed out") from None
        except (ConnectionClosed, OSError) as exc:
            await self.drop_connection(node_id, channel)
            raise KafkaConnectionError(f"node {node_id}: {exc}") from None

    def any_node(self) -> int:
        """A broker to send cluster-wide requests to: one we are connected to if possible."""
        connected = sorted({k[0] for k, c in self._conns.items() if c._stream is not None
                            and k[0] in self.metadata.brokers})
        if connected:
            return random.choice(connected)
        if not self.metadata.brokers:
            raise NoBrokersAvailable("no brokers known (metadata not loaded)")
        return random.choice(sorted(self.metadata.brokers))

    async def call_any(self, message, **kw):
        """`call` on any broker, trying others when one is unreachable."""
        tried: set[int] = set()
        last: Exception | None = None
        for _ in range(max(1, len(self.metadata.brokers))):
            node = self.any_node()
            if node in tried:
                node = next((n for n in self.metadata.brokers if n not in tried), node)
            tried.add(node)
            try:
                return await self.call(node, message, **kw)
            except KafkaConnectionError as exc:
                last = exc
        await self.refresh_metadata(force=True)
        if last is not None and not self.metadata.brokers:
            raise last
        return await self.call(self.any_node(), message, **kw)

    async def call_controller(self, message, **kw):
        """Send to the node metadata names as controller (brokers forward admin requests to
        the active controller; Kafka's admin client does the same)."""
        node = self.metadata.controller_id
        if node not in self.metadata.brokers:
            node = self.any_node()
        try:
            return await self.call(node, message, **kw)
        except KafkaConnectionError:
            await self.refresh_metadata(force=True)
            return await self.call_any(message, **kw)

    # -- coordinators ----------------------------------------------------------------------------

    async def find_coordinator(self, key: str, key_type: int = COORDINATOR_GROUP, *,
                               timeout_s: float = 30.0) -> int:
        """Node id of the coordinator for a group (key_type 0) or transactional id (1)."""
        cached = self._coordinators.get((key_type, key))
        if cached is not None and cached in self.metadata.brokers:
            return cached
        fc = REQUESTS[ApiKey.FIND_COORDINATOR]
        deadline = trio.current_time() + timeout_s
        while True:
            def build(v, key=key):
                if v >= 4:
                    return fc(key_type=key_type, coordinator_keys=[key])
                return fc(key=key, key_type=key_type)
            try:
                resp = await self.call_versioned(self.any_node(), build, 10)
                if resp.coordinators:
                    c = resp.coordinators[0]
                    code, node, host, port, msg = (c.error_code, c.node_id, c.host, c.port,
                                                   c.error_message)
                else:
                    code, node, host, port, msg = (resp.error_code, resp.node_id, resp.host,
                                                   resp.port, resp.error_message)
                if code == 0:
                    if node not in self.metadata.brokers:
                        await self.refresh_metadata(force=True)
                    self._coordinators[(key_type, key)] = node
                    return node
                if classify(code) is Retry.NO:
                    check(code, msg, f"find coordinator for {key!r}")
                err: Exception = KafkaError.from_code(code, msg)
            except (KafkaConnectionError, KafkaTimeoutError) as exc:
                err = exc
                await self.refresh_metadata(force=True)
            if trio.current_time() + self.retry_backoff_s >= deadline:
                raise KafkaTimeoutError(f"no coordinator for {key!r}: {err}")
            await trio.sleep(self.retry_backoff_s * 2)

    def forget_coordinator(self, key: str, key_type: int = COORDINATOR_GROUP) -> None:
        self._coordinators.pop((key_type, key), None)
