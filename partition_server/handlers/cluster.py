"""ApiVersions, Metadata, DescribeCluster (DescribeConfigs: describe_configs.py).

Metadata: brokers are the unfenced registrations; `controller_id` is a live broker (clients
never talk to controllers, ARCHITECTURE.md); partitions carry leader epochs; an unknown topic gets
UNKNOWN_TOPIC_OR_PARTITION, or is created when `auto.create.topics.enable` allows it (off by
default); a partition without a leader gets LEADER_NOT_AVAILABLE. Each topic's part of the
answer is built once per change of that topic and reused (metadata_cache.py).
"""

from __future__ import annotations

from common.topic_configs import validate_topic_name
from partition_server.handlers.context import HandlerContext
from partition_server.handlers.metadata_cache import MetadataAnswer
from wire.errors import ErrorCode
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import RESPONSES

CLUSTER_ID = "raftka"


async def handle_api_versions(hctx: HandlerContext, req):
    from partition_server.handlers import SUPPORTED
    cls = RESPONSES[ApiKey.API_VERSIONS]
    return cls(error_code=0, api_keys=[cls.ApiVersion(api_key=k, min_version=lo, max_version=hi)
                                       for k, (lo, hi) in sorted(SUPPORTED.items())])


def live_brokers(image):
    return sorted((b for b in image.brokers.values() if not b.fenced), key=lambda b: b.broker_id)


async def handle_metadata(hctx: HandlerContext, req):
    cls = RESPONSES[ApiKey.METADATA]
    image = hctx.image
    brokers = live_brokers(image)
    requested = req.body.topics
    cache = hctx.metadata_cache
    if requested is None or (req.api_version == 0 and not requested):
        live = cache.live(brokers)
        topics = cache.all_topics(image, live)      # a shared tuple, encoded once per change
    else:
        names = []
        for t in requested:
            name = t.name if t.name is not None else image.topic_names.get(t.topic_id)
            names.append(name if name is not None else "")
        allow_auto = req.body.allow_auto_topic_creation and \
            hctx.config["auto.create.topics.enable"]
        missing = [n for n in names if n not in image.topics and not validate_topic_name(n)]
        if missing and allow_auto:
            from partition_server.handlers.admin import auto_create
            await auto_create(hctx, missing)
            image = hctx.image
        live = cache.live(brokers)
        topics = _named_topics(cache, image, live, names, missing, allow_auto)
    controller = hctx.broker_id if not brokers else brokers[0].broker_id
    return MetadataAnswer(
        brokers=[cls.MetadataResponseBroker(node_id=b.broker_id, host=b.host, port=b.port,
                                            rack=b.rack) for b in brokers],
        cluster_id=CLUSTER_ID, controller_id=controller, topics=topics)


def _named_topics(cache, image, live, names, missing, allow_auto) -> list:
    cls = RESPONSES[ApiKey.METADATA]
    topics = []
    for name in names:
        topic = image.topics.get(name)
        if topic is None:
            code = ErrorCode.INVALID_TOPIC_EXCEPTION if validate_topic_name(name) else (
                ErrorCode.LEADER_NOT_AVAILABLE if name in missing and allow_auto
                else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            topics.append(cls.MetadataResponseTopic(error_code=code, name=name))
            continue
        topics.append(cache.topic(image, topic, live))      # built once per topic change
    return topics


async def handle_describe_cluster(hctx: HandlerContext, req):
    """Brokers as Metadata has them (unfenced); with Raftka's tagged request field (KIP-1073's
    IncludeFencedBrokers, which our schema versions predate) also the fenced ones, so `raftka
    cluster describe` tells a fenced broker from an unregistered one."""
    cls = RESPONSES[ApiKey.DESCRIBE_CLUSTER]
    brokers = live_brokers(hctx.image)
    resp = cls(error_code=0, cluster_id=CLUSTER_ID,
               controller_id=brokers[0].broker_id if brokers else -1,
               brokers=[cls.DescribeClusterBroker(broker_id=b.broker_id, host=b.host, port=b.port,
                                                  rack=b.rack) for b in brokers])
    if req.body.raftka_include_fenced_brokers:
        resp.raftka_fenced_brokers = [
            cls.RaftkaFencedBroker(broker_id=b.broker_id, host=b.host, port=b.port, rack=b.rack)
            for b in sorted(hctx.image.brokers.values(), key=lambda b: b.broker_id) if b.fenced]
    return resp
