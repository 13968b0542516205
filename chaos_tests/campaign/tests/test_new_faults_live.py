"""The campaign's newer fault classes on a live cluster (nodes at their own addresses, each
broker's log dir on its own tmpfs, every node's clock behind an offset file): root, nftables
and tmpfs are needed; a machine without them fails here with the reason, it is not skipped.

- disk-full: the filled broker answers a producer KAFKA_STORAGE_ERROR (no retry hides it: a raw
  Produce to that broker), leaves leadership and the ISR, rejoins after the heal (free, restart),
  and nothing it acknowledged is missing from the final log;
- clock: a partition leader's wall clock jumps minutes forward, then back, seen in the
  LogAppendTime it stamps, which never goes back; then a campaign round with jumps;
- time-jump (every node here runs under libfaketime): the active controller's monotonic and wall
  clocks leap 30 s, three session timeouts: it reads the leap as a stall of its own (its log
  says so) or pysyncobj steps down first (no follower heard for 30 s), and no broker is
  fenced; then a campaign round of leaps on a broker and on controllers;
- flap: a campaign round with a link cut and restored every 0.5-2 s (the rules dropped packets);
- overlap: a campaign round of kill + isolate and pause + split, each pair at once.
Each campaign round is judged by every checker.
"""

from __future__ import annotations

import re
import time

import pytest
import trio
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from chaos_tests.campaign import __main__ as campaign
from chaos_tests.campaign import disk
from chaos_tests.campaign.nemesis import Nemesis
from chaos_tests.campaign.runner import run_round
from chaos_tests.campaign.schedule import FaultStep, check_available
from chaos_tests.checkers import History, check_all
from chaos_tests.live.admin import create_topic, full_isr, leader_of, partitions_meta, wait_for
from chaos_tests.live.workload import DEFINITE, RawProducer, final_read
from wire.errors import ErrorCode

pytestmark = pytest.mark.live
ROUND_S = 9.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    check_available(["flap", "disk-full", "clock", "time-jump"])
    data = tmp_path_factory.mktemp("newfaults")
    c, mounts = campaign._cluster(data, ["clock", "disk-full", "flap", "time-jump"])
    try:
        c.start()
        yield c
    finally:
        c.stop()
        campaign._unmount(mounts, keep=False)


def assert_round_clean(r):
    bad = [(c.name, c.errors[:2]) for c in r.checks if not c.ok]
    assert not bad, f"anomalies: {bad}; notes: {r.notes}"
    assert sum(1 for o in r.log.operations() if o.f == "produce" and o.type == "ok") > 100


def test_disk_full_broker_answers_storage_error_and_loses_nothing(cluster):
    topic = "df-raw"
    create_topic(cluster.bootstrap, topic, 1)
    wait_for(lambda: full_isr(cluster.bootstrap, topic, 1), 60, "a full ISR")
    victim = leader_of(cluster.bootstrap, topic, 0)
    name, layout = f"broker-{victim}", cluster.layout
    history = History()
    # NOT_LEADER_OR_FOLLOWER is in doubt here: an acks=all append already made and fetched by
    # a follower, still waiting for its high watermark when the log dir failed, is answered so
    # once another broker leads (as Kafka's DelayedProduce does) and survives there (seen:
    # 'failed write raw-103 read at 0/102'). KAFKA_STORAGE_ERROR stays definite: the append
    # itself failed.
    raw = RawProducer(layout.broker_host(victim), layout.broker_port(victim), topic, 0,
                      history, definite=DEFINITE - {ErrorCode.NOT_LEADER_OR_FOLLOWER}).start()
    nemesis = Nemesis(cluster)
    try:
        wait_for(lambda: sum(a.outcome == "ok" for a in raw.attempts) > 50, 30, "acks before")
        heal = nemesis.inject(FaultStep("disk-full", (name,), 0, 1))
        assert disk.free_bytes(layout.data_dir / name) < 64 * 1024
        wait_for(lambda: any(a.error == "KAFKA_STORAGE_ERROR" for a in raw.attempts), 30,
                 "a KAFKA_STORAGE_ERROR answer from the full broker")
        wait_for(lambda: leader_of(cluster.bootstrap, topic, 0) not in (victim, -1), 30,
                 "leadership off the full broker")
        assert victim not in partitions_meta(cluster.bootstrap, topic)[0].isrs
        heal()
    finally:
        raw.stop()
        nemesis.heal_all()
    wait_for(lambda: full_isr(cluster.bootstrap, topic, 1), 60, "the freed broker back in the ISR")
    errors = {a.error for a in raw.attempts if a.error}
    log_text = layout.log_path(name).read_text(errors="replace")
    assert re.search(r"No space left on device|ENOSPC|Errno 28", log_text), errors
    final_read(cluster.bootstrap, topic, 1, history)
    bad = [(c.name, c.errors[:3]) for c in check_all(history) if not c.ok]
    answers = {a.value: a.error for a in raw.attempts}
    assert not bad, f"{bad}; answers seen: {errors}; " + str(
        {v: answers.get(v) for c in bad for e in c[1] for v in re.findall(r"'([^']+)'", e)})


def _append_times(bootstrap, topic, n) -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"t-{time.time_ns()}",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    out, deadline = [], time.monotonic() + 30
    while len(out) < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            out.append(m.timestamp()[1])
    c.close()
    return out


