"""DescribeConfigs: every config this broker honours, typed and sourced the way Kafka's broker
answers, so admin tools that read types, sources and synonyms show what they show for Kafka.

A config's value comes from the most specific level that sets it; include_synonyms lists every
level that does, most specific first (Kafka's order):
    topic    DYNAMIC_TOPIC_CONFIG (the topic's override), then its broker default's levels below
             under the broker's key name (retention.ms -> log.retention.ms)
    broker   DYNAMIC_BROKER_CONFIG (this broker), DYNAMIC_DEFAULT_BROKER_CONFIG (cluster-wide),
             STATIC_BROKER_CONFIG (the properties file), DEFAULT_CONFIG
A key no level sets is still listed, with a null value, as Kafka lists `advertised.listeners`.
PASSWORD-typed values never leave the broker: null and is_sensitive, like Kafka.
"""

from __future__ import annotations

from common.topic_configs import DYNAMIC_BROKER_CONFIGS, TOPIC_CONFIGS
from partition_server.config import BROKER_CONFIG_DEFS, BROKER_TO_TOPIC
from partition_server.handlers.context import HandlerContext
from wire.errors import ErrorCode
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import RESPONSES

TOPIC, BROKER = 2, 4
# Kafka's ConfigSource and ConfigType numbers (DescribeConfigsResponse)
DYNAMIC_TOPIC, DYNAMIC_BROKER, DYNAMIC_DEFAULT_BROKER, STATIC_BROKER, DEFAULT = 1, 2, 3, 4, 5
BOOLEAN, STRING, INT, SHORT, LONG, DOUBLE, LIST, CLASS, PASSWORD = range(1, 10)

_BY_PARSE_TYPE = {"bool": BOOLEAN, "string": STRING, "int": INT, "long": LONG, "double": DOUBLE,
                  "list": LIST}
# keys Kafka declares with another type than the one we parse them as (Kafka splits listener
# strings itself; replication factors are shorts; secrets are PASSWORD)
KAFKA_BROKER_TYPES = {
    "listeners": STRING, "advertised.listeners": STRING, "log.dirs": STRING,
    "listener.security.protocol.map": STRING, "offsets.topic.replication.factor": SHORT,
    "transaction.state.log.replication.factor": SHORT, "ssl.key.password": PASSWORD,
    "raftka.inter.node.sasl.password": PASSWORD, "broker.id": INT,
}
# Kafka's TopicConfig types of the topic configs we accept
TOPIC_TYPES = {
    "cleanup.policy": LIST, "compression.type": STRING, "delete.retention.ms": LONG,
    "file.delete.delay.ms": LONG, "flush.messages": LONG, "flush.ms": LONG,
    "follower.replication.throttled.replicas": LIST, "index.interval.bytes": INT,
    "leader.replication.throttled.replicas": LIST, "max.compaction.lag.ms": LONG,
    "max.message.bytes": INT, "message.format.version": STRING,
    "message.timestamp.type": STRING, "message.timestamp.after.max.ms": LONG,
    "message.timestamp.before.max.ms": LONG, "message.timestamp.difference.max.ms": LONG,
    "min.cleanable.dirty.ratio": DOUBLE,
    "min.compaction.lag.ms": LONG, "min.insync.replicas": INT, "retention.bytes": LONG,
    "retention.ms": LONG, "segment.bytes": INT, "segment.index.bytes": INT, "segment.ms": LONG,
    "unclean.leader.election.enable": BOOLEAN, "unclean.recovery.strategy": STRING,
}
TOPIC_TO_BROKER = {topic_key: broker_key for broker_key, topic_key in BROKER_TO_TOPIC.items()}


def broker_type(key: str) -> int:
    return KAFKA_BROKER_TYPES.get(key) or _BY_PARSE_TYPE[BROKER_CONFIG_DEFS[key].type]


def as_text(value) -> str | None:
    """A parsed broker value as Kafka's properties text."""
    if value is None:
        return None
    if isinstance(value, list):
        return ",".join(value)
    return str(value).lower() if isinstance(value, bool) else str(value)


