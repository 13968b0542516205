"""MetadataImage: replay never raises, structural sharing, snapshot round trip, query helpers."""

import uuid

from hypothesis import given, settings, strategies as st

from metadata_quorum import records as r
from metadata_quorum.image import MetadataImage
from metadata_quorum.testing import RecordLog

T1 = uuid.UUID(int=1)


def small_image():
    recs = [r.RegisterBrokerRecord(b, f"i{b}", 10 + b, "127.0.0.1", 9092 + b, f"r{b % 2}", fenced=False)
            for b in range(3)]
    recs += [r.TopicRecord("a", T1)]
    recs += [r.PartitionRecord(T1, p, (p % 3, (p + 1) % 3), (p % 3, (p + 1) % 3), p % 3)
             for p in range(6)]
    recs += [r.ConfigRecord(2, "a", "retention.ms", "1000")]
    return MetadataImage.from_records(recs, 0), recs


def test_queries():
    img, _ = small_image()
    assert [p.partition_id for _, p in img.partitions_led_by(1)] == [1, 4]
    assert img.partition("a", 2).leader == 2 and img.partition("a", 9) is None
    assert [b.broker_id for b in img.usable_brokers()] == [0, 1, 2]
    assert img.topic_config("a") == {"retention.ms": "1000"}
    assert img.topic_by_id(T1).name == "a"


def test_apply_shares_unchanged_parts_and_leaves_the_old_image_alone():
    img, _ = small_image()
    other = uuid.UUID(int=2)
    img = img.apply(50, r.TopicRecord("b", other))
    new = img.apply(51, r.PartitionChangeRecord(T1, 0, isr=(0,)))
    assert img.partition("a", 0).isr == (0, 1) and new.partition("a", 0).isr == (0,)
    assert new.partition("a", 0).partition_epoch == img.partition("a", 0).partition_epoch + 1
    assert new.brokers is img.brokers and new.configs is img.configs
    assert new.topics["b"] is img.topics["b"]
    assert new.topics["a"].partitions[3] is img.topics["a"].partitions[3]
    assert new.offset == 51 and img.offset == 50


def test_invalid_records_for_the_image_are_skipped_not_raised():
    img, _ = small_image()
    bad = [r.PartitionChangeRecord(uuid.UUID(int=99), 0, leader=1),
           r.PartitionRecord(uuid.UUID(int=99), 0, (1,), (1,), 1),
           r.FenceBrokerRecord(7, 1), r.UnfenceBrokerRecord(0, 999),
           r.RemoveTopicRecord(uuid.UUID(int=5)), r.RemoveAccessControlEntryRecord(uuid.UUID(int=5)),
           r.TopicRecord("a", uuid.UUID(int=8)), "not a record", None]
    out = img
    for i, rec in enumerate(bad):
        out = out.apply(100 + i, rec)
    assert out.skipped == img.skipped + len(bad)
    assert out.offset == 100 + len(bad) - 1
    assert out.topics == img.topics and out.brokers == img.brokers


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(sorted(r.RECORD_TYPES.values(), key=lambda c: c.TYPE)), max_size=12),
       st.integers(0, 3))
def test_replay_of_wrongly_typed_records_never_raises(types, value):
    img, _ = small_image()
    for i, cls in enumerate(types):
        try:
            rec = cls(*([value] * len(cls.__dataclass_fields__)))
        except TypeError:
            continue
        img = img.apply(i, rec)          # must not raise, whatever the field types are


def test_snapshot_round_trip_after_a_busy_log():
    log = RecordLog()
    c = log.controller
    for b in range(3):
        e = log.run(c.register_broker(b, f"i{b}", "127.0.0.1", 1, None, 0)).broker_epoch
        log.run(c.broker_heartbeat(b, e, len(log.entries), False, False, 0))
    log.run(c.create_topics([{"name": f"t{i}", "num_partitions": 3, "replication_factor": 2,
                              "configs": {"cleanup.policy": "compact"}} for i in range(5)]))
    log.run(c.delete_topics(["t2"]))
    log.run(c.allocate_producer_ids(0, c.image.brokers[0].broker_epoch))
    snap = [r.decode_record(r.encode_record(x)) for x in c.image.to_records()]
    rebuilt = MetadataImage.from_records(snap, c.image.offset)
    assert rebuilt.same_state(c.image)
    assert rebuilt.to_records() == snap
    assert len(snap) < len(log.entries)


def test_reassignment_and_recovery_fields_replay_and_snapshot():
    img, _ = small_image()
    img = img.apply(60, r.PartitionChangeRecord(T1, 0, replicas=(0, 1, 2), adding_replicas=(2,),
                                                leader_recovery_state=1))
    p = img.partition("a", 0)
    assert (p.replicas, p.adding_replicas, p.removing_replicas, p.leader_recovery_state) == \
        ((0, 1, 2), (2,), (), 1)
    img = img.apply(61, r.PartitionChangeRecord(T1, 0, isr=(0,)))
    assert img.partition("a", 0).adding_replicas == (2,)          # unchanged fields carried
    snap = [r.decode_record(r.encode_record(x)) for x in img.to_records()]
    assert MetadataImage.from_records(snap, 61).same_state(img)


def test_broker_listeners_replay_and_snapshot():
    log = RecordLog()
    lst = (("PLAINTEXT", "127.0.0.1", 9092, 0), ("SSL", "127.0.0.1", 9093, 1))
    log.run(log.controller.register_broker(1, "i", "127.0.0.1", 9092, "r1", 0, listeners=lst))
    assert log.image.brokers[1].listeners == lst and log.image.brokers[1].rack == "r1"
    assert log.replay_all().image.same_state(log.image)
    snap = [r.decode_record(r.encode_record(x)) for x in log.image.to_records()]
    assert MetadataImage.from_records(snap, 0).brokers[1].listeners == lst
