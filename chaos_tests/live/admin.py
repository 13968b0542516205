"""Small admin helpers for live chaos tests (confluent-kafka's AdminClient on a bootstrap list):
create an RF-3 topic, read a partition's leader and ISR, wait for a condition while faults
make metadata calls fail now and then."""

from __future__ import annotations

import time

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic


def create_topic(bootstrap: str, topic: str, partitions: int, min_isr: int = 2,
                 exist_ok: bool = False) -> None:
    """`exist_ok`: TOPIC_ALREADY_EXISTS is success — for a retry after an attempt in doubt
    (REQUEST_TIMED_OUT while the controllers lack a quorum: that attempt may have created it)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(topic, partitions, 3, config={
            "min.insync.replicas": str(min_isr)})]).values():
        try:
            fut.result(30)
        except KafkaException as exc:
            if not (exist_ok and exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS):
                raise


def partitions_meta(bootstrap: str, topic: str) -> dict:
    """partition → confluent PartitionMetadata (leader, replicas, isrs)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return admin.list_topics(topic, timeout=10).topics[topic].partitions


def leader_of(bootstrap: str, topic: str, partition: int) -> int:
    return partitions_meta(bootstrap, topic)[partition].leader


def wait_for(predicate, timeout_s: float, what: str, step_s: float = 0.2, describe=None):
    """Poll `predicate` until it returns something truthy (exceptions count as not yet)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            got = predicate()
        except Exception:              # noqa: BLE001 - metadata calls fail while faults last
            got = None
        if got:
            return got
        time.sleep(step_s)
    state = ""
    if describe is not None:
        try:
            state = f" (now: {describe()})"
        except Exception as exc:       # noqa: BLE001
            state = f" (state unknown: {exc})"
    raise AssertionError(f"{what} within {timeout_s}s{state}")


def full_isr(bootstrap: str, topic: str, partitions: int, broker: int | None = None) -> bool:
    """Every partition has a leader and all three replicas in sync (or at least `broker`)."""
    meta = partitions_meta(bootstrap, topic)
    for p in range(partitions):
        m = meta[p]
        if m.leader < 0 or (len(m.isrs) < 3 if broker is None else broker not in m.isrs):
            return False
    return True


def describe(bootstrap: str, topic: str) -> str:
    meta = partitions_meta(bootstrap, topic)
    return "; ".join(f"{p}: leader {m.leader} isr {m.isrs}" for p, m in sorted(meta.items()))
