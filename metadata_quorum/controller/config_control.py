"""Topic and broker configs: validation and ConfigRecords (Kafka's ConfigurationControlManager).

Topic configs are checked against `common.topic_configs.TOPIC_CONFIGS` (name → default, check); unknown names
and bad values get INVALID_CONFIG with a message naming the key. Broker configs that may change
at run time are a small allow-list; anything else is rejected rather than silently stored.
"""

from __future__ import annotations

from common.topic_configs import DYNAMIC_BROKER_CONFIGS, TOPIC_CONFIGS
from metadata_quorum import records as r
from metadata_quorum.image import BROKER_RESOURCE, TOPIC_RESOURCE, MetadataImage
from wire.errors import ErrorCode

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def validate(resource_type: int, name: str, value: str | None) -> str | None:
    if resource_type == TOPIC_RESOURCE:
        entry = TOPIC_CONFIGS.get(name)
        if entry is None:
            return f"unknown topic config '{name}'"
        return None if value is None else entry[1](value)
    if resource_type == BROKER_RESOURCE:
        check = DYNAMIC_BROKER_CONFIGS.get(name)
        if check is None:
            return f"'{name}' is not a dynamically changeable broker config"
        return None if value is None else check(value)
    return f"unsupported config resource type {resource_type}"


def validate_topic_configs(configs: dict[str, str]) -> str | None:
    for k, v in configs.items():
        problem = validate(TOPIC_RESOURCE, k, v)
        if problem:
            return f"{k}: {problem}"
    return None


def incremental_alter(image: MetadataImage, resource_type: int, resource_name: str,
                      ops: list[tuple[str, int, str | None]]):
    """[(name, op, value)] → (records, error, message). All or nothing per resource."""
    if resource_type == TOPIC_RESOURCE and resource_name not in image.topics:
        return [], ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic '{resource_name}' does not exist"
    if resource_type == BROKER_RESOURCE and resource_name and (
            not resource_name.isdigit() or int(resource_name) not in image.brokers):
        return [], ErrorCode.INVALID_REQUEST, f"broker '{resource_name}' is not registered"
    current = dict(image.configs.get((resource_type, resource_name), {}))
    records = []
    for name, op, value in ops:
        if op == SET:
            new = value
        elif op == DELETE:
            new = None
        elif op in (APPEND, SUBTRACT):
            items = [x for x in current.get(name, _default(resource_type, name)).split(",") if x]
            delta = [x.strip() for x in (value or "").split(",") if x.strip()]
            items = items + [x for x in delta if x not in items] if op == APPEND else \
                [x for x in items if x not in delta]
            new = ",".join(items) if items else None
        else:
            return [], ErrorCode.INVALID_REQUEST, f"unknown config operation {op}"
        problem = validate(resource_type, name, new)
        if problem:
            return [], ErrorCode.INVALID_CONFIG, f"{name}: {problem}"
        current[name] = new
        records.append(r.ConfigRecord(resource_type, resource_name, name, new))
    return records, ErrorCode.NONE, None


def legacy_alter(image: MetadataImage, resource_type: int, resource_name: str,
                 configs: dict[str, str]):
    """AlterConfigs (non-incremental): the given set replaces every override."""
    existing = image.configs.get((resource_type, resource_name), {})
    ops = [(k, SET, v) for k, v in configs.items()]
    ops += [(k, DELETE, None) for k in existing if k not in configs]
    return incremental_alter(image, resource_type, resource_name, ops)


def _default(resource_type: int, name: str) -> str:
    if resource_type == TOPIC_RESOURCE and name in TOPIC_CONFIGS:
        return TOPIC_CONFIGS[name][0]
    return ""
