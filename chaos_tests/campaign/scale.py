"""The campaign at scale (issue 17): faults on a cluster that holds thousands of partitions,
the way users run it, not on three partitions of a fresh cluster.

- `create_idle_partitions`: `--idle-partitions N` makes N partitions besides the rounds'
  topics (topics of 100 partitions, RF 3, min.insync.replicas 2), all led with a full ISR
  before the first round. A killed broker then leads and follows a third of them: its
  restart is a catch-up of thousands of replicas, its death an election of thousands.
- `drop_topics`: a round that kept every promise deletes its topics, so a long campaign's
  cluster holds the idle partitions and one round's, not every round's (and the deletions of
  thousands of partitions are metadata churn the next round's faults meet).
- the two convergence checks every round ends with, after the heal:
  `replicas-converged` (every partition of the cluster led, its ISR all its replicas, every
  broker registered and unfenced, as a controller's image says, within a deadline
  that grows with the partition count) and `controllers-agree` (every controller holds the
  same metadata image at one end offset).
"""

from __future__ import annotations

import time

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from chaos_tests.checkers.checks import CheckResult
from chaos_tests.live.isr_report import controller_image, image_views, summarize
from chaos_tests.live.metadata_images import assert_same_images, controller_images

PER_TOPIC = 100
TOPICS_PER_REQUEST = 20         # 2,000 partitions per CreateTopics
QUIET = {"log_level": 2}


def idle_topic_names(partitions: int) -> list[str]:
    count = -(-partitions // PER_TOPIC)
    return [f"idle-{i:04d}" for i in range(count)]


def create_idle_partitions(bootstrap: str, partitions: int, timeout_s: float = 300) -> list[str]:
    """Create `partitions` partitions in topics of 100 (the last one smaller); returns the
    topic names. TOPIC_ALREADY_EXISTS counts as created."""
    names = idle_topic_names(partitions)
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    sizes = {n: min(PER_TOPIC, partitions - i * PER_TOPIC) for i, n in enumerate(names)}
    deadline = time.monotonic() + timeout_s
    for start in range(0, len(names), TOPICS_PER_REQUEST):
        batch = names[start:start + TOPICS_PER_REQUEST]
        futures = admin.create_topics([NewTopic(n, sizes[n], 3, config={
            "min.insync.replicas": "2"}) for n in batch], operation_timeout=60)
        for name, fut in futures.items():
            try:
                fut.result(max(1.0, deadline - time.monotonic()))
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise
    return names


def drop_topics(bootstrap: str, names: list[str], timeout_s: float = 60) -> list[str]:
    """Delete `names` (absent ones are fine); returns notes for the round about any that
    could not be deleted (the next rounds do not depend on it)."""
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    notes = []
    for name, fut in admin.delete_topics(names, operation_timeout=timeout_s).items():
        try:
            fut.result(timeout_s)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                notes.append(f"topic {name} not deleted after the round: {exc.args[0]}")
    return notes


def _short_of_full(image) -> tuple[list, list]:
    """(partitions leaderless or short of a replica, brokers fenced or shutting down)."""
    views, _ = image_views(image)
    short = [v for v in views if v.leader < 0 or v.missing()]
    down = [b for b, r in image.brokers.items() if r.fenced or r.in_controlled_shutdown]
    return short, down


def replicas_converged(cluster, topic: str, partitions: int, base_s: float = 60,
                       step_s: float = 1.0, image_of=controller_image) -> CheckResult:
    """Every partition led with all its replicas in sync and every broker usable, in the
    controller's image (`image_of(cluster)`: a MetadataImage or why there is none), within
    base_s plus 10 s per 1,000 partitions of the cluster (`partitions`); the failure names the
    round's `topic` first, then every partition short, grouped."""
    result = CheckResult("replicas-converged")
    timeout_s = base_s + 10 * partitions / 1000
    deadline = time.monotonic() + timeout_s
    while True:
        image = image_of(cluster)
        if isinstance(image, str):
            last = f"no controller image: {image}"
        else:
            short, down = _short_of_full(image)
            if not short and not down:
                return result
            views, brokers = image_views(image)
            last = summarize(views, topic, brokers)
        if time.monotonic() > deadline:
            result.add(f"not converged within {timeout_s:.0f}s of the heal: {last}")
            return result
        time.sleep(step_s)


def controllers_agree(cluster, timeout_s: float = 60) -> CheckResult:
    """Every running controller's image the same at one end offset (FetchSnapshot)."""
    result = CheckResult("controllers-agree")
    try:
        assert_same_images(controller_images(cluster, timeout_s))
    except AssertionError as exc:
        result.add(str(exc))
    return result
