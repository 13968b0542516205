"""Client quotas (Kafka's ClientQuotaControlManager; KIP-546 AlterClientQuotas /
DescribeClientQuotas, stored as KIP-631 ClientQuotaRecords).

Per entity and key: absent ──set──▶ value ──set──▶ other value; ──remove──▶ absent. A record with
value None is a removal; the image drops an entity whose last key went away. Commands are pure:
they read the image and return records plus per-entry results; nothing changes until `replay`.

Accepted: entity types `user` and `client-id` (alone or together, each at most once; a None name
is `<default>`), keys producer_byte_rate and consumer_byte_rate (whole bytes per second, > 0) and
request_percentage (> 0). Refused with INVALID_REQUEST and a message: `ip` entities and
connection_creation_rate (KIP-612), controller_mutation_rate (KIP-599), unknown types or keys,
non-integral byte rates, values <= 0, a key named twice in one entry. `describe` is shared with
the brokers, which answer DescribeClientQuotas from their own image.
"""

from __future__ import annotations

from metadata_quorum import records as r
from metadata_quorum.image import MetadataImage
from common.quotas import CLIENT_ID, IP, USER, canonical, validate_entity, validate_value
from wire.errors import ErrorCode

MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2


def alter_client_quotas(image: MetadataImage, entries, validate_only: bool = False):
    """entries: [(((entity_type, name|None), ...), [(key, value, remove), ...])] →
    (records, [(error_code, message)])."""
    records, results = [], []
    pending: dict[tuple, dict] = {}          # later entries for the same entity see earlier ones
    for pairs, ops in entries:
        problem = validate_entity(pairs)
        if problem is None:
            problem = _validate_ops(ops)
        if problem is not None:
            results.append((ErrorCode.INVALID_REQUEST, problem))
            continue
        ent = canonical(pairs)
        current = pending.get(ent, dict(image.quotas.get(ent, {})))
        for key, value, remove in ops:
            if remove:
                if key in current:
                    del current[key]
                    records.append(r.ClientQuotaRecord(ent, key, None))
            elif current.get(key) != float(value):
                current[key] = float(value)
                records.append(r.ClientQuotaRecord(ent, key, float(value)))
        pending[ent] = current
        results.append((ErrorCode.NONE, None))
    return ([] if validate_only else records), results


def _validate_ops(ops) -> str | None:
    seen = set()
    for key, value, remove in ops:
        if key in seen:
            return f"quota key {key} appears more than once"
        seen.add(key)
        if remove:
            # removing a key we would refuse to set is still refused, so typos are reported
            problem = validate_value(key, 1.0)
        else:
            problem = validate_value(key, value)
        if problem:
            return problem
    return None


def _validate_filter(components) -> str | None:
    types = [c[0] for c in components]
    if len(set(types)) != len(types):
        return "an entity type may appear only once in a filter"
    for etype, match_type, match in components:
        if etype == IP:
            return "ip quotas are not supported by raftka"
        if etype not in (USER, CLIENT_ID):
            return f"unknown client quota entity type {etype!r}"
        if match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED):
            return f"unknown match type {match_type}"
        if match_type == MATCH_EXACT and match is None:
            return f"exact match on {etype} needs a name"
    return None


def _component_matches(ent: dict, etype: str, match_type: int, match) -> bool:
    if etype not in ent:
        return False
    name = ent[etype]
    if match_type == MATCH_EXACT:
        return name == match
    if match_type == MATCH_DEFAULT:
        return name is None
    return name is not None


def describe_client_quotas(image: MetadataImage, components, strict: bool):
    """components: [(entity_type, match_type, match)] → (error_code, message, entries) where
    entries are [(entity pairs, {key: value})], sorted."""
    problem = _validate_filter(components)
    if problem is not None:
        return ErrorCode.INVALID_REQUEST, problem, []
    wanted = {c[0] for c in components}
    out = []
    for ent, values in sorted(image.quotas.items(), key=lambda kv: repr(kv[0])):
        if not values:
            continue
        as_dict = dict(ent)
        if strict and set(as_dict) != wanted:
            continue
        if all(_component_matches(as_dict, *c) for c in components):
            out.append((ent, dict(sorted(values.items()))))
    return ErrorCode.NONE, None, out
