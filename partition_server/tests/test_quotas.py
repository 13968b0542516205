"""Client quotas, the pure parts: window math, throttle time, entity resolution (KIP-55 order),
and the controller's validation / records / describe filter (KIP-546)."""

from hypothesis import given, settings
from hypothesis import strategies as st

from metadata_quorum import records as r
from metadata_quorum.controller import quota_control as qc
from metadata_quorum.controller.quorum_controller import QuorumController
from metadata_quorum.image import MetadataImage
from partition_server.quotas import (CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE,
                                     QuotaManager, Rate, WindowConfig, entity, resolve,
                                     throttle_time_ms, user_of)
from wire.errors import ErrorCode

# -- window math ----------------------------------------------------------------------------------


def test_rate_uses_at_least_num_minus_one_windows():
    rate = Rate(WindowConfig(11, 1000))
    rate.record(1000, 0)
    assert rate.window_ms(0) == 10_000            # fresh: floor of 10 whole windows
    assert rate.measure(0) == 100.0
    rate.record(1000, 500)
    assert rate.measure(500) == 2000 / 10.5       # 500 ms elapsed + 10 padded windows


def test_rate_after_many_windows_is_total_over_elapsed():
    rate = Rate(WindowConfig(11, 1000))
    for t in range(0, 10_001, 1000):              # 11 samples, 100 each
        rate.record(100, t)
    assert len(rate.samples) == 11
    assert abs(rate.measure(10_500) - 1100 / 10.5) < 1e-9


def test_old_samples_expire():
    rate = Rate(WindowConfig(3, 1000))
    rate.record(3000, 0)
    assert rate.total(2999) == 3000
    assert rate.total(3000) == 0                  # older than num × size
    assert rate.measure(3000) == 0


def test_throttle_time_matches_kafka():
    assert throttle_time_ms(100.0, 50.0, 2000) == 2000   # Kafka's QuotaUtilsTest
    assert throttle_time_ms(50.0, 50.0, 2000) == 0
    assert throttle_time_ms(10.0, 50.0, 2000) == 0


def test_manager_throttles_once_over_and_unrecord_takes_back():
    qm = QuotaManager(WindowConfig(11, 1000))
    qm.update({entity(client_id="c"): {PRODUCER_BYTE_RATE: 100.0}})
    # a fresh client may burst (num-1) windows' worth: 1000 bytes at 100 B/s
    assert qm.record("User:ANONYMOUS", "c", PRODUCER_BYTE_RATE, 1000, 0) == 0
    t = qm.record("User:ANONYMOUS", "c", PRODUCER_BYTE_RATE, 1000, 0)
    assert t == 10_000                            # 200 B/s over a 100 B/s bound × 10 s
    qm.unrecord("User:ANONYMOUS", "c", PRODUCER_BYTE_RATE, 1000, 0)
    assert qm.record("User:ANONYMOUS", "c", PRODUCER_BYTE_RATE, 0, 0) == 0
    # other keys and other clients are not limited
    assert qm.record("User:ANONYMOUS", "c", CONSUMER_BYTE_RATE, 10**9, 0) == 0
    assert qm.record("User:ANONYMOUS", "d", PRODUCER_BYTE_RATE, 10**9, 0) == 0


def test_request_time_throttle_is_capped_at_one_window():
    qm = QuotaManager(WindowConfig(11, 1000))
    qm.update({entity(user=None): {REQUEST_PERCENTAGE: 1.0}})
    assert qm.record("User:a", "x", REQUEST_PERCENTAGE, 5000.0, 0, max_throttle_ms=1000) == 1000


def test_steady_producer_is_held_to_the_bound():
    """Simulate a producer that sends 10 KB whenever it is not throttled: over 60 s it gets
    the bound (plus the initial burst allowance)."""
    qm = QuotaManager(WindowConfig(11, 1000))
    bound = 100_000.0
    qm.update({entity(client_id="fast"): {PRODUCER_BYTE_RATE: bound}})
    now, sent = 0.0, 0
    while now < 60_000:
        throttle = qm.record("User:ANONYMOUS", "fast", PRODUCER_BYTE_RATE, 10_000, now)
        sent += 10_000
        now += max(throttle, 5)                   # 5 ms per request when unthrottled
    assert bound * 60 <= sent <= bound * 71       # 60 s at the bound + at most 10 s of burst


# -- resolution -----------------------------------------------------------------------------------

def test_resolution_order_kip_55():
    levels = [
        (entity("u", "c"), ("u", "c")),
        (entity("u", None), ("u", "c")),
        (entity("u"), ("u", "")),
        (entity(None, "c"), ("u", "c")),
        (entity(None, None), ("u", "c")),
        (entity(None), ("u", "")),
        (entity(client_id="c"), ("", "c")),
        (entity(client_id=None), ("", "c")),
    ]
    quotas = {ent: {PRODUCER_BYTE_RATE: float(i + 1)} for i, (ent, _) in enumerate(levels)}
    for i, (ent, bucket) in enumerate(levels):
        assert resolve(quotas, "u", "c", PRODUCER_BYTE_RATE) == (bucket, float(i + 1), ent)
        del quotas[ent]                            # the next level shows through
    assert resolve(quotas, "u", "c", PRODUCER_BYTE_RATE) is None