def test_clock_jump_moves_the_leaders_wall_clock_and_append_time_never_goes_back(cluster):
    topic = "clock-lat"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for f in admin.create_topics([NewTopic(topic, 1, 3, config={
            "message.timestamp.type": "LogAppendTime", "min.insync.replicas": "2"})]).values():
        f.result(30)
    wait_for(lambda: full_isr(cluster.bootstrap, topic, 1), 60, "a full ISR")
    leader = f"broker-{leader_of(cluster.bootstrap, topic, 0)}"
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                  "enable.idempotence": True})
    nemesis = Nemesis(cluster)
    sent = 0

    def send(n=5):
        nonlocal sent
        for _ in range(n):
            p.produce(topic, b"x")
        assert p.flush(30) == 0
        sent += n
    try:
        send()
        nemesis.set_clock(leader, 300)
        # the node polls its offset file every 100 ms: a stamp 4+ minutes ahead shows it jumped
        wait_for(lambda: send(1) or _append_times(cluster.bootstrap, topic, sent)[-1] >
                 (time.time() + 240) * 1000, 30, "the leader stamping with its clock jumped")
        nemesis.set_clock(leader, -300)
        time.sleep(0.3)                 # past the node's 100 ms poll of the file
        send()
    finally:
        nemesis.heal_all()
    send()
    stamps = _append_times(cluster.bootstrap, topic, sent)
    assert len(stamps) == sent
    assert stamps == sorted(stamps), "LogAppendTime went back after the clock jumped back"
    r = run_round(cluster, "clock", 1, [FaultStep("clock", (leader,), 0.5, 3, 600.0),
                                        FaultStep("clock", ("controller-3000",), 1.0, 4, -600.0),
                                        FaultStep("clock", ("broker-2",), 5.5, 2, -45.0)],
                  ROUND_S)
    assert_round_clean(r)


def test_time_jump_of_the_active_controller_reads_as_a_stall_and_fences_no_broker(cluster):
    from clients.cli.quorum import describe
    layout = cluster.layout
    leader = wait_for(lambda: next((lid for lid in [trio.run(
        describe, layout.controller_host(0), layout.controller_port(0))["leader_id"]]
        if lid >= 0), None), 30, "a quorum leader")
    name = f"controller-{leader}"
    log_path = layout.log_path(name)

    def lines(marker: str) -> int:
        return log_path.read_text(errors="replace").count(marker)
    marks = ("controller stalled for", "is no longer active")
    before, fences = [lines(m) for m in marks], lines("fencing broker")
    Nemesis(cluster).inject(FaultStep("time-jump", (name,), 0, 0, 30.0))
    # libfaketime re-reads the offset within a second. Then either the controller's next tick
    # sees 30 s gone by and says it stalled, or pysyncobj's thread first saw no follower answer
    # for 30 s and stepped down (a new activation starts every session afresh)
    wait_for(lambda: any(lines(m) > n for m, n in zip(marks, before)), 30,
             f"{name} noticing its clocks leapt 30 s")
    stalled = [int(m) for m in re.findall(r"controller stalled for (\d+) ms",
                                          log_path.read_text(errors="replace"))][before[0]:]
    assert all(ms >= 25_000 for ms in stalled), f"a leap of 30 s read as stalls of {stalled} ms"
    # unforgiven, the leap fences every broker at the tick that sees it (each session looks
    # 30 s old); forgiven, each gets 1 s to be heard: 5 s later nobody was fenced
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        assert lines("fencing broker") == fences, "brokers fenced after the controller's leap"
        time.sleep(0.5)
    r = run_round(cluster, "leap", 4, [FaultStep("time-jump", ("broker-1",), 0.5, 1, 20.0),
                                       FaultStep("time-jump", ("controller-3001",), 3.0, 1, 45.0),
                                       FaultStep("time-jump", ("controller-3002",), 5.5, 1, 8.0)],
                  ROUND_S)
    assert sum("time-jump(" in n for n in r.notes) == 3, r.notes
    assert_round_clean(r)


def test_flapping_link_round_is_clean(cluster):
    r = run_round(cluster, "flap", 2, [FaultStep("flap", ("broker-0", "broker-1"), 0.5, 6,
                                                 12345.0)], ROUND_S)
    note = next(n for n in r.notes if n.startswith("flap("))
    cuts, dropped = map(int, re.search(r"cut (\d+) times, (\d+) packets", note).groups())
    assert cuts >= 2 and dropped > 0, note
    assert_round_clean(r)


def test_overlapping_faults_round_is_clean(cluster):
    schedule = [FaultStep("kill", ("broker-1",), 0.5, 2.5),
                FaultStep("isolate", ("controller-3000",), 1.5, 2.0),
                FaultStep("pause", ("broker-2",), 4.5, 2.0),
                FaultStep("split", ("broker-0", "controller-3001"), 5.0, 2.0)]
    r = run_round(cluster, "overlap", 3, schedule, ROUND_S)
    (k0, k1, _), (i0, i1, _), (p0, p1, _), (s0, s1, _) = r.windows
    assert k0 < i0 < k1 and p0 < s0 < p1            # each pair held at once
    assert_round_clean(r)
