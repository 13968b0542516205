"""ACLs, SCRAM credentials, features, unregister and controlled shutdown:
command → response → replay → state, and each command alone changes nothing."""

from metadata_quorum.controller import acl_control as acl
from metadata_quorum.controller import feature_control as fc
from metadata_quorum.testing import FakeClock, RecordLog
from wire.errors import ErrorCode


def binding(name="t", op=3, perm=acl.PERMISSION_ALLOW, pattern=acl.PATTERN_LITERAL, user="User:alice"):
    return acl.AclBinding(acl.RESOURCE_TOPIC, name, pattern, user, "*", op, perm)


def test_create_describe_delete_acls_with_filters():
    log = RecordLog()
    c = log.controller
    res = log.run_pure(lambda: c.create_acls([binding("orders"), binding("ord", pattern=acl.PATTERN_PREFIXED),
                                              binding("x", op=99), binding("orders")]))
    assert [x.error for x in res] == [ErrorCode.NONE, ErrorCode.NONE, ErrorCode.INVALID_REQUEST,
                                      ErrorCode.NONE]
    assert len(log.image.acls) == 2                       # duplicate binding is idempotent
    assert log.run_pure(lambda: c.create_acls([binding("orders")]))[0].error == ErrorCode.NONE
    assert len(log.image.acls) == 2
    match = c.describe_acls(acl.AclFilter(resource_name="orders", pattern_type=acl.PATTERN_MATCH))
    assert {b.resource_name for b in match.matches} == {"orders", "ord"}
    exact = c.describe_acls(acl.AclFilter(resource_name="orders"))
    assert [b.resource_name for b in exact.matches] == ["orders"]
    assert c.describe_acls(acl.AclFilter(principal="User:bob")).matches == []
    res = log.run_pure(lambda: c.delete_acls([acl.AclFilter(pattern_type=acl.PATTERN_PREFIXED),
                                              acl.AclFilter(principal="User:bob")]))
    assert [len(x.matches) for x in res] == [1, 0]
    assert [a.resource_name for a in log.image.acls.values()] == ["orders"]
    assert log.replay_all().image.same_state(log.image)


def test_scram_stores_only_salted_keys_and_validates():
    log = RecordLog()
    c = log.controller
    up = fc.ScramUpsertion("alice", fc.SCRAM_SHA_256, 4096, b"salt", b"salted-pw")
    res = log.run_pure(lambda: c.alter_user_scram_credentials([], [up]))
    assert res == {"alice": (ErrorCode.NONE, None)}
    rec = log.image.scram[("alice", fc.SCRAM_SHA_256)]
    assert (rec.stored_key, rec.server_key) == fc.scram_keys(fc.SCRAM_SHA_256, b"salted-pw")
    assert rec.salt == b"salt" and rec.iterations == 4096
    assert b"salted-pw" not in b"".join(log.entries)
    bad = log.run_pure(lambda: c.alter_user_scram_credentials(
        [("bob", fc.SCRAM_SHA_256), ("carol", 9)],
        [fc.ScramUpsertion("dave", fc.SCRAM_SHA_512, 10, b"s", b"p"),
         fc.ScramUpsertion("erin", fc.SCRAM_SHA_512, 5000, b"", b"p")]))
    assert bad == {"bob": (ErrorCode.RESOURCE_NOT_FOUND, "no such credential"),
                   "carol": (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "mechanism 9"),
                   "dave": (ErrorCode.UNACCEPTABLE_CREDENTIAL, "iterations must be in [4096, 16384]"),
                   "erin": (ErrorCode.UNACCEPTABLE_CREDENTIAL, "empty user, salt or password")}
    dup = c.alter_user_scram_credentials([("alice", fc.SCRAM_SHA_256)], [up])
    assert dup[0] == [] and dup[1]["alice"][0] == ErrorCode.DUPLICATE_RESOURCE
    log.run_pure(lambda: c.alter_user_scram_credentials([("alice", fc.SCRAM_SHA_256)], []))
    assert log.image.scram == {}


def test_update_features_upgrade_downgrade_and_all_or_nothing():
    log = RecordLog()
    c = log.controller
    res = log.run_pure(lambda: c.update_features([fc.FeatureUpdate("metadata.version", 7)]))
    assert res == [("metadata.version", ErrorCode.NONE, None)]
    assert log.image.features == {"metadata.version": 7}
    res = log.run_pure(lambda: c.update_features([fc.FeatureUpdate("metadata.version", 3),
                                                  fc.FeatureUpdate("group.version", 1)]))
    assert res[0][1] == ErrorCode.INVALID_UPDATE_VERSION
    assert log.image.features == {"metadata.version": 7}      # nothing applied
    for bad in (fc.FeatureUpdate("nope", 1), fc.FeatureUpdate("metadata.version", 99)):
        assert c.update_features([bad])[1][0][1] == ErrorCode.INVALID_UPDATE_VERSION
    log.run_pure(lambda: c.update_features([fc.FeatureUpdate("metadata.version", 3, fc.SAFE_DOWNGRADE)]))
    assert log.image.features == {"metadata.version": 3}
    assert c.update_features([fc.FeatureUpdate("group.version", 1)], validate_only=True)[0] == []


def _cluster(n=3, rf=3):
    log, clock = RecordLog(session_timeout_ms=3000), FakeClock()
    c = log.controller
    epochs = {}
    for b in range(n):
        res = log.run_pure(lambda: c.register_broker(b, f"inc{b}", "127.0.0.1", 9092, None, 0))
        epochs[b] = res.broker_epoch
        log.run_pure(lambda: c.broker_heartbeat(b, epochs[b], len(log.entries), False, False, 0))
    log.run_pure(lambda: c.create_topics([{"name": "t", "num_partitions": 3,
                                           "replication_factor": rf}]))
    return log, clock, epochs


def test_controlled_shutdown_moves_leaders_then_allows_shutdown():
    log, clock, epochs = _cluster()
    c = log.controller
    assert any(True for _ in log.image.partitions_led_by(0))
    hb = log.run_pure(lambda: c.controlled_shutdown(0, epochs[0], 10))
    assert not any(True for _ in log.image.partitions_led_by(0))
    assert log.image.brokers[0].in_controlled_shutdown
    hb = log.run_pure(lambda: c.controlled_shutdown(0, epochs[0], 20))
    assert hb.should_shut_down


def test_unregister_broker_moves_leadership_and_removes_it():
    log, clock, epochs = _cluster()
    c = log.controller
    assert c.unregister_broker(7) == ([], ErrorCode.BROKER_ID_NOT_REGISTERED)
    assert log.run_pure(lambda: c.unregister_broker(1)) == ErrorCode.NONE
    assert 1 not in log.image.brokers
    for t in log.image.topics.values():
        for p in t.partitions.values():
            assert p.leader != 1 and 1 not in p.isr and p.leader in p.isr
    hb = c.broker_heartbeat(1, epochs[1], 0, False, False, 30)[1]
    assert hb.error == ErrorCode.BROKER_ID_NOT_REGISTERED


def test_commands_return_controller_result():
    from metadata_quorum.controller.quorum_controller import ControllerResult
    log, _, epochs = _cluster()
    res = log.controller.create_topics([{"name": "z"}])
    assert isinstance(res, ControllerResult) and res.records and res.response[0].error == ErrorCode.NONE
    assert isinstance(log.controller.unregister_broker(0), ControllerResult)
