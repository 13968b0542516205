"""Kernel network faults on a real cluster whose nodes have their own loopback addresses
(127.a.b.11-13 controllers, .21-23 brokers; each node also connects *from* its address).

The faults are nftables rules and tc shaping (clients/cli/netfaults), matching only this
cluster's addresses: the test process talks from 127.0.0.1, so clients keep reaching every node
while the nodes lose each other, and nothing else on the machine's lo is touched. Each rule
counts what it dropped; every test asserts its fault dropped packets (it had teeth).

(1) the active controller isolated from every other node: another is elected, metadata writes
    (CreateTopics) and acks=all data writes go on, nothing acknowledged is lost; healed, it
    rejoins and all three controllers hold the same metadata image.
(2) a partition leader cut from its followers (not from the controllers), then a one-way loss
    from it to them: acks=all producer, nothing acknowledged lost, the ISR comes back.
(3) one broker's links lossy (nftables random loss) and slow (HTB rate limit), or netem
    delay/loss/reorder where the kernel has netem: the cluster keeps serving.

Needs root and nftables (clients/cli/netfaults says what is missing, as an error: never a skip).
"""

import os
import time

import pytest
import trio

from chaos_tests.checkers import History, assert_valid
from chaos_tests.live.admin import create_topic, partitions_meta, wait_for
from chaos_tests.live.cluster import low_port_cluster
from chaos_tests.live.faults import FAULTS, nft_table
from chaos_tests.live.metadata_images import assert_same_images, controller_images
from chaos_tests.live.workload import Writer, final_read
from clients.cli.dev import BROKER_IDS, CONTROLLER_IDS
from clients.cli.netfaults import nft
from clients.cli.netfaults.tc import Shape, Tc

pytestmark = pytest.mark.live
TABLE = f"raftka_live{os.getpid()}"
SESSION_S = 9.0                 # broker.session.timeout.ms's default: the fixture keeps it


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    nft.Nft().check()                  # a clear NetFaultUnavailable if this machine cannot
    c = low_port_cluster(tmp_path_factory.mktemp("netfaults"),
                         {"broker.heartbeat.interval.ms": "500",
                          "replica.lag.time.max.ms": "3000"}, node_addresses=True)
    try:
        c.start()
        yield c
    finally:
        c.stop()
    # pysyncobj cut followers' logs back on stale AppendEntries, committed entries included
    # (quorum/append_guard.py): seen in a quarter of loaded start-ups before the guard
    for name in (f"controller-{cid}" for cid in CONTROLLER_IDS):
        text = c.layout.log_path(name).read_text(errors="replace")
        assert "truncating already-applied" not in text, f"{name} truncated applied entries"


@pytest.fixture
def kernel(cluster):
    """nftables, with this test's tables gone at the end whatever happens (and tc's root)."""
    n, tc = nft.Nft(), Tc()
    try:
        yield n
    finally:
        for table in (TABLE, nft_table(cluster)):
            n.remove(table)
            assert table not in n.tables()
        tc.remove()


def quorum_leader(cluster, index: int) -> int:
    from clients.cli.quorum import describe
    layout = cluster.layout
    return trio.run(describe, layout.controller_host(index), layout.controller_port(index))[
        "leader_id"]


def new_controller_image(cluster, cid: int):
    from chaos_tests.live.metadata_images import controller_addresses, read_snapshot
    from metadata_quorum.image import MetadataImage
    end, records = read_snapshot(*controller_addresses(cluster)[cid], timeout_s=30)
    return MetadataImage.from_records(records, end - 1)


def others(cluster, name: str) -> list[str]:
    hosts = cluster.layout.node_hosts()
    return [h for n, h in hosts.items() if n != name]


def test_isolated_active_controller_is_replaced_and_rejoins(cluster, kernel, tmp_path):
    topic = "net-ctl"
    create_topic(cluster.bootstrap, topic, 2)
    active = wait_for(lambda: next((lid for lid in [quorum_leader(cluster, 0)] if lid >= 0),
                                   None), 30, "a quorum leader")
    index = CONTROLLER_IDS.index(active)
    name = f"controller-{active}"
    history = History()
    writer = Writer(cluster.bootstrap, topic, 2, history)
    try:
        writer.write_for(1.0)
        FAULTS["isolate"].inject(cluster, name)         # the harness's fault table
        t_cut = time.monotonic()
        rest = [i for i in range(3) if i != index]
        new = wait_for(lambda: next((lid for lid in [quorum_leader(cluster, rest[0])]
                                     if lid not in (-1, active)), None),
                       60, "another controller is elected")
        # a figure for the report, not an assertion (the machine is shared and loaded)
        print(f"{name} isolated -> controller {new} leads after "
              f"{time.monotonic() - t_cut:.1f} s")
        # metadata writes reach the new active controller through the brokers
        created = [f"net-ctl-during-{i}" for i in range(3)]
        for t in created:
            wait_for(lambda t=t: create_topic(cluster.bootstrap, t, 1, exist_ok=True) or True, 60,
                     f"topic {t} created while {name} is cut off")
        acked = writer.acked
        writer.write_for(3.0)
        unacked = writer.flush(60)
        cluster.assert_alive()           # a node dead under the fault: its log says why
        assert unacked == 0
        assert writer.acked > acked, "no data write acknowledged while the controller was cut off"
        # the cut outlasts two broker sessions: every broker must have found the new active
        # controller (brokers kept heartbeating the cut-off one and were fenced: CI stop 27)
        writer.write_for(max(0.0, t_cut + 2 * SESSION_S - time.monotonic()))
        unacked = writer.flush(60)
        assert unacked == 0
        fenced = sorted(b for b, reg in new_controller_image(cluster, new).brokers.items()
                        if reg.fenced)
        assert fenced == [], f"brokers {fenced} fenced while controller {new} was active"
        assert kernel.dropped(nft_table(cluster)) > 0, "the isolation dropped nothing"
        FAULTS["isolate"].heal(cluster, name)
        assert nft_table(cluster) not in kernel.tables()
        wait_for(lambda: quorum_leader(cluster, index) == new, 60,
                 f"{name} rejoins and follows controller {new}")
        images = controller_images(cluster)
        assert_same_images(images)
        assert set(created) <= set(images[active].topics), "the rejoined controller " \
            "lacks topics committed while it was cut off"
        writer.write_for(1.0)
        unacked = writer.flush(60)
        cluster.assert_alive()           # a node dead under the fault: its log says why
        assert unacked == 0
    finally:
        writer.close()
    final_read(cluster.bootstrap, topic, 2, history)
    assert_valid(history, idempotent=True, dump_to=tmp_path / "net-ctl.jsonl")


