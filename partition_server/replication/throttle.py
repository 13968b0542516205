"""Replication throttles (KIP-73), Kafka's ReplicationQuotaManager. Pure: callers pass `now_ms`.

A broker has two: LEADER meters the bytes it serves to followers, FOLLOWER the bytes it fetches
as a follower. Each has
  - a bound in bytes/s: the broker config `leader.replication.throttled.rate` /
    `follower.replication.throttled.rate` (dynamic, per broker or cluster-wide; Kafka's default
    Long.MAX_VALUE means unlimited), and
  - the partitions it applies to, from each topic's `leader.replication.throttled.replicas` /
    `follower.replication.throttled.replicas`: "*" (every replica of the topic) or
    "partition:broker,..." pairs, of which a broker keeps the partitions listed with its own id
    (Kafka's parseThrottledPartitions). kafka-reassign-partitions lists a move's current replicas
    on the leader side and its new replicas on the follower side.

The decision (Kafka's ReplicaManager.shouldLeaderThrottle / ReplicaFetcherThread.
shouldFollowerThrottle) holds a replica back when

    its partition is throttled here  AND  the measured rate is above the bound  AND
    the replica is not in the ISR

In-sync replicas are never held back ("to avoid ISR thrashing"), but the bytes of every throttled
partition count toward the rate. In sync means, on the leader, in its ISR; on the follower, in the
ISR of its metadata image or (Kafka's fetcher rule) caught up with the leader's high watermark as
of the last answer — else a follower that caught up would stop fetching before the fetch at the
log end that admits it to the ISR. Held back means: the leader answers that partition with no
records; the follower leaves it out of its next fetch. Either way the replica asks again later.

The bound is kept with a token bucket, as Kafka does for its controller mutation quota (KIP-599's
TokenBucket): credit refills at the bound up to a burst of `replication.quota.window.num` ×
`replication.quota.window.size.seconds` × bound bytes; recorded bytes spend it, possibly into
debt; the quota is exceeded while the credit is below zero. Kafka's replication quota measures a
windowed `Rate` instead; that stat lets a throttled copy through in bursts one window long every
num windows (bytes leave the window together, as they came in), off the bound by up to ~10 % over
any span that is not a multiple of the period. The bucket paces evenly and allows the same
initial burst (an idle throttle starts with full credit, ~ Kafka's (num − 1) windows' worth).
"""

from __future__ import annotations

from common.topic_configs import (FOLLOWER_THROTTLED_RATE, FOLLOWER_THROTTLED_REPLICAS,
                                  LEADER_THROTTLED_RATE, LEADER_THROTTLED_REPLICAS, LONG_MAX,
                                  MOVES_THROTTLED_RATE)
from partition_server.quotas import WindowConfig

ALL = "*"       # every partition of the topic is throttled


def parse_throttled_replicas(value: str, broker_id: int):
    """ALL, or the frozenset of partitions listed with `broker_id` ("0:1,1:2" on broker 1 is
    {0}). Malformed pairs are skipped: the controller validates, this must never raise."""
    value = (value or "").strip()
    if value == ALL:
        return ALL
    partitions = set()
    for pair in value.split(","):
        p, sep, b = pair.strip().partition(":")
        if sep and p.strip().isdigit() and b.strip().isdigit() and int(b) == broker_id:
            partitions.add(int(p))
    return frozenset(partitions)


def throttled_partitions(topic_configs: dict[str, dict[str, str]], key: str,
                         broker_id: int) -> dict:
    """{topic: ALL | frozenset(partitions)} for config `key`, topics throttling nothing left out."""
    out = {}
    for topic, cfg in topic_configs.items():
        value = cfg.get(key)
        if value:
            parsed = parse_throttled_replicas(value, broker_id)
            if parsed:
                out[topic] = parsed
    return out


def parse_rate(value) -> float | None:
    """A configured rate as a bound; None for unlimited (Long.MAX_VALUE) or unreadable."""
    try:
        rate = int(value)
    except (TypeError, ValueError):
        return None
    return None if rate >= LONG_MAX or rate < 0 else float(rate)


class TokenBucket:
    """Credit in bytes, refilled at `bound` bytes/s up to `burst_s` seconds' worth."""

    __slots__ = ("bound", "burst_s", "tokens", "last_ms")

    def __init__(self, bound: float, burst_s: float):
        self.bound, self.burst_s = bound, burst_s
        self.tokens = bound * burst_s
        self.last_ms: float | None = None

    def _refill(self, now_ms: float) -> None:
        if self.last_ms is not None and now_ms > self.last_ms:
            self.tokens = min(self.bound * self.burst_s,
                              self.tokens + self.bound * (now_ms - self.last_ms) / 1000.0)
        if self.last_ms is None or now_ms > self.last_ms:
            self.last_ms = now_ms

    def record(self, value: float, now_ms: float) -> None:
        self._refill(now_ms)
        self.tokens -= value

    def exceeded(self, now_ms: float) -> bool:
        self._refill(now_ms)
        return self.tokens < 0


