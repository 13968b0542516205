"""Topic config and topic name rules, shared by the controller (validating CreateTopics and
AlterConfigs) and the broker (DescribeConfigs defaults, Metadata auto-creation checks).

`TOPIC_CONFIGS`: name → (default, check), Kafka's names and defaults; a check returns why a
value is unacceptable, or None. `DYNAMIC_BROKER_CONFIGS`: the broker configs that may change
at run time. `validate_topic_name`: Kafka's legal topic names.
"""

from __future__ import annotations

import re

LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
LONG_MAX = 2**63 - 1


def _int(lo=None, hi=None):
    def check(v: str):
        try:
            n = int(v)
        except ValueError:
            return "must be an integer"
        if lo is not None and n < lo:
            return f"must be >= {lo}"
        if hi is not None and n > hi:
            return f"must be <= {hi}"
        return None
    return check


def _choice(*options, multi=False):
    def check(v: str):
        items = [x.strip() for x in v.split(",")] if multi else [v]
        if not items or any(x not in options for x in items):
            return f"must be {'a list of ' if multi else 'one of '}{', '.join(options)}"
        return None
    return check


def _bool(v: str):
    return None if v.lower() in ("true", "false") else "must be true or false"


def _ratio(v: str):
    try:
        return None if 0 <= float(v) <= 1 else "must be between 0 and 1"
    except ValueError:
        return "must be a number"


def throttled_replicas(v: str):
    """Kafka's ThrottledReplicaListValidator: "*" (every replica of the topic) or a list of
    partition:broker pairs ("0:101,1:102"); empty entries are allowed, "" throttles nothing."""
    if v.strip() == "*" or all(THROTTLED_PAIR.match(x.strip()) for x in v.split(",")):
        return None
    return ("must be the literal '*' or a list of replicas in the following format: "
            "[partitionId]:[brokerId],[partitionId]:[brokerId],...")


# Kafka's MetadataVersion names up to 3.9, the version we claim: release -> its IV suffixes
_METADATA_VERSIONS = {"0.8.0": (), "0.8.1": (), "0.8.2": (), "0.9.0": (),
                      "0.10.0": (0, 1), "0.10.1": (0, 1, 2), "0.10.2": (0,), "0.11.0": (0, 1, 2),
                      "1.0": (0,), "1.1": (0,), "2.0": (0, 1), "2.1": (0, 1, 2), "2.2": (0, 1),
                      "2.3": (0, 1), "2.4": (0, 1), "2.5": (0,), "2.6": (0,), "2.7": (0, 1, 2),
                      "2.8": (0, 1), "3.0": (0, 1), "3.1": (0,), "3.2": (0,), "3.3": (0, 1, 2, 3),
                      "3.4": (0,), "3.5": (0, 1, 2), "3.6": (0, 1, 2), "3.7": (0, 1, 2, 3, 4),
                      "3.8": (0,), "3.9": (0,)}
_METADATA_VERSION_NAMES = set(_METADATA_VERSIONS) | {
    f"{release}-IV{iv}" for release, ivs in _METADATA_VERSIONS.items() for iv in ivs}


def message_format_version(v: str):
    """Kafka's MetadataVersionValidator (MetadataVersion.fromVersionString): a release ("2.8",
    "0.10.2", extra segments ignored: "2.8.1") or a release with its IV ("3.0-IV1")."""
    parts = v.split(".")
    key = ".".join(parts[:3 if v.startswith("0.") else 2])
    if key in _METADATA_VERSION_NAMES:
        return None
    return f"Version {v} is not a valid version"


THROTTLED_PAIR = re.compile(r"^([0-9]+:[0-9]+)?$")
LEADER_THROTTLED_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_THROTTLED_REPLICAS = "follower.replication.throttled.replicas"
LEADER_THROTTLED_RATE = "leader.replication.throttled.rate"
FOLLOWER_THROTTLED_RATE = "follower.replication.throttled.rate"
# not Kafka's: bytes/s per broker and side for reassignment copies no topic throttle lists
# (partition_server/replication/throttle.py); Redpanda's learner recovery rate is the anchor
MOVES_THROTTLED_RATE = "raftka.reassignment.throttled.rate"
# Kafka's throttle of AlterReplicaLogDirs copies between a broker's own log directories
ALTER_LOG_DIRS_RATE = "replica.alter.log.dirs.io.max.bytes.per.second"
DEFAULT_MOVES_THROTTLED_RATE = 100 << 20


# KIP-966's values of unclean.recovery.strategy; Balanced is the KIP's default
UNCLEAN_RECOVERY_STRATEGIES = ("None", "Balanced", "Aggressive")
UNCLEAN_RECOVERY_TIMEOUT_MS = 300_000


def unclean_recovery_strategy(topic_config: dict, cluster_config: dict) -> str:
    """The strategy in force for a topic: its own setting, else the cluster-wide dynamic one,
    else Balanced. Read by the controller (which elects) and by brokers (which report their
    log ends only where a recovery may use them)."""
    value = topic_config.get("unclean.recovery.strategy")
    if value is None:
        value = cluster_config.get("unclean.recovery.strategy", "Balanced")
    return value if value in UNCLEAN_RECOVERY_STRATEGIES else "Balanced"