def leader_cut_round(cluster, kernel, topic: str, drops_for, tmp_path) -> None:
    create_topic(cluster.bootstrap, topic, 1)
    wait_for(lambda: len(partitions_meta(cluster.bootstrap, topic)[0].isrs) == 3, 30,
             "a full ISR")
    leader = partitions_meta(cluster.bootstrap, topic)[0].leader
    followers = [cluster.layout.broker_host(b) for b in BROKER_IDS if b != leader]
    history = History()
    writer = Writer(cluster.bootstrap, topic, 1, history)
    try:
        writer.write_for(1.0)
        kernel.apply(TABLE, drops_for(cluster.layout.broker_host(leader), followers))
        writer.write_for(4.0)               # acks=all: these wait, fail over or time out
        assert kernel.dropped(TABLE) > 0, "the cut dropped nothing"
        kernel.remove(TABLE)
        wait_for(lambda: len(partitions_meta(cluster.bootstrap, topic)[0].isrs) == 3, 60,
                 "the ISR is whole again after the heal")
        writer.write_for(1.0)
        unacked = writer.flush(120)
        cluster.assert_alive()           # a node dead under the fault: its log says why
        assert unacked == 0
    finally:
        writer.close()
    final_read(cluster.bootstrap, topic, 1, history)
    assert_valid(history, idempotent=True, dump_to=tmp_path / f"{topic}.jsonl")
    assert writer.acked > 0


def test_leader_cut_from_followers_not_controllers_loses_nothing(cluster, kernel, tmp_path):
    leader_cut_round(cluster, kernel, "net-leader-split", lambda leader, followers:
                     nft.split([leader], followers), tmp_path)


def test_one_way_loss_from_leader_to_followers_loses_nothing(cluster, kernel, tmp_path):
    leader_cut_round(cluster, kernel, "net-leader-oneway", lambda leader, followers:
                     nft.one_way([leader], followers), tmp_path)


def netem_available() -> bool:
    """Whether this kernel has netem; when it has not, asking for it must say so clearly."""
    tc = Tc()
    try:
        tc.apply(["127.254.254.254"], Shape(delay_ms=1))
    except nft.NetFaultUnavailable as exc:
        assert "CONFIG_NET_SCH_NETEM" in str(exc)
        assert not tc.root_is_ours(), "a failed netem left our qdisc on lo"
        return False
    finally:
        tc.remove()
    return True


def test_lossy_slow_broker_keeps_the_cluster_serving(cluster, kernel, tmp_path):
    topic = "net-lossy"
    create_topic(cluster.bootstrap, topic, 3)
    victim = cluster.layout.broker_host(1)
    history = History()
    writer = Writer(cluster.bootstrap, topic, 3, history)
    tc = Tc()
    shape = Shape(rate_kbit=4000)
    if netem_available():
        shape = Shape(rate_kbit=4000, delay_ms=40, jitter_ms=10, loss_percent=2,
                      reorder_percent=5)
    try:
        writer.write_for(1.0)
        kernel.apply(TABLE, nft.loss(victim, others(cluster, "broker-1"), 10))
        tc.apply([victim], shape)
        acked = writer.acked
        writer.write_for(6.0)
        unacked = writer.flush(120)
        cluster.assert_alive()           # a node dead under the fault: its log says why
        assert unacked == 0
        assert writer.acked > acked, "nothing acknowledged while broker 1 was lossy and slow"
        assert kernel.dropped(TABLE) > 0, "the loss rule dropped nothing"
    finally:
        tc.remove()
        writer.close()
    kernel.remove(TABLE)
    final_read(cluster.bootstrap, topic, 3, history)
    assert_valid(history, idempotent=True, dump_to=tmp_path / "net-lossy.jsonl")
    wait_for(lambda: all(len(p.isrs) == 3 for p in
                         partitions_meta(cluster.bootstrap, topic).values()), 60,
             "every partition's ISR is whole after the heal")
