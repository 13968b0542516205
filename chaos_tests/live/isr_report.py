"""Why "every partition's ISR whole" did not come: the partitions short of a replica, as a broker
and as the controller see them, for a live test's failure message.

    wait_for(lambda: full_isr(bootstrap, topic, 3), 90, "...",
             describe=lambda: isr_report(bootstrap, topic, controller_image(cluster)))

The broker's view (Metadata, what `full_isr` reads) and the controller's (its image by
FetchSnapshot) side by side tell a stale metadata cache from an ISR that really stayed short;
the cluster-wide part, grouped by leader and missing replica, tells one stuck partition from a
follower that stopped fetching from one leader altogether (issue 20's round 41: 135 partitions,
all led by broker 0, all missing broker 2). `summarize` is pure; the two collectors do I/O.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable, NamedTuple

MAX_NAMED = 6           # partitions named per group; the count says how many more


class PartitionView(NamedTuple):
    topic: str
    partition: int
    leader: int
    replicas: tuple
    isr: tuple

    def missing(self) -> tuple:
        return tuple(r for r in self.replicas if r not in self.isr)

    def line(self) -> str:
        gap = f" missing {list(self.missing())}" if self.missing() else ""
        return (f"{self.topic}-{self.partition}: leader {self.leader} replicas "
                f"{list(self.replicas)} isr {list(self.isr)}{gap}")


def summarize(views: Iterable[PartitionView], topic: str, brokers: dict | None = None) -> str:
    """The round topic's partitions one by one, then every under-replicated or leaderless
    partition of the cluster grouped by (leader, missing replicas); `brokers`: {id: state}."""
    views = sorted(views)
    out = [v.line() for v in views if v.topic == topic] or [f"{topic}: not in the metadata"]
    groups: dict[tuple, list[PartitionView]] = defaultdict(list)
    for v in views:
        if v.missing() or v.leader < 0:
            groups[(v.leader, v.missing())].append(v)
    short = sum(len(g) for g in groups.values())
    out.append(f"cluster-wide: {short} of {len(views)} partitions leaderless or short of a replica")
    for (leader, missing), vs in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        names = ", ".join(f"{v.topic}-{v.partition}" for v in vs[:MAX_NAMED])
        more = f", +{len(vs) - MAX_NAMED} more" if len(vs) > MAX_NAMED else ""
        out.append(f"  leader {leader}, missing {list(missing)}: {len(vs)} ({names}{more})")
    if brokers is not None:
        out.append("brokers: " + ", ".join(f"{b} {s}" for b, s in sorted(brokers.items())))
    return "\n    ".join(out)


def broker_views(bootstrap: str, timeout_s: float = 10) -> tuple[list[PartitionView], str]:
    """Every partition as a broker's Metadata answer says, and which broker answered."""
    from confluent_kafka.admin import AdminClient
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=timeout_s)
    views = [PartitionView(t.topic, p.id, p.leader, tuple(p.replicas), tuple(p.isrs))
             for t in md.topics.values() for p in t.partitions.values()]
    # librdkafka often leaves the id at -1 when a bootstrap address answered: then its name
    return views, str(md.orig_broker_id) if md.orig_broker_id >= 0 else md.orig_broker_name


def image_views(image) -> tuple[list[PartitionView], dict]:
    """Every partition of a controller's MetadataImage, and each broker's registration state."""
    views = [PartitionView(name, pid, p.leader, tuple(p.replicas), tuple(p.isr))
             for name, t in image.topics.items() for pid, p in t.partitions.items()]
    brokers = {b: ("fenced" if r.fenced else "shutting down" if r.in_controlled_shutdown
                   else "usable") + f" (epoch {r.broker_epoch})"
               for b, r in image.brokers.items()}
    return views, brokers


def controller_image(cluster):
    """The first running controller's image (FetchSnapshot), or the reason there is none."""
    from chaos_tests.live.metadata_images import controller_addresses, read_snapshot
    from metadata_quorum.image import MetadataImage
    problems = []
    for cid, (host, port) in sorted(controller_addresses(cluster).items()):
        try:
            end, records = read_snapshot(host, port, timeout_s=15)
            return MetadataImage.from_records(records, end - 1)
        except Exception as exc:        # noqa: BLE001 - a failure message must not fail
            problems.append(f"controller {cid}: {type(exc).__name__}: {exc}")
    return "; ".join(problems)


def isr_report(bootstrap: str, topic: str, image=None, timeout_s: float = 10) -> str:
    """Both views for a failure message; `image` a controller's MetadataImage, a reason it is
    missing (str), or None (broker view only)."""
    parts = []
    try:
        views, answered_by = broker_views(bootstrap, timeout_s)
        parts.append(f"as broker {answered_by} answers Metadata:\n    "
                     + summarize(views, topic))
    except Exception as exc:            # noqa: BLE001
        parts.append(f"broker view unavailable: {type(exc).__name__}: {exc}")
    if isinstance(image, str):
        parts.append(f"controller view unavailable: {image}")
    elif image is not None:
        views, brokers = image_views(image)
        parts.append(f"as the controller's image at offset {image.offset} holds:\n    "
                     + summarize(views, topic, brokers))
    return "\n  ".join(parts)