# name → (default, check). Defaults match Kafka's.
TOPIC_CONFIGS = {
    "cleanup.policy": ("delete", _choice("delete", "compact", multi=True)),
    "compression.type": ("producer", _choice("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")),
    "delete.retention.ms": ("86400000", _int(0)),
    "file.delete.delay.ms": ("60000", _int(0)),
    "flush.messages": (str(LONG_MAX), _int(1)),
    "flush.ms": (str(LONG_MAX), _int(0)),
    FOLLOWER_THROTTLED_REPLICAS: ("", throttled_replicas),
    "index.interval.bytes": ("4096", _int(0)),
    LEADER_THROTTLED_REPLICAS: ("", throttled_replicas),
    "max.compaction.lag.ms": (str(LONG_MAX), _int(1)),
    "max.message.bytes": ("1048588", _int(0)),
    # deprecated since Kafka 3.0: accepted, shown and ignored (every log is message format v2),
    # as Kafka 3.x does; Kafka 4.0 drops it
    "message.format.version": ("3.0-IV1", message_format_version),
    # per-record limits checked on produce (partition_server/log/record_validation.py);
    # difference.max.ms is deprecated and stands for both while they keep their default
    "message.timestamp.after.max.ms": (str(LONG_MAX), _int(0)),
    "message.timestamp.before.max.ms": (str(LONG_MAX), _int(0)),
    "message.timestamp.difference.max.ms": (str(LONG_MAX), _int(0)),
    "message.timestamp.type": ("CreateTime", _choice("CreateTime", "LogAppendTime")),
    "min.cleanable.dirty.ratio": ("0.5", _ratio),
    "min.compaction.lag.ms": ("0", _int(0)),
    "min.insync.replicas": ("1", _int(1)),
    "retention.bytes": ("-1", _int(-1)),
    "retention.ms": ("604800000", _int(-1)),
    "segment.bytes": ("1073741824", _int(14)),
    "segment.index.bytes": ("10485760", _int(8)),
    "segment.ms": ("604800000", _int(1)),
    "unclean.leader.election.enable": ("false", _bool),
    # KIP-966 unclean recovery: how a partition whose ISR and ELR are both empty gets a leader
    # (metadata_quorum/controller/unclean_recovery.py)
    "unclean.recovery.strategy": ("Balanced", _choice(*UNCLEAN_RECOVERY_STRATEGIES)),
}

DYNAMIC_BROKER_CONFIGS = {
    "min.insync.replicas": _int(1),
    "unclean.leader.election.enable": _bool,
    "unclean.recovery.strategy": _choice(*UNCLEAN_RECOVERY_STRATEGIES),
    # how long a Balanced recovery waits for the replicas it wants to hear from (KIP-966)
    "unclean.recovery.timeout.ms": _int(0),
    "log.retention.ms": _int(-1),
    "log.retention.bytes": _int(-1),
    "log.cleanup.policy": _choice("delete", "compact", multi=True),
    "message.max.bytes": _int(0),
    "auto.create.topics.enable": _bool,
    # KIP-937 limits on a CreateTime record's distance from the broker's clock (Kafka: dynamic,
    # per broker and cluster default); open logs take them at once (replica_manager._reconfigure)
    "log.message.timestamp.before.max.ms": _int(0),
    "log.message.timestamp.after.max.ms": _int(0),
    "log.message.timestamp.difference.max.ms": _int(0),
    # replication throttles (bytes/s; Kafka's default Long.MAX_VALUE is "unthrottled")
    LEADER_THROTTLED_RATE: _int(0, LONG_MAX),
    FOLLOWER_THROTTLED_RATE: _int(0, LONG_MAX),
    MOVES_THROTTLED_RATE: _int(1, LONG_MAX),
    ALTER_LOG_DIRS_RATE: _int(1, LONG_MAX),
    # not Kafka's: replicas of a broker unreachable this long are re-placed on live brokers by
    # the controller (metadata_quorum/controller/rereplication.py); -1 never (the default)
    "raftka.rereplication.timeout.ms": _int(-1),
    # not Kafka's: the controller evens replica and preferred-leader counts per broker
    # (metadata_quorum/controller/balancer.py); off by default, on in `raftka dev`
    "raftka.balancer.enable": _bool,
    "raftka.balancer.max.moves": _int(1),
    "raftka.balancer.threshold": _int(1),
    "raftka.balancer.disk.threshold.percent": _int(1),
    "raftka.balancer.disk.min.skew.bytes": _int(0),
}


def validate_topic_name(name: str) -> str | None:
    if not name or name in (".", ".."):
        return "topic name is empty, '.' or '..'"
    if not LEGAL_TOPIC.match(name):
        return "topic names are 1-249 characters of [a-zA-Z0-9._-]"
    return None
