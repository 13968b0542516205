"""The campaign at scale (chaos_tests/campaign/scale.py): the idle topics' names and sizes, and
the `replicas-converged` check judged on hand-made controller images — whole, short of a
replica, with a fenced broker, and without an image at all."""

import uuid

from chaos_tests.campaign.scale import PER_TOPIC, idle_topic_names, replicas_converged
from metadata_quorum import records as r
from metadata_quorum.image import MetadataImage


def _image(short_isr: bool = False, fenced: int | None = None) -> MetadataImage:
    recs = [r.RegisterBrokerRecord(b, f"i{b}", 100 + b, "h", 9000 + b, None, b == fenced)
            for b in range(3)]
    tid = uuid.UUID(int=1)
    recs.append(r.TopicRecord("idle-0000", tid))
    for p in range(4):
        replicas = tuple((p + i) % 3 for i in range(3))
        isr = replicas[:2] if short_isr and p == 3 else replicas
        recs.append(r.PartitionRecord(tid, p, replicas, isr, replicas[0], 2, 5))
    return MetadataImage.from_records(recs, len(recs))


def test_idle_topics_hold_the_partitions_asked_in_topics_of_a_hundred():
    assert idle_topic_names(2_000) == [f"idle-{i:04d}" for i in range(20)]
    assert len(idle_topic_names(2_050)) == 21 and PER_TOPIC == 100
    assert idle_topic_names(0) == []


def test_a_whole_image_converges_at_once():
    assert replicas_converged(None, "idle-0000", 4, image_of=lambda _: _image()).ok


def test_converges_when_the_missing_replica_comes_back_before_the_deadline():
    images = iter([_image(short_isr=True), "controller 3000: refused", _image()])
    result = replicas_converged(None, "idle-0000", 4, base_s=30, step_s=0.01,
                                image_of=lambda _: next(images))
    assert result.ok


def test_a_replica_that_never_returns_fails_with_the_partition_named():
    result = replicas_converged(None, "idle-0000", 4, base_s=0.05, step_s=0.01,
                                image_of=lambda _: _image(short_isr=True))
    assert not result.ok
    assert "not converged within 0s of the heal" in result.errors[0]
    assert "idle-0000-3: leader 0 replicas [0, 1, 2] isr [0, 1] missing [2]" in result.errors[0]


def test_a_fenced_broker_is_not_converged_even_with_every_isr_whole():
    result = replicas_converged(None, "idle-0000", 4, base_s=0.05, step_s=0.01,
                                image_of=lambda _: _image(fenced=2))
    assert not result.ok and "2 fenced (epoch 102)" in result.errors[0]


def test_no_controller_image_until_the_deadline_says_why():
    result = replicas_converged(None, "t", 4, base_s=0.05, step_s=0.01,
                                image_of=lambda _: "controller 3000: ConnectionClosed")
    assert not result.ok
    assert "no controller image: controller 3000: ConnectionClosed" in result.errors[0]