def test_resolution_is_per_key_and_names_matter():
    quotas = {entity("u"): {PRODUCER_BYTE_RATE: 1.0},
              entity(client_id="c"): {CONSUMER_BYTE_RATE: 2.0}}
    assert resolve(quotas, "u", "c", CONSUMER_BYTE_RATE)[1] == 2.0
    assert resolve(quotas, "v", "c", PRODUCER_BYTE_RATE) is None
    assert resolve(quotas, "u", "d", CONSUMER_BYTE_RATE) is None
    assert user_of("User:alice") == "alice"


def test_shared_bucket_for_a_user_quota():
    qm = QuotaManager(WindowConfig(2, 1000))
    qm.update({entity("u"): {PRODUCER_BYTE_RATE: 100.0}})
    qm.record("User:u", "a", PRODUCER_BYTE_RATE, 100, 0)
    # a second client id of the same user shares the bucket: now over
    assert qm.record("User:u", "b", PRODUCER_BYTE_RATE, 100, 0) > 0
    # a default-user quota gives each user a bucket of its own
    qm2 = QuotaManager(WindowConfig(2, 1000))
    qm2.update({entity(None): {PRODUCER_BYTE_RATE: 100.0}})
    qm2.record("User:u", "a", PRODUCER_BYTE_RATE, 100, 0)
    assert qm2.record("User:v", "a", PRODUCER_BYTE_RATE, 100, 0) == 0


# -- controller: validation, records, describe -----------------------------------------------------

def _apply(controller: QuorumController, records):
    for rec in records:
        controller.replay(controller.image.offset + 1, rec)


def test_alter_sets_removes_and_validate_only():
    c = QuorumController()
    ent = (("client-id", "c1"),)
    records, results = c.alter_client_quotas([(ent, [(PRODUCER_BYTE_RATE, 1024.0, False)])],
                                             validate_only=True)
    assert records == [] and results == [(ErrorCode.NONE, None)]
    records, results = c.alter_client_quotas([(ent, [(PRODUCER_BYTE_RATE, 1024.0, False),
                                                     (REQUEST_PERCENTAGE, 12.5, False)])])
    assert results == [(ErrorCode.NONE, None)]
    assert records == [r.ClientQuotaRecord(ent, PRODUCER_BYTE_RATE, 1024.0),
                       r.ClientQuotaRecord(ent, REQUEST_PERCENTAGE, 12.5)]
    _apply(c, records)
    assert c.image.quotas[ent] == {PRODUCER_BYTE_RATE: 1024.0, REQUEST_PERCENTAGE: 12.5}
    records, _ = c.alter_client_quotas([(ent, [(PRODUCER_BYTE_RATE, 0, True),
                                               (REQUEST_PERCENTAGE, 0, True)])])
    _apply(c, records)
    assert ent not in c.image.quotas              # last key gone: entity gone
    # removing what is not there writes nothing and succeeds
    records, results = c.alter_client_quotas([(ent, [(PRODUCER_BYTE_RATE, 0, True)])])
    assert records == [] and results == [(ErrorCode.NONE, None)]


def test_alter_refuses_bad_entities_keys_and_values():
    c = QuorumController()
    bad = [
        ((), [(PRODUCER_BYTE_RATE, 1.0, False)], "empty"),
        ((("user", "a"), ("user", "b")), [(PRODUCER_BYTE_RATE, 1.0, False)], "more than once"),
        ((("ip", "1.2.3.4"),), [("connection_creation_rate", 1.0, False)], "ip quotas"),
        ((("group", "g"),), [(PRODUCER_BYTE_RATE, 1.0, False)], "entity type"),
        ((("user", "a"),), [("producer_bytes_rate", 1.0, False)], "unknown quota key"),
        ((("user", "a"),), [("controller_mutation_rate", 1.0, False)], "not supported"),
        ((("user", "a"),), [(PRODUCER_BYTE_RATE, 1.5, False)], "whole number"),
        ((("user", "a"),), [(CONSUMER_BYTE_RATE, -5.0, False)], "positive"),
        ((("user", "a"),), [(REQUEST_PERCENTAGE, 0.0, False)], "positive"),
        ((("user", "a"),), [(REQUEST_PERCENTAGE, float("nan"), False)], "finite"),
        ((("user", "a"),), [(PRODUCER_BYTE_RATE, 1.0, False), (PRODUCER_BYTE_RATE, 2.0, False)],
         "more than once"),
        ((("user", ""),), [(PRODUCER_BYTE_RATE, 1.0, False)], "empty user"),
    ]
    records, results = c.alter_client_quotas([(e, ops) for e, ops, _ in bad])
    assert records == []
    for (code, message), (_, _, expect) in zip(results, bad):
        assert code == ErrorCode.INVALID_REQUEST and expect in message, message


