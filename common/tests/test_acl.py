"""One ACL binding type for the admin client, the controller and the authorizer."""

import dataclasses
import uuid

from clients.admin import types as admin_types
from common.acl import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType,
                        PatternType, ResourceType)
from metadata_quorum.controller import acl_control
from partition_server.security import authorizer


def test_every_layer_uses_the_same_type():
    assert admin_types.AclBinding is acl_control.AclBinding is authorizer.Acl is AclBinding
    assert admin_types.AclBindingFilter is acl_control.AclFilter is AclBindingFilter


def test_enum_and_int_bindings_are_equal_and_share_an_acl_id():
    typed = AclBinding(ResourceType.TOPIC, "t", PatternType.LITERAL, "User:a", "*",
                       AclOperation.READ, AclPermissionType.ALLOW)
    plain = AclBinding(2, "t", 3, "User:a", "*", 3, 3)
    assert typed == plain and typed.permission == AclPermissionType.ALLOW
    assert acl_control.acl_id(typed) == acl_control.acl_id(plain)
    # the id is what it was before the shapes were merged (a uuid5 of the plain tuple)
    namespace = uuid.UUID("6b3f5b0e-4f43-4c64-9a53-1d1b7c1a0a11")
    assert acl_control.acl_id(plain) == uuid.uuid5(namespace, repr(dataclasses.astuple(plain)))
    assert plain.as_dict()["permission"] == "ALLOW" and plain.as_dict()["resource_type"] == "TOPIC"


def test_filter_defaults_match_anything():
    f = AclBindingFilter()
    assert (f.resource_type, f.pattern_type, f.operation, f.permission_type) == (1, 1, 1, 1)
