"""Metadata applied as deltas (partition_server/image_delta.py): a diff by object identity of a
copy-on-write image touches only topics and partitions that changed."""

import types
import uuid

from metadata_quorum.image import BROKER_RESOURCE, TOPIC_RESOURCE, PartitionState, TopicImage
from partition_server.image_delta import config_changed_topics, diff_images


def part(pid, leader=0, epoch=1):
    return PartitionState(pid, (0, 1, 2), (0, 1, 2), leader, epoch, epoch)


def image(topics, configs=None):
    return types.SimpleNamespace(topics=topics, configs=configs if configs is not None else {})


class CountingDict(dict):
    """Counts lookups of partitions, to show unchanged topics are never walked."""
    reads = 0

    def items(self):
        CountingDict.reads += len(self)
        return super().items()

    def values(self):
        CountingDict.reads += len(self)
        return super().values()


def keys(delta):
    return sorted((t.name, p.partition_id) for t, p in delta.apply)


def test_unchanged_topics_are_not_walked_and_one_changed_partition_is_applied():
    big = TopicImage("big", uuid.uuid4(), CountingDict({i: part(i) for i in range(10_000)}))
    small = TopicImage("small", uuid.uuid4(), {0: part(0), 1: part(1)})
    old = image({"big": big, "small": small})
    CountingDict.reads = 0
    assert keys(diff_images(old, image(dict(old.topics)))) == []
    assert CountingDict.reads == 0
    small2 = TopicImage("small", small.topic_id, {0: small.partitions[0], 1: part(1, leader=2, epoch=2)})
    delta = diff_images(old, image({"big": big, "small": small2}))
    assert keys(delta) == [("small", 1)] and delta.removed == [] and CountingDict.reads == 0


def test_new_deleted_and_recreated_topics():
    a = TopicImage("a", uuid.uuid4(), {0: part(0)})
    b = TopicImage("b", uuid.uuid4(), {0: part(0), 1: part(1)})
    old = image({"a": a, "b": b})
    c = TopicImage("c", uuid.uuid4(), {0: part(0)})
    a2 = TopicImage("a", uuid.uuid4(), {0: part(0)})          # deleted and created again
    delta = diff_images(old, image({"a": a2, "c": c}))
    assert keys(delta) == [("a", 0), ("c", 0)]
    assert sorted(delta.removed) == [("a", 0), ("b", 0), ("b", 1)]
    # the first image after start: everything is new
    assert keys(diff_images(image({}), old)) == [("a", 0), ("b", 0), ("b", 1)]


def test_config_changes_reapply_their_topics_or_all_for_broker_defaults():
    a = TopicImage("a", uuid.uuid4(), {0: part(0)})
    b = TopicImage("b", uuid.uuid4(), {0: part(0)})
    cfg = {(TOPIC_RESOURCE, "a"): {"min.insync.replicas": "2"}}
    old = image({"a": a, "b": b}, cfg)
    same = image({"a": a, "b": b}, cfg)
    assert config_changed_topics(old, same) == set()
    new = image({"a": a, "b": b}, {(TOPIC_RESOURCE, "a"): {"min.insync.replicas": "3"}})
    assert config_changed_topics(old, new) == {"a"}
    assert keys(diff_images(old, new, {"a"})) == [("a", 0)]
    broker_default = image({"a": a, "b": b}, dict(cfg) | {(BROKER_RESOURCE, ""): {"x": "1"}})
    assert config_changed_topics(old, broker_default) is None
    assert keys(diff_images(old, broker_default, None)) == [("a", 0), ("b", 0)]