def test_one_bad_entry_does_not_stop_the_others():
    c = QuorumController()
    records, results = c.alter_client_quotas([
        ((("user", "a"),), [(PRODUCER_BYTE_RATE, -1.0, False)]),
        ((("user", "b"),), [(PRODUCER_BYTE_RATE, 10.0, False)])])
    assert [code for code, _ in results] == [ErrorCode.INVALID_REQUEST, ErrorCode.NONE]
    assert records == [r.ClientQuotaRecord((("user", "b"),), PRODUCER_BYTE_RATE, 10.0)]


def _image_with(*entities) -> MetadataImage:
    img = MetadataImage()
    for i, ent in enumerate(entities):
        img = img.apply(i, r.ClientQuotaRecord(ent, PRODUCER_BYTE_RATE, float(i + 1)))
    return img


def test_describe_filters_strict_and_not():
    ua, ud = (("user", "a"),), (("user", None),)
    uac = (("client-id", "c"), ("user", "a"))
    cc, cd = (("client-id", "c"),), (("client-id", None),)
    img = _image_with(ua, ud, uac, cc, cd)

    def names(components, strict=False):
        code, msg, entries = qc.describe_client_quotas(img, components, strict)
        assert code == ErrorCode.NONE, msg
        return {ent for ent, _ in entries}

    assert names([]) == {ua, ud, uac, cc, cd}
    assert names([], strict=True) == set()
    assert names([("user", qc.MATCH_EXACT, "a")]) == {ua, uac}
    assert names([("user", qc.MATCH_EXACT, "a")], strict=True) == {ua}
    assert names([("user", qc.MATCH_DEFAULT, None)]) == {ud}
    assert names([("user", qc.MATCH_SPECIFIED, None)]) == {ua, uac}
    assert names([("client-id", qc.MATCH_SPECIFIED, None)], strict=True) == {cc}
    assert names([("client-id", qc.MATCH_EXACT, "c"), ("user", qc.MATCH_SPECIFIED, None)]) == {uac}
    for bad in ([("user", 0, None)], [("ip", 1, None)], [("user", 1, None), ("user", 2, None)],
                [("user", 7, None)], [("topic", 2, None)]):
        code, msg, _ = qc.describe_client_quotas(img, bad, False)
        assert code == ErrorCode.INVALID_REQUEST and msg


def test_quota_records_round_trip_and_snapshot():
    ent = (("client-id", None), ("user", "a"))
    rec = r.ClientQuotaRecord(ent, CONSUMER_BYTE_RATE, 2048.0)
    assert r.decode_record(r.encode_record(rec)) == rec
    img = MetadataImage().apply(0, rec)
    again = MetadataImage.from_records(img.to_records(), img.offset)
    assert again.quotas == {ent: {CONSUMER_BYTE_RATE: 2048.0}}


def test_idle_meters_expire():
    qm = QuotaManager(WindowConfig(11, 1000))
    qm.update({entity(client_id=None): {PRODUCER_BYTE_RATE: 100.0}})
    for i in range(100):
        qm.record("User:ANONYMOUS", f"c{i}", PRODUCER_BYTE_RATE, 10, 1000)
    assert len(qm.rates) == 100
    later = 1000 + QuotaManager.IDLE_EXPIRY_MS + 1
    qm.record("User:ANONYMOUS", "late", PRODUCER_BYTE_RATE, 10, later)
    assert list(qm.rates) == [(PRODUCER_BYTE_RATE, ("", "late"))]


# -- anything a client can send is answered, never raised ------------------------------------------

_types = st.sampled_from(["user", "client-id", "ip", "", "group"]) | st.text(max_size=5)
_names = st.none() | st.text(max_size=5)
_keys = st.sampled_from(["producer_byte_rate", "consumer_byte_rate", "request_percentage",
                         "controller_mutation_rate", ""]) | st.text(max_size=8)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.lists(st.tuples(_types, _names), max_size=3),
                          st.lists(st.tuples(_keys, st.floats(allow_nan=True), st.booleans()),
                                   max_size=3)), max_size=4),
       st.lists(st.tuples(_types, st.integers(-2, 4), _names), max_size=3), st.booleans())
def test_alter_and_describe_never_raise(entries, components, strict):
    c = QuorumController()
    records, results = c.alter_client_quotas([(tuple(e), ops) for e, ops in entries])
    assert len(results) == len(entries)
    _apply(c, records)
    for ent, values in c.image.quotas.items():
        assert values and all(v > 0 for v in values.values())
    code, message, found = qc.describe_client_quotas(c.image, components, strict)
    assert code in (ErrorCode.NONE, ErrorCode.INVALID_REQUEST)
    assert (code == ErrorCode.NONE) == (message is None)