def broker_levels(hctx: HandlerContext, key: str,
                  per_broker: bool = True) -> list[tuple[str, str | None, int]]:
    """(key, value, source) of each level that sets broker config `key`, most specific first;
    without `per_broker` (the cluster-wide default resource) the broker's own dynamic level is
    left out, as Kafka does."""
    configs = hctx.image.configs
    out = []
    levels = ((str(hctx.broker_id), DYNAMIC_BROKER), ("", DYNAMIC_DEFAULT_BROKER))
    for resource, source in levels if per_broker else levels[1:]:
        value = configs.get((BROKER, resource), {}).get(key)
        if value is not None:
            out.append((key, value, source))
    name = "node.id" if key == "broker.id" else key        # Kafka's older name of node.id
    defn = BROKER_CONFIG_DEFS[name]
    value = hctx.config.values.get(name)
    if name in hctx.config.static_keys or value != defn.default:
        out.append((key, as_text(value), STATIC_BROKER))
    if defn.default is not None:
        out.append((key, as_text(defn.default), DEFAULT))
    return out


def topic_levels(hctx: HandlerContext, topic: str, key: str) -> list[tuple[str, str | None, int]]:
    out = []
    override = hctx.image.topic_config(topic).get(key)
    if override is not None:
        out.append((key, override, DYNAMIC_TOPIC))
    below = broker_levels(hctx, TOPIC_TO_BROKER[key]) if key in TOPIC_TO_BROKER else []
    # a broker default no level sets (log.flush.interval.ms) leaves the topic's own default
    return out + (below or [(key, TOPIC_CONFIGS[key][0], DEFAULT)])


def _entry(cls, req, key: str, levels, config_type: int, read_only: bool, doc: str | None):
    value, source = (levels[0][1], levels[0][2]) if levels else (None, DEFAULT)
    sensitive = config_type == PASSWORD
    synonyms = [cls.DescribeConfigsSynonym(name=k, value=None if sensitive else v, source=s)
                for k, v, s in levels] if req.include_synonyms else []
    return cls.DescribeConfigsResourceResult(
        name=key, value=None if sensitive else value, read_only=read_only,
        is_default=source == DEFAULT, config_source=source, is_sensitive=sensitive,
        synonyms=synonyms, config_type=config_type,
        documentation=doc if req.include_documentation else None)


def broker_entries(cls, req, hctx: HandlerContext, keys, per_broker: bool = True):
    """Every config of this broker; for the cluster-wide default resource (name ""), only the
    configs set at that level, as Kafka answers (its currentDynamicDefaultConfigs)."""
    names = set(BROKER_CONFIG_DEFS) | {"broker.id"} if per_broker else \
        set(hctx.image.configs.get((BROKER, ""), {})) & set(BROKER_CONFIG_DEFS)
    for key in sorted(names):
        if keys is None or key in keys:
            doc = BROKER_CONFIG_DEFS["node.id" if key == "broker.id" else key].doc
            yield _entry(cls, req, key, broker_levels(hctx, key, per_broker), broker_type(key),
                         key not in DYNAMIC_BROKER_CONFIGS, doc)


def topic_entries(cls, req, hctx: HandlerContext, topic: str, keys):
    for key in sorted(TOPIC_CONFIGS):
        if keys is None or key in keys:
            yield _entry(cls, req, key, topic_levels(hctx, topic, key), TOPIC_TYPES[key],
                         False, None)


async def handle_describe_configs(hctx: HandlerContext, req):
    """Codes: UNKNOWN_TOPIC_OR_PARTITION (no such topic), INVALID_REQUEST (other broker id or
    resource type)."""
    cls = RESPONSES[ApiKey.DESCRIBE_CONFIGS]
    results = []
    for res in req.body.resources:
        out = cls.DescribeConfigsResult(resource_type=res.resource_type,
                                        resource_name=res.resource_name, error_code=0)
        keys = set(res.configuration_keys) if res.configuration_keys else None
        if res.resource_type == TOPIC and res.resource_name in hctx.image.topics:
            out.configs = list(topic_entries(cls, req.body, hctx, res.resource_name, keys))
        elif res.resource_type == TOPIC:
            out.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            out.error_message = f"topic '{res.resource_name}' does not exist"
        elif res.resource_type == BROKER and res.resource_name in ("", str(hctx.broker_id)):
            out.configs = list(broker_entries(cls, req.body, hctx, keys,
                                              per_broker=res.resource_name != ""))
        else:
            out.error_code = ErrorCode.INVALID_REQUEST
            out.error_message = "describe topics or this broker"
        results.append(out)
    return cls(results=results)
