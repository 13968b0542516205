"""The authorizer's decision matrix (StandardAuthorizer semantics)."""

import pytest

from partition_server.security.authorizer import (ALL, ALLOW, ALTER, ALTER_CONFIGS, CLUSTER,
                                                  CLUSTER_ACTION, CREATE, DELETE, DENY, DESCRIBE,
                                                  DESCRIBE_CONFIGS, GROUP, IDEMPOTENT_WRITE,
                                                  LITERAL, PREFIXED, READ, TOPIC,
                                                  TRANSACTIONAL_ID, WRITE, Acl, Authorizer,
                                                  parse_principal_list)

ALICE, BOB = "User:alice", "User:bob"
H1, H2 = "10.0.0.1", "10.0.0.2"


def acl(principal, op, name="orders", rtype=TOPIC, pattern=LITERAL, perm=ALLOW, host="*"):
    return Acl(rtype, name, pattern, principal, host, op, perm)


def test_no_acls_default_denies_and_flag_allows():
    assert not Authorizer([]).authorize(ALICE, H1, READ, TOPIC, "orders")
    assert Authorizer([], allow_everyone_if_no_acl_found=True).authorize(ALICE, H1, READ, TOPIC, "x")
    # once any ACL names the resource, the flag no longer applies to it
    az = Authorizer([acl(BOB, READ)], allow_everyone_if_no_acl_found=True)
    assert not az.authorize(ALICE, H1, READ, TOPIC, "orders")
    assert az.authorize(ALICE, H1, READ, TOPIC, "other")


def test_literal_and_operation_exactness():
    az = Authorizer([acl(ALICE, READ)])
    assert az.authorize(ALICE, H1, READ, TOPIC, "orders")
    assert not az.authorize(ALICE, H1, WRITE, TOPIC, "orders")
    assert not az.authorize(ALICE, H1, READ, TOPIC, "orders2")
    assert not az.authorize(BOB, H1, READ, TOPIC, "orders")
    assert not az.authorize(ALICE, H1, READ, GROUP, "orders")        # type matters


@pytest.mark.parametrize("granted,implied", [(READ, DESCRIBE), (WRITE, DESCRIBE), (DELETE, DESCRIBE),
                                             (ALTER, DESCRIBE), (ALTER_CONFIGS, DESCRIBE_CONFIGS)])
def test_implied_operations(granted, implied):
    az = Authorizer([acl(ALICE, granted)])
    assert az.authorize(ALICE, H1, implied, TOPIC, "orders")
    # implication is one way
    assert not Authorizer([acl(ALICE, implied)]).authorize(ALICE, H1, granted, TOPIC, "orders")


def test_all_grants_everything_and_deny_is_never_implied():
    az = Authorizer([acl(ALICE, ALL)])
    for op in (READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS):
        assert az.authorize(ALICE, H1, op, TOPIC, "orders")
    az = Authorizer([acl(ALICE, ALL), acl(ALICE, READ, perm=DENY)])
    assert not az.authorize(ALICE, H1, READ, TOPIC, "orders")
    assert az.authorize(ALICE, H1, DESCRIBE, TOPIC, "orders")        # DENY Read ≠ DENY Describe


def test_deny_wins_across_patterns_and_wildcards():
    az = Authorizer([acl(ALICE, READ), acl("User:*", READ, perm=DENY, name="ord", pattern=PREFIXED)])
    assert not az.authorize(ALICE, H1, READ, TOPIC, "orders")
    az = Authorizer([acl(ALICE, ALL, name="*"), acl(ALICE, ALL, perm=DENY)])
    assert not az.authorize(ALICE, H1, WRITE, TOPIC, "orders")
    assert az.authorize(ALICE, H1, WRITE, TOPIC, "payments")


def test_prefixed_and_wildcard():
    az = Authorizer([acl(ALICE, WRITE, name="app-", pattern=PREFIXED), acl(BOB, READ, name="*")])
    assert az.authorize(ALICE, H1, WRITE, TOPIC, "app-events")
    assert az.authorize(ALICE, H1, WRITE, TOPIC, "app-")
    assert not az.authorize(ALICE, H1, WRITE, TOPIC, "ap")
    assert not az.authorize(ALICE, H1, WRITE, TOPIC, "other-app-events")
    assert az.authorize(BOB, H1, READ, TOPIC, "anything")
    assert not az.authorize(BOB, H1, WRITE, TOPIC, "anything")
    # a literal "*" on a prefixed pattern is just the prefix "*", not a wildcard
    az = Authorizer([acl(ALICE, READ, name="*", pattern=PREFIXED)])
    assert not az.authorize(ALICE, H1, READ, TOPIC, "orders")


def test_wildcard_principal_and_hosts():
    az = Authorizer([acl("User:*", READ, host=H1)])
    assert az.authorize(ALICE, H1, READ, TOPIC, "orders")
    assert not az.authorize(ALICE, H2, READ, TOPIC, "orders")
    az = Authorizer([acl(ALICE, READ), acl(ALICE, READ, perm=DENY, host=H2)])
    assert az.authorize(ALICE, H1, READ, TOPIC, "orders")
    assert not az.authorize(ALICE, H2, READ, TOPIC, "orders")


def test_super_users_bypass_everything():
    az = Authorizer([acl("User:admin", ALL, perm=DENY, name="*")], super_users=["User:admin"])
    assert az.authorize("User:admin", H1, ALL, TOPIC, "x")
    assert az.authorize("User:admin", H1, CLUSTER_ACTION, CLUSTER, "kafka-cluster")
    assert parse_principal_list("User:a; User:b,c ;") == ["User:a", "User:b,c"]


def test_group_cluster_transactional_id():
    az = Authorizer([acl(ALICE, READ, name="g1", rtype=GROUP),
                     acl(ALICE, IDEMPOTENT_WRITE, name="kafka-cluster", rtype=CLUSTER),
                     acl(ALICE, WRITE, name="tx-", rtype=TRANSACTIONAL_ID, pattern=PREFIXED)])
    assert az.authorize(ALICE, H1, READ, GROUP, "g1")
    assert not az.authorize(ALICE, H1, READ, GROUP, "g2")
    assert az.authorize(ALICE, H1, IDEMPOTENT_WRITE, CLUSTER, "kafka-cluster")
    assert not az.authorize(ALICE, H1, ALTER, CLUSTER, "kafka-cluster")
    assert az.authorize(ALICE, H1, DESCRIBE, TRANSACTIONAL_ID, "tx-1")


def test_authorize_any():
    az = Authorizer([acl(ALICE, WRITE, name="app-", pattern=PREFIXED)])
    assert az.authorize_any(ALICE, H1, WRITE, TOPIC)
    assert not az.authorize_any(BOB, H1, WRITE, TOPIC)
    az = Authorizer([acl(ALICE, WRITE), acl(ALICE, WRITE, name="*", perm=DENY)])
    assert not az.authorize_any(ALICE, H1, WRITE, TOPIC)
