"""ACL authorization with the semantics of Kafka's StandardAuthorizer (KIP-801), pure.

A request is (principal, host, operation, resource type, resource name). The decision:

1. `super.users` (and the configured inter-node user) are allowed everything.
2. The ACLs *matching the resource* are those of the same resource type whose pattern is the
   literal name, the literal wildcard `*`, or a prefix of the name (PREFIXED).
   If there are none, the answer is `allow.everyone.if.no.acl.found` (default false).
3. Among matching ACLs that apply to the principal (exact or `User:*`) and host (exact or `*`):
   any DENY for the operation or ALL ⇒ denied (deny wins over allow, whatever the pattern);
   otherwise any ALLOW for the operation, ALL, or an operation implying it ⇒ allowed.
   Kafka's implications: Read, Write, Delete or Alter imply Describe; AlterConfigs implies
   DescribeConfigs. Deny is never implied (a DENY Read does not deny Describe).
4. Otherwise denied.

The `Authorizer` is rebuilt from each metadata image (ACL records), so ACL changes apply as soon
as the broker replays them: one metadata round trip.
"""

from __future__ import annotations

from typing import Iterable

from common.acl import AclBinding
from common.principal import ANONYMOUS, parse_principal_list  # noqa: F401 - re-exported

# org.apache.kafka.common.resource.ResourceType
TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID, DELEGATION_TOKEN, USER = 2, 3, 4, 5, 6, 7
RESOURCE_NAMES = {"topic": TOPIC, "group": GROUP, "cluster": CLUSTER,
                  "transactional_id": TRANSACTIONAL_ID, "transactionalid": TRANSACTIONAL_ID,
                  "delegation_token": DELEGATION_TOKEN, "user": USER}
CLUSTER_NAME = "kafka-cluster"
# org.apache.kafka.common.resource.PatternType
LITERAL, PREFIXED = 3, 4
PATTERN_NAMES = {"literal": LITERAL, "prefixed": PREFIXED}
# org.apache.kafka.common.acl.AclOperation
ALL, READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = 2, 3, 4, 5, 6, 7, 8
CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = 9, 10, 11, 12
CREATE_TOKENS, DESCRIBE_TOKENS = 13, 14
OPERATION_NAMES = {"all": ALL, "read": READ, "write": WRITE, "create": CREATE, "delete": DELETE,
                   "alter": ALTER, "describe": DESCRIBE, "clusteraction": CLUSTER_ACTION,
                   "describeconfigs": DESCRIBE_CONFIGS, "alterconfigs": ALTER_CONFIGS,
                   "idempotentwrite": IDEMPOTENT_WRITE, "createtokens": CREATE_TOKENS,
                   "describetokens": DESCRIBE_TOKENS}
# org.apache.kafka.common.acl.AclPermissionType
DENY, ALLOW = 2, 3
WILDCARD = "*"

# an ALLOW for the key grants these operations too
_IMPLIED_BY = {DESCRIBE: (READ, WRITE, DELETE, ALTER), DESCRIBE_CONFIGS: (ALTER_CONFIGS,)}


# the one ACL shape (common/acl.py), under the authorizer's historical name
Acl = AclBinding


def matches_resource(acl: Acl, resource_type: int, name: str) -> bool:
    if acl.resource_type != resource_type:
        return False
    if acl.pattern_type == LITERAL:
        return acl.resource_name == name or acl.resource_name == WILDCARD
    if acl.pattern_type == PREFIXED:
        return name.startswith(acl.resource_name)
    return False


def applies_to(acl: Acl, principal: str, host: str) -> bool:
    return (acl.principal in (principal, "User:*")) and acl.host in (host, WILDCARD)


def _grants(acl_op: int, op: int) -> bool:
    return acl_op == op or acl_op == ALL or acl_op in _IMPLIED_BY.get(op, ())


class Authorizer:
    """Decisions over one immutable set of ACLs."""

    def __init__(self, acls: Iterable, super_users: Iterable[str] = (),
                 allow_everyone_if_no_acl_found: bool = False):
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_everyone_if_no_acl_found
        self._by_type: dict[int, list[Acl]] = {}
        for a in acls:
            acl = a if isinstance(a, Acl) else Acl(a.resource_type, a.resource_name,
                                                    a.pattern_type, a.principal, a.host,
                                                    a.operation, a.permission_type)
            self._by_type.setdefault(acl.resource_type, []).append(acl)

    @classmethod
    def from_image(cls, image, super_users=(), allow_everyone_if_no_acl_found=False):
        return cls(image.acls.values(), super_users, allow_everyone_if_no_acl_found)

    def authorize(self, principal: str, host: str, operation: int, resource_type: int,
                  name: str) -> bool:
        if principal in self.super_users:
            return True
        matching = [a for a in self._by_type.get(resource_type, ())
                    if matches_resource(a, resource_type, name)]
        if not matching:
            return self.allow_if_no_acl
        mine = [a for a in matching if applies_to(a, principal, host)]
        if any(a.permission_type == DENY and a.operation in (operation, ALL) for a in mine):
            return False
        return any(a.permission_type == ALLOW and _grants(a.operation, operation) for a in mine)

    def authorize_any(self, principal: str, host: str, operation: int,
                      resource_type: int) -> bool:
        """May the principal perform `operation` on *some* resource of this type? (Kafka's
        authorizeByResourceType, used e.g. for idempotent producers without IdempotentWrite:
        Write on any topic will do.) A wildcard or empty-prefix DENY shuts every resource."""
        if principal in self.super_users:
            return True
        mine = [a for a in self._by_type.get(resource_type, ()) if applies_to(a, principal, host)]
        if any(a.permission_type == DENY and a.operation in (operation, ALL)
               and (a.resource_name == WILDCARD or (a.pattern_type == PREFIXED
                                                    and a.resource_name == ""))
               for a in mine):
            return False
        if any(a.permission_type == ALLOW and _grants(a.operation, operation) for a in mine):
            return True
        return self.allow_if_no_acl and not self._by_type.get(resource_type)
