"""Live chaos on a real 3-controller + 3-broker cluster (RF=3, min.insync.replicas=2, acks=all).

(c) the partition leader is cut off from the controllers and its peers by the fault proxy while
    a raw producer keeps writing to it directly: once cut (and so once fenced) it acknowledges
    nothing; the cluster elects another leader and an idempotent producer carries on there.
    Variant: cut from the controllers only (followers still reach it until they hear of the new
    leader): nothing acknowledged once the cluster has moved on.
(e) every process (3 controllers, 3 brokers) is SIGKILLed during acks=all writes, then
    restarted: nothing acknowledged is lost, order is kept, no offset holds two records.
After each the history checkers run (lost-write, inconsistent-offsets, order, duplicate,
truncated-read, failed-write-read, ...). CI runs one round; RAFTKA_SOAK=1 runs the `slow` ones.
"""

import os
import time

import pytest

from chaos_tests.checkers import History, assert_valid
from chaos_tests.live.admin import create_topic, partitions_meta, wait_for
from chaos_tests.live.cluster import ProxiedCluster, low_port_cluster
from chaos_tests.live.faults import FAULTS
from chaos_tests.live.workload import RawProducer, Reader, Writer, final_read, partition_view
from clients.cli.dev import BROKER_IDS, CONTROLLER_IDS

pytestmark = pytest.mark.live
SESSION_MS = 3000


def describe_partition(bootstrap: str, topic: str) -> str:
    p = partitions_meta(bootstrap, topic)[0]
    return f"leader {p.leader} replicas {p.replicas} isr {p.isrs}"


@pytest.fixture(scope="module")
def proxied(tmp_path_factory):
    c = ProxiedCluster(tmp_path_factory.mktemp("chaos-proxied"),
                       {"broker.heartbeat.interval.ms": "500", "replica.lag.time.max.ms": "3000"},
                       {"broker.session.timeout.ms": str(SESSION_MS)})
    try:
        c.start()
        yield c
    finally:
        c.stop()


def isolated_leader_round(cluster: ProxiedCluster, topic: str, tmp_path, write_s: float,
                          fault: str = "partition"):
    """`partition`: the leader loses controllers and peers, so from the cut on it cannot commit
    anything. `fence`: it loses only the controllers; followers may fetch from it until they
    learn the new leader, so the promise starts once the cluster has moved on (plus 1 s for the
    last follower to hear of it)."""
    create_topic(cluster.bootstrap, topic, 1)
    def agreed():
        views = [partition_view("127.0.0.1", cluster.layout.broker_port(b), topic)
                 for b in BROKER_IDS]
        if all(v is not None and v.leader >= 0 and len(v.isr) == 3 for v in views) and \
                len({(v.leader, v.leader_epoch) for v in views}) == 1:
            return views[0]
        return None
    before = wait_for(agreed, 30, "every broker names the same leader with a full ISR")
    leader = before.leader
    others = [b for b in BROKER_IDS if b != leader]

    def moved_on():
        """Every other broker's metadata names a new leader in a newer epoch (asked at their
        real ports: the old leader's own stale view must not answer)."""
        views = [partition_view("127.0.0.1", cluster.layout.broker_port(b), topic)
                 for b in others]
        if all(v is not None and v.leader not in (-1, leader)
               and v.leader_epoch > before.leader_epoch for v in views):
            return views[0]             # (a view, not the leader id: broker 0 is falsy)
        return None
    history = History()
    raw = RawProducer("127.0.0.1", cluster.layout.broker_port(leader), topic, 0, history).start()
    writer = Writer(cluster.bootstrap, topic, 1, history)
    reader = Reader(cluster.bootstrap, topic, 1, history).start()
    try:
        writer.write_for(2.0)
        assert raw.attempts and any(a.outcome == "ok" for a in raw.attempts), \
            "the raw producer got nothing acknowledged before the fault"
        t_cut = time.monotonic()
        FAULTS[fault].inject(cluster, f"broker-{leader}")
        new_leader = wait_for(
            moved_on, SESSION_MS / 1000 + 60, "another broker leads the partition",
            describe=lambda: [partition_view("127.0.0.1", cluster.layout.broker_port(b), topic)
                              for b in BROKER_IDS]).leader
        t_fenced = time.monotonic()
        writer.write_for(write_s)             # the cluster goes on with the new leader
        time.sleep(1.0)                       # and the zombie keeps being written to
        t_heal = time.monotonic()
        FAULTS[fault].heal(cluster, f"broker-{leader}")
        wait_for(lambda: leader in partitions_meta(cluster.bootstrap, topic)[0].isrs, 60,
                 "the old leader rejoins the ISR",
                 describe=lambda: describe_partition(cluster.bootstrap, topic))
        writer.write_for(1.0)
    finally:
        raw.stop()
        reader.stop()
    assert writer.flush() == 0
    final_read(cluster.bootstrap, topic, 1, history)
    # Written while cut off: nothing may be acknowledged. (After healing the old leader may lead
    # again, in a new epoch, e.g. by preferred-leader rebalance: those acks are legitimate and
    # the checkers judge them with everything else.)
    start = t_cut if fault == "partition" else t_fenced + 1.0
    during = [a for a in raw.attempts if start <= a.sent_at < t_heal]
    after_fence = [a for a in during if a.sent_at >= t_fenced]
    assert after_fence, "the raw producer did not keep writing to the fenced leader"
    acked = [a for a in during if a.outcome == "ok"]
    assert acked == [], f"the isolated leader {leader} acknowledged writes: {acked[:5]}"
    assert writer.acked > 0 and new_leader != leader
    assert_valid(history, idempotent=True, dump_to=tmp_path / f"{topic}.jsonl")
    return len(during)


