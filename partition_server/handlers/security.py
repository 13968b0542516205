"""DescribeAcls and DescribeUserScramCredentials, answered from the broker's metadata image
(every broker replays the same ACL and SCRAM records the controllers commit).

DescribeAcls: INVALID_REQUEST for a filter that names no valid resource/pattern type.
DescribeUserScramCredentials: RESOURCE_NOT_FOUND for a named user without credentials,
DUPLICATE_RESOURCE for a user named twice; only mechanism and iterations are ever returned.
"""

from __future__ import annotations

from metadata_quorum.controller.acl_control import AclFilter, describe_acls
from partition_server.handlers.context import HandlerContext
from wire.errors import ErrorCode
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import RESPONSES


async def handle_describe_acls(hctx: HandlerContext, req):
    cls = RESPONSES[ApiKey.DESCRIBE_ACLS]
    b = req.body
    if b.resource_type_filter < 1 or b.pattern_type_filter < 1 or b.operation < 1 \
            or b.permission_type < 1:
        return cls(error_code=ErrorCode.INVALID_REQUEST, error_message="invalid ACL filter")
    found = describe_acls(hctx.image, AclFilter(
        b.resource_type_filter, b.resource_name_filter, b.pattern_type_filter,
        b.principal_filter, b.host_filter, b.operation, b.permission_type)).matches
    by_resource: dict = {}
    for a in found:
        key = (a.resource_type, a.resource_name, a.pattern_type)
        by_resource.setdefault(key, []).append(cls.AclDescription(
            principal=a.principal, host=a.host, operation=a.operation,
            permission_type=a.permission_type))
    return cls(error_code=0, resources=[
        cls.DescribeAclsResource(resource_type=t, resource_name=n, pattern_type=p, acls=acls)
        for (t, n, p), acls in sorted(by_resource.items())])


async def handle_describe_user_scram_credentials(hctx: HandlerContext, req):
    cls = RESPONSES[ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS]
    creds: dict[str, list] = {}
    for (user, mechanism), rec in sorted(hctx.image.scram.items()):
        creds.setdefault(user, []).append(cls.CredentialInfo(mechanism=mechanism,
                                                             iterations=rec.iterations))
    if req.body.users is None or not req.body.users:
        return cls(error_code=0, results=[
            cls.DescribeUserScramCredentialsResult(user=u, credential_infos=infos)
            for u, infos in creds.items()])
    names = [u.name for u in req.body.users]
    results = []
    for name in dict.fromkeys(names):
        if names.count(name) > 1:
            results.append(cls.DescribeUserScramCredentialsResult(
                user=name, error_code=ErrorCode.DUPLICATE_RESOURCE,
                error_message="user named more than once"))
        elif name not in creds:
            results.append(cls.DescribeUserScramCredentialsResult(
                user=name, error_code=ErrorCode.RESOURCE_NOT_FOUND,
                error_message="no SCRAM credential for this user"))
        else:
            results.append(cls.DescribeUserScramCredentialsResult(user=name,
                                                                  credential_infos=creds[name]))
    return cls(error_code=0, results=results)
