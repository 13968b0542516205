"""What changed between two metadata images, for the broker's `on_image`: pure, no I/O.

The image is copy-on-write (metadata_quorum/image.py): an unchanged topic keeps the same
`TopicImage` object and an unchanged partition the same `PartitionState` object, and the configs
and brokers dicts are replaced only when they change. So a diff by identity costs one check per
topic plus one per partition of the topics that changed — not a walk over every partition — and
it is right whatever images were skipped in between (a snapshot load gives all-new objects: then
everything is applied again, as it must be).
"""

from __future__ import annotations

import dataclasses

from metadata_quorum.image import BROKER_RESOURCE, TOPIC_RESOURCE


@dataclasses.dataclass
class ImageDelta:
    apply: list          # [(TopicImage, PartitionState)]: partitions to (re-)apply
    removed: list        # [(topic, partition)]: partitions gone (deleted, recreated topic's old)


def config_changed_topics(old, new) -> set[str] | None:
    """Topics whose effective config may differ; None when a broker-level default changed,
    which concerns every topic without its own override (so all are walked)."""
    if new.configs is old.configs:
        return set()
    changed = set()
    for key in old.configs.keys() | new.configs.keys():
        if old.configs.get(key) == new.configs.get(key):
            continue
        if key[0] == BROKER_RESOURCE:
            return None
        if key[0] == TOPIC_RESOURCE:
            changed.add(key[1])
    return changed


def diff_images(old, new, config_topics: set[str] | None = frozenset()) -> ImageDelta:
    """Partitions of `new` that are new or changed since `old` (or whose topic's config changed:
    `config_topics`, None = every topic), and partitions of `old` gone from `new`."""
    delta = ImageDelta([], [])
    for name, t in new.topics.items():
        ot = old.topics.get(name)
        whole = config_topics is None or name in config_topics
        if ot is t and not whole:
            continue
        if ot is not None and ot.topic_id != t.topic_id:
            # deleted and created again between the two images: the old replicas go first
            delta.removed.extend((name, pid) for pid in ot.partitions)
            ot = None
        if ot is None or whole:
            delta.apply.extend((t, p) for p in t.partitions.values())
            continue
        old_parts = ot.partitions
        for pid, p in t.partitions.items():
            if old_parts.get(pid) is not p:
                delta.apply.append((t, p))
        if len(old_parts) > len(t.partitions):
            delta.removed.extend((name, pid) for pid in old_parts if pid not in t.partitions)
    for name, ot in old.topics.items():
        if name not in new.topics:
            delta.removed.extend((name, pid) for pid in ot.partitions)
    return delta
