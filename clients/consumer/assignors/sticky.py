"""Sticky and cooperative-sticky assignors (Kafka's StickyAssignor, KIP-54, and
CooperativeStickyAssignor, KIP-429).

Goals, in order: (1) balance - with identical subscriptions every member gets floor(P/N) or
ceil(P/N) partitions; otherwise no partition could move to an eligible member holding at least
two fewer; (2) stickiness - a partition stays with its previous owner unless balance needs it
elsewhere, so when a member leaves only its partitions move.

Previous ownership comes from each member's subscription (owned partitions, v1+) or from the
sticky user data (Java and librdkafka's StickyAssignorUserData). When two members claim a
partition, the claim from the higher generation wins (the other member is a zombie of an older
generation); two claims from the same generation cancel, and the partition is reassigned.

Cooperative: a partition whose owner changes is left out of this round's assignment; its
previous owner revokes it on seeing its new assignment and rejoins, and the follow-up rebalance
hands it to its new owner. No partition is thus ever owned by two members at once.
"""

from __future__ import annotations

from clients.consumer.assignors.base import (PartitionAssignor, RebalanceProtocol, sorted_members,
                                             subscribed_partitions)
from clients.consumer.assignors.protocol import (Assignment, Subscription, TopicPartition,
                                                 decode_sticky_user_data,
                                                 encode_generation_user_data,
                                                 encode_sticky_user_data)


def _claims(subscriptions: dict[str, Subscription]) -> dict[str, tuple[list[TopicPartition], int]]:
    out = {}
    for member, sub in subscriptions.items():
        ud_owned, ud_generation = decode_sticky_user_data(sub.user_data)
        owned = sub.owned_partitions or ud_owned
        generation = sub.generation_id if sub.generation_id >= 0 else ud_generation
        out[member] = (list(dict.fromkeys(owned)), generation)
    return out


def previous_owners(order: list[str], claims) -> dict[TopicPartition, str]:
    """tp -> the member whose claim wins (highest generation; equal best claims cancel)."""
    best: dict[TopicPartition, tuple[int, str | None]] = {}
    for member in order:
        owned, generation = claims[member]
        for tp in owned:
            seen = best.get(tp)
            if seen is None or generation > seen[0]:
                best[tp] = (generation, member)
            elif generation == seen[0]:
                best[tp] = (generation, None)
    return {tp: m for tp, (_, m) in best.items() if m is not None}


def _constrained(order, current, all_tps) -> dict[str, list[TopicPartition]]:
    """Identical subscriptions: exact quotas, keeping as much as the quotas allow."""
    min_quota, max_slots = divmod(len(all_tps), len(order))
    result: dict[str, list[TopicPartition]] = {}
    for member in order:
        owned = sorted(current[member])
        if len(owned) > min_quota and max_slots > 0:
            keep = min_quota + 1
            max_slots -= 1
        else:
            keep = min(len(owned), min_quota)
        result[member] = owned[:keep]
    kept = {tp for tps in result.values() for tp in tps}
    free = iter([tp for tp in all_tps if tp not in kept])
    for member in order:
        while len(result[member]) < min_quota:
            result[member].append(next(free))
    for member in order:
        if max_slots == 0:
            break
        if len(result[member]) == min_quota:
            result[member].append(next(free))
            max_slots -= 1
    return result


def _general(order, subscriptions, current, all_tps) -> dict[str, list[TopicPartition]]:
    """Different subscriptions: place free partitions on the least-loaded eligible member (rarest
    partitions first), then move partitions from heavier to lighter members until no move helps."""
    rank = {m: i for i, m in enumerate(order)}
    eligible = {tp: [m for m in order if tp[0] in subscriptions[m].topics] for tp in all_tps}
    result = {m: list(current[m]) for m in order}
    taken = {tp for tps in result.values() for tp in tps}
    free = sorted((tp for tp in all_tps if tp not in taken), key=lambda tp: (len(eligible[tp]), tp))
    for tp in free:
        if eligible[tp]:
            target = min(eligible[tp], key=lambda m: (len(result[m]), rank[m]))
            result[target].append(tp)
    # Each move lowers the sum of squared loads, so this ends; the bound is belt and braces.
    for _ in range(len(all_tps) * len(order) + 1):
        move = _find_move(order, rank, eligible, result)
        if move is None:
            break
        tp, src, dst = move
        result[src].remove(tp)
        result[dst].append(tp)
    return result


def _find_move(order, rank, eligible, result):
    for src in sorted(order, key=lambda m: (-len(result[m]), rank[m])):
        for tp in sorted(result[src]):
            others = [m for m in eligible[tp] if m != src]
            if not others:
                continue
            dst = min(others, key=lambda m: (len(result[m]), rank[m]))
            if len(result[src]) > len(result[dst]) + 1:
                return tp, src, dst
    return None


class StickyAssignor(PartitionAssignor):
    name = "sticky"
    rebalance_protocol = RebalanceProtocol.EAGER

    def subscription(self, topics, owned, generation) -> Subscription:
        sub = super().subscription(topics, owned, generation)
        sub.user_data = encode_sticky_user_data(sub.owned_partitions, generation)
        return sub

    def target(self, partitions_per_topic: dict[str, int],
               subscriptions: dict[str, Subscription]):
        order = sorted_members(subscriptions)
        claims = _claims(subscriptions)
        owners = previous_owners(order, claims)
        all_tps = subscribed_partitions(partitions_per_topic, subscriptions)
        valid = set(all_tps)
        current = {m: [] for m in order}
        for tp, member in owners.items():
            if tp in valid and tp[0] in subscriptions[member].topics:
                current[member].append(tp)
        if not order:
            return {}, owners
        topic_sets = {frozenset(s.topics) for s in subscriptions.values()}
        if len(topic_sets) == 1:
            return _constrained(order, current, all_tps), owners
        return _general(order, subscriptions, current, all_tps), owners

    def assign(self, partitions_per_topic, subscriptions) -> dict[str, Assignment]:
        result, _ = self.target(partitions_per_topic, subscriptions)
        return {m: Assignment(sorted(tps)) for m, tps in result.items()}


class CooperativeStickyAssignor(StickyAssignor):
    name = "cooperative-sticky"
    rebalance_protocol = RebalanceProtocol.COOPERATIVE

    def subscription(self, topics, owned, generation) -> Subscription:
        sub = PartitionAssignor.subscription(self, topics, owned, generation)
        sub.user_data = encode_generation_user_data(generation)
        return sub

    def assign(self, partitions_per_topic, subscriptions) -> dict[str, Assignment]:
        result, owners = self.target(partitions_per_topic, subscriptions)
        return {m: Assignment(sorted(tp for tp in tps if owners.get(tp, m) == m))
                for m, tps in result.items()}
