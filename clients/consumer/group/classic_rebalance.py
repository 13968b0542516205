"""Classic consumer-group membership for `Consumer.poll` (JoinGroup/SyncGroup through
`classic_member.GroupMember`): pattern re-evaluation, the leader's partition-count watch, and the
eager / cooperative (KIP-429) revoke-join-assign loop. Split from ../consumer.py, which keeps the
state these functions read and write; KIP-848 members go through kip848_member.py."""

from __future__ import annotations

import contextlib
import logging

import trio

from clients.consumer.assignors import RebalanceProtocol
from clients.consumer.fetcher import TopicPartition
from clients.consumer.group.listeners import call_listener
from wire.errors import KafkaError

log = logging.getLogger("raftka.consumer")


async def check_pattern(consumer) -> None:
    if consumer._pattern is None:
        return
    now = trio.current_time()
    if now - consumer._pattern_checked < min(consumer.cluster.metadata_max_age_s, 5.0) \
            and consumer._topics:
        return
    consumer._pattern_checked = now
    md = await consumer.cluster.refresh_metadata(all_topics=True)
    matched = sorted(t for t, info in md.topics.items()
                     if not info.is_internal and consumer._pattern.search(t))
    if matched != consumer._topics:
        consumer._topics = matched
        consumer.member.rejoin_needed = True


async def check_partition_counts(consumer) -> None:
    """The leader rejoins when a subscribed topic's partition count changed since it
    assigned (new partitions would otherwise go unread), like Kafka's ConsumerCoordinator."""
    member = consumer.member
    if not member.is_leader or not member.stable or member.assigned_partition_counts is None:
        return
    if consumer.cluster.metadata_stale():
        await consumer.cluster.refresh_metadata(consumer._topics)
    md = consumer.cluster.metadata
    counts = {t: len(md.topics[t].partitions) for t in member.assigned_partition_counts
              if t in md.topics}
    if counts != member.assigned_partition_counts:
        log.info("group %s: partition counts changed %s -> %s; rebalancing", consumer.group_id,
                 member.assigned_partition_counts, counts)
        member.rejoin_needed = True


async def ensure_classic_group(consumer) -> None:
    """Join (or rejoin) when needed and apply the assignment, in the caller's task."""
    member = consumer.member
    await check_pattern(consumer)
    await check_partition_counts(consumer)
    if not member.rejoin_needed and member.stable:
        return
    deadline = trio.current_time() + member.rebalance_timeout_ms / 1000 + 60
    while member.rejoin_needed or not member.stable:
        if not member.member_id and consumer._assigned:
            # we were removed from the group (session expired, poll interval exceeded,
            # fenced): our partitions are someone else's already, so they are lost, not
            # revoked - no commit, and we do not claim them when rejoining (Kafka's
            # onPartitionsLost: on_lost, else on_revoked)
            await consumer._cg_lose(list(consumer._assigned))
        owned = list(consumer._assigned)
        cooperative = member.rebalance_protocol is RebalanceProtocol.COOPERATIVE
        if owned and not cooperative:
            # eager: give everything back before joining (commit what we consumed first)
            if consumer.config["enable.auto.commit"] and member.generation >= 0:
                with contextlib.suppress(KafkaError):
                    await consumer.commit()
            await call_listener(consumer._on_revoked, owned)
            consumer._set_assignment([])
            owned = []
        new = await member.join(consumer._topics, owned, deadline)
        if new is None:
            await trio.sleep(member.retry_backoff_s)
            continue
        new_set = {TopicPartition(*tp) for tp in new}
        if member.rebalance_protocol is RebalanceProtocol.COOPERATIVE:
            revoked = [tp for tp in owned if tp not in new_set]
            added = sorted(tp for tp in new_set if tp not in set(owned))
            if revoked:
                if consumer.config["enable.auto.commit"]:
                    with contextlib.suppress(KafkaError):
                        await consumer.commit({tp: consumer._positions[tp] for tp in revoked
                                           if tp in consumer._positions})
                await call_listener(consumer._on_revoked, revoked)
                member.rejoin_needed = True      # KIP-429: rejoin so they can move
            consumer._set_assignment(sorted(new_set))
            await call_listener(consumer._on_assigned, added)
        else:
            if owned:                    # a cooperative->eager switch: revoke all first
                await call_listener(consumer._on_revoked, owned)
            consumer._set_assignment(sorted(new_set))
            await call_listener(consumer._on_assigned, sorted(new_set))
        log.info("group %s generation %d: assigned %s", consumer.group_id, member.generation,
                 [f"{t}-{p}" for t, p in consumer._assigned])
