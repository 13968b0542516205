"""Controlled shutdown ends fenced (Kafka's SHUTDOWN_NOW): a broker told to shut down is fenced
at once, so its next process registers at once. With its session left alive, every broker of a
full cluster restart was refused DUPLICATE_BROKER_REGISTRATION for a whole session timeout."""

import uuid

from metadata_quorum import records as r
from metadata_quorum.controller.cluster_control import (HeartbeatTracker, broker_heartbeat,
                                                        register_broker)
from metadata_quorum.image import MetadataImage
from wire.errors import ErrorCode

SESSION_MS = 9000


def apply(image, records):
    return image.apply_all(image.offset + 1, records) if records else image


def registered_and_active(now=0):
    image, tracker = MetadataImage.from_records([], -1), HeartbeatTracker(SESSION_MS)
    recs, res = register_broker(image, tracker, 1, "incarnation-a", "h", 1, None, now)
    image = apply(image, recs)
    recs, hb = broker_heartbeat(image, tracker, 1, res.broker_epoch, image.offset, False, False,
                                now)
    image = apply(image, recs)
    assert not image.brokers[1].fenced and not hb.is_fenced
    return image, tracker, res.broker_epoch


def test_a_finished_controlled_shutdown_fences_and_the_next_process_registers_at_once():
    image, tracker, epoch = registered_and_active()
    recs, hb = broker_heartbeat(image, tracker, 1, epoch, image.offset, False, True, 100)
    image = apply(image, recs)
    assert image.brokers[1].in_controlled_shutdown and not hb.should_shut_down
    recs, hb = broker_heartbeat(image, tracker, 1, epoch, image.offset, False, True, 200)
    assert hb.should_shut_down and hb.is_fenced
    assert any(isinstance(x, r.FenceBrokerRecord) for x in recs)
    image = apply(image, recs)
    assert image.brokers[1].fenced
    # the next process, well within the old session: registered, not DUPLICATE_BROKER_...
    recs, res = register_broker(image, tracker, 1, "incarnation-b", "h", 1, None, 300)
    assert res.error == ErrorCode.NONE and res.broker_epoch > epoch
    # and heartbeats after the fence still say "shut down" (nothing more is written)
    recs, hb = broker_heartbeat(image, tracker, 1, epoch, image.offset, False, True, 250)
    assert recs == [] and hb.should_shut_down


def test_a_live_unfinished_registration_is_still_a_duplicate():
    image, tracker, _ = registered_and_active()
    _, res = register_broker(image, tracker, 1, "incarnation-b", "h", 1, None, 100)
    assert res.error == ErrorCode.DUPLICATE_BROKER_REGISTRATION


def test_a_newcomer_naming_the_live_registrations_epoch_replaces_it_at_once():
    """Only the process holding the old one's log directory knows its epoch, and a broker locks
    its directories for its life: the old process is gone, its session merely not expired (a
    full restart, a SIGKILLed broker started again). Its leaderships move as it is replaced."""
    image, tracker, epoch = registered_and_active()
    tid = uuid.uuid4()
    image = apply(image, [r.TopicRecord("t", tid), r.PartitionRecord(tid, 0, (1,), (1,), 1)])
    assert list(image.partitions_led_by(1))
    recs, res = register_broker(image, tracker, 1, "incarnation-b", "h", 1, None, 100,
                                previous_broker_epoch=epoch)
    assert res.error == ErrorCode.NONE and res.broker_epoch > epoch
    image = apply(image, recs)
    assert image.brokers[1].incarnation_id == "incarnation-b" and image.brokers[1].fenced
    assert not list(image.partitions_led_by(1))
    # anything else the newcomer names (an unclean stop, another epoch, an old request) is not
    # proof: still a duplicate while the old session lives
    image, tracker, epoch = registered_and_active()
    for previous in (-1, epoch - 1, None):
        _, res = register_broker(image, tracker, 1, "incarnation-b", "h", 1, None, 100,
                                 previous_broker_epoch=previous)
        assert res.error == ErrorCode.DUPLICATE_BROKER_REGISTRATION