def test_isolated_leader_acknowledges_nothing_after_it_is_cut_off(proxied, tmp_path):
    isolated_leader_round(proxied, "chaos-zombie", tmp_path, write_s=2.0)


def test_leader_cut_from_controllers_only_acknowledges_nothing_once_fenced(proxied, tmp_path):
    isolated_leader_round(proxied, "chaos-fenced", tmp_path, write_s=2.0, fault="fence")


@pytest.mark.slow
def test_isolated_leader_rounds_soak(proxied, tmp_path):
    for i in range(int(os.environ.get("RAFTKA_CHAOS_ROUNDS", "5"))):
        for fault in ("partition", "fence"):
            isolated_leader_round(proxied, f"chaos-{fault}-soak-{i}", tmp_path, write_s=5.0,
                                  fault=fault)


def full_cluster_kill(tmp_path, rounds: int) -> None:
    topic = "chaos-full-kill"
    with low_port_cluster(tmp_path / "cluster", {"broker.heartbeat.interval.ms": "500"}) as cluster:
        create_topic(cluster.bootstrap, topic, 2)
        history = History()
        writer = Writer(cluster.bootstrap, topic, 2, history)
        reader = Reader(cluster.bootstrap, topic, 2, history).start()
        try:
            for _ in range(rounds):
                writer.write_for(2.0)
                acked_before = writer.acked
                for name in [f"broker-{b}" for b in BROKER_IDS] + \
                        [f"controller-{c}" for c in CONTROLLER_IDS]:
                    FAULTS["sigkill"].inject(cluster, name)
                for name in [f"controller-{c}" for c in CONTROLLER_IDS] + \
                        [f"broker-{b}" for b in BROKER_IDS]:
                    FAULTS["sigkill"].heal(cluster, name)
                writer.write_for(2.0)
                assert writer.flush() == 0
                assert writer.acked > acked_before, "no write acknowledged after the restart"
        finally:
            reader.stop()
        final_read(cluster.bootstrap, topic, 2, history)
    assert_valid(history, idempotent=True, dump_to=tmp_path / "full-kill.jsonl")
    assert len(history.acked) == writer.acked > 0


def test_full_cluster_sigkill_and_restart_loses_nothing(tmp_path):
    full_cluster_kill(tmp_path, rounds=1)


@pytest.mark.slow
def test_full_cluster_sigkill_rounds_soak(tmp_path):
    full_cluster_kill(tmp_path, rounds=int(os.environ.get("RAFTKA_CHAOS_ROUNDS", "5")))