class ReplicationQuota:
    """One direction (leader or follower) of one broker's replication throttle.

    Two tiers, each with its own bound and bucket: the partitions an operator lists in topic
    configs (Kafka's throttle), and the reassignment copies no topic config lists, bound by
    `raftka.reassignment.throttled.rate` (not Kafka's; Redpanda's learner recovery rate is the
    anchor) — so moves the controller starts by itself (balancer, re-replication) and moves
    started without `--throttle` do not starve clients either. A partition listed by an
    operator is metered by the operator's tier only."""

    def __init__(self, window: WindowConfig = WindowConfig()):
        self.burst_s = window.num * window.size_ms / 1000.0
        self.bound: float | None = None           # bytes/s; None: unlimited
        self.operator: dict = {}                  # topic -> ALL | frozenset(partitions)
        self.bucket: TokenBucket | None = None    # None while unlimited
        self.move_bound: float | None = None      # the reassignment tier
        self.moves: dict = {}                     # topic -> frozenset(partitions) being copied
        self.move_bucket: TokenBucket | None = None
        self.throttled: dict = {}                 # both tiers (truthy: anything throttled here)
        self.recorded = 0                         # bytes of throttled partitions (metrics, tests)
        self.held_back = 0                        # times a replica was held back (metrics)

    def configure(self, bound: float | None, throttled: dict) -> None:
        if bound != self.bound:
            # a new bound starts with its own full credit (bytes sent while unlimited owe nothing)
            self.bucket = TokenBucket(bound, self.burst_s) if bound is not None else None
        self.bound = bound
        self.operator = throttled
        self._merge()

    def configure_moves(self, bound: float | None, moves: dict) -> None:
        """The reassignment tier: `moves` {topic: frozenset(partitions)} copied through this
        side now (those an operator lists stay in the operator's tier)."""
        if bound != self.move_bound:
            self.move_bucket = TokenBucket(bound, self.burst_s) if bound is not None else None
        self.move_bound = bound
        self.moves = moves if bound is not None else {}
        self._merge()

    def _merge(self) -> None:
        if not self.moves:
            self.throttled = self.operator
            return
        merged = dict(self.moves)
        for topic, parts in self.operator.items():
            merged[topic] = parts if parts == ALL else parts | merged.get(topic, frozenset())
        self.throttled = merged

    def _listed(self, topic: str, partition: int) -> bool:
        parts = self.operator.get(topic)
        return parts is not None and (parts == ALL or partition in parts)

    def _bucket(self, key) -> TokenBucket | None:
        if key is None or self._listed(*key):
            return self.bucket
        return self.move_bucket

    def is_throttled(self, topic: str, partition: int) -> bool:
        parts = self.throttled.get(topic)
        return parts is not None and (parts == ALL or partition in parts)

    def is_quota_exceeded(self, now_ms: float, key=None) -> bool:
        """Over the bound of `key`'s tier (None: the operator's)."""
        bucket = self._bucket(key)
        return bucket is not None and bucket.exceeded(now_ms)

    def record(self, nbytes: int, now_ms: float, key=None) -> None:
        """Bytes of a throttled partition (`key`; None: the operator's tier) that went over
        the wire (in sync or not)."""
        self.recorded += nbytes
        bucket = self._bucket(key)
        if bucket is not None:
            bucket.record(nbytes, now_ms)

    def would_throttle(self, topic: str, partition: int, in_sync: bool, now_ms: float) -> bool:
        """Kafka's decision, counting nothing (for checks that may run many times)."""
        return not in_sync and self.is_throttled(topic, partition) and \
            self.is_quota_exceeded(now_ms, (topic, partition))

    def should_throttle(self, topic: str, partition: int, in_sync: bool, now_ms: float) -> bool:
        """The decision for one fetch (counted in `held_back`)."""
        held = self.would_throttle(topic, partition, in_sync, now_ms)
        if held:
            self.held_back += 1
        return held


def moves_by_side(moving: dict) -> tuple[dict, dict]:
    """({topic: partitions} this broker sends as a source of a move, {topic: partitions} it
    copies in as a new replica) from the replica manager's {(topic, partition): adding here}."""
    sources: dict = {}
    targets: dict = {}
    for (topic, partition), adding in moving.items():
        side = targets if adding else sources
        side[topic] = side.get(topic, frozenset()) | {partition}
    return sources, targets


class ReplicationQuotas:
    """A broker's pair, reconfigured from each metadata image whose configs changed."""

    def __init__(self, broker_id: int, window: WindowConfig = WindowConfig(),
                 static_rates: tuple = (None, None), static_move_rate: float | None = None):
        self.broker_id = broker_id
        self.leader = ReplicationQuota(window)
        self.follower = ReplicationQuota(window)
        self.static_rates = static_rates          # (leader, follower) from the broker's file
        self.static_move_rate = static_move_rate  # raftka.reassignment.throttled.rate, the file's
        self._configs = None
        self._moves_seen = None

    def update(self, configs: dict, broker_config: dict[str, str], topic_resource: int) -> None:
        """`configs`: the image's {(resource type, name): {key: value}} (compared by identity,
        so an image whose configs did not change costs nothing); `broker_config`: this broker's
        dynamic configs (cluster default merged with its own)."""
        if configs is self._configs:
            return
        self._configs = configs
        topics = {name: cfg for (rtype, name), cfg in configs.items() if rtype == topic_resource}
        for quota, rate_key, replicas_key, static in (
                (self.leader, LEADER_THROTTLED_RATE, LEADER_THROTTLED_REPLICAS, self.static_rates[0]),
                (self.follower, FOLLOWER_THROTTLED_RATE, FOLLOWER_THROTTLED_REPLICAS,
                 self.static_rates[1])):
            bound = parse_rate(broker_config[rate_key]) if rate_key in broker_config else static
            quota.configure(bound, throttled_partitions(topics, replicas_key, self.broker_id))

    def update_moves(self, moving: dict, version: int, broker_config: dict[str, str]) -> None:
        """The reassignment tier of both sides from the replica manager's moving partitions
        (`version` changes whenever they do) and `raftka.reassignment.throttled.rate`."""
        rate = parse_rate(broker_config[MOVES_THROTTLED_RATE]) \
            if MOVES_THROTTLED_RATE in broker_config else self.static_move_rate
        if (version, rate) == self._moves_seen:
            return
        self._moves_seen = (version, rate)
        sources, targets = moves_by_side(moving)
        self.leader.configure_moves(rate, sources)
        self.follower.configure_moves(rate, targets)
