"""ACLs (Kafka's AclControlManager, KIP-500/KIP-631 AccessControlEntryRecord).

States per ACL binding: absent ──CreateAcls──▶ present ──DeleteAcls (matching filter)──▶ absent.
An ACL's id is derived from its contents (uuid5), so creating the same binding twice is
idempotent, as in Kafka, and the command needs no random source. Commands are pure: they return
records plus per-item results; `replay` of the committed records changes the image.
"""

from __future__ import annotations

import dataclasses
import uuid

from common.acl import AclBinding, AclBindingFilter
from metadata_quorum import records as r
from metadata_quorum.image import MetadataImage
from wire.errors import ErrorCode

# Kafka's enum codes (org.apache.kafka.common.acl / resource)
RESOURCE_ANY, RESOURCE_TOPIC, RESOURCE_GROUP, RESOURCE_CLUSTER = 1, 2, 3, 4
RESOURCE_TRANSACTIONAL_ID, RESOURCE_DELEGATION_TOKEN, RESOURCE_USER = 5, 6, 7
PATTERN_ANY, PATTERN_MATCH, PATTERN_LITERAL, PATTERN_PREFIXED = 1, 2, 3, 4
OPERATION_ANY = 1
OPERATIONS = range(2, 15)          # ALL .. CREATE_TOKENS
PERMISSION_ANY, PERMISSION_DENY, PERMISSION_ALLOW = 1, 2, 3
_NAMESPACE = uuid.UUID("6b3f5b0e-4f43-4c64-9a53-1d1b7c1a0a11")


# the one ACL shape (common/acl.py); the controller's historical name for the filter
AclFilter = AclBindingFilter


@dataclasses.dataclass
class AclResult:
    error: ErrorCode = ErrorCode.NONE
    message: str | None = None
    matches: list = dataclasses.field(default_factory=list)   # AclBinding (delete/describe)


def acl_id(b: AclBinding) -> uuid.UUID:
    return uuid.uuid5(_NAMESPACE, repr(b.as_tuple()))


def _validate(b: AclBinding) -> str | None:
    if b.resource_type not in range(2, 8):
        return f"invalid resource type {b.resource_type}"
    if b.pattern_type not in (PATTERN_LITERAL, PATTERN_PREFIXED):
        return "pattern type must be LITERAL or PREFIXED"
    if not b.resource_name:
        return "empty resource name"
    if b.operation not in OPERATIONS:
        return f"invalid operation {b.operation}"
    if b.permission_type not in (PERMISSION_DENY, PERMISSION_ALLOW):
        return f"invalid permission type {b.permission_type}"
    if ":" not in b.principal:
        return f"principal {b.principal!r} is not TYPE:NAME"
    if b.resource_type == RESOURCE_CLUSTER and b.resource_name != "kafka-cluster":
        return "cluster resource name must be kafka-cluster"
    return None


def create_acls(image: MetadataImage, bindings: list[AclBinding]):
    records, results, seen = [], [], set()
    for b in bindings:
        problem = _validate(b)
        if problem:
            results.append(AclResult(ErrorCode.INVALID_REQUEST, problem))
            continue
        aid = acl_id(b)
        results.append(AclResult())
        if aid not in image.acls and aid not in seen:      # existing binding: idempotent success
            seen.add(aid)
            records.append(r.AccessControlEntryRecord(aid, *dataclasses.astuple(b)))
    return records, results


def _name_matches(f: AclFilter, rec) -> bool:
    if f.resource_name is None:
        return True
    if f.pattern_type == PATTERN_MATCH:
        if rec.pattern_type == PATTERN_LITERAL:
            return rec.resource_name in (f.resource_name, "*")
        return f.resource_name.startswith(rec.resource_name)
    return rec.resource_name == f.resource_name


def matches(f: AclFilter, rec) -> bool:
    return ((f.resource_type == RESOURCE_ANY or f.resource_type == rec.resource_type)
            and (f.pattern_type in (PATTERN_ANY, PATTERN_MATCH) or f.pattern_type == rec.pattern_type)
            and _name_matches(f, rec)
            and f.principal in (None, rec.principal) and f.host in (None, rec.host)
            and f.operation in (OPERATION_ANY, rec.operation)
            and f.permission_type in (PERMISSION_ANY, rec.permission_type))


def _binding(rec) -> AclBinding:
    return AclBinding(rec.resource_type, rec.resource_name, rec.pattern_type, rec.principal,
                      rec.host, rec.operation, rec.permission_type)


def describe_acls(image: MetadataImage, f: AclFilter) -> AclResult:
    found = [_binding(a) for _, a in sorted(image.acls.items()) if matches(f, a)]
    return AclResult(matches=found)


def delete_acls(image: MetadataImage, filters: list[AclFilter]):
    records, results, removed = [], [], set()
    for f in filters:
        hit = [a for _, a in sorted(image.acls.items()) if matches(f, a)]
        for a in hit:
            if a.acl_id not in removed:
                removed.add(a.acl_id)
                records.append(r.RemoveAccessControlEntryRecord(a.acl_id))
        results.append(AclResult(matches=[_binding(a) for a in hit]))
    return records, results
