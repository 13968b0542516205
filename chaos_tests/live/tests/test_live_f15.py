"""Fault F15: clock jumps. Safety must not depend on the wall clock; timeouts may fire,
but a jump must not fire them all (nor stop them firing); LogAppendTime stays monotonic.

Every node of a live cluster runs with `raftka.clock.offset.file` (common/clock.py):
its `time.time` follows the seconds written in that file, as after an NTP step. While an
idempotent acks=all writer and a group consumer run, every node's clock jumps an hour forward,
then two hours back (so the active controller, each partition leader and the group coordinator
all see both jumps). After each jump, for longer than the session and ISR-lag timeouts:

- no broker is fenced (with wall-clock sessions the controller fenced them all at once forward,
  taking every partition offline);
- no ISR shrinks (forward, a wall-clock lag made every follower look an hour behind);
- the consumer keeps its one assignment (forward, every member's session had expired);
- then, with the controller's clock an hour back, a broker frozen by SIGSTOP is still fenced
  within its session timeout (a wall-clock session kept it "alive" for the hour).

At the end: every acknowledged record is read back once, and the LogAppendTime topic's
timestamps never go backwards within a partition (the leader stamps at least the largest
timestamp in the log while its clock is behind).
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
from confluent_kafka import Consumer, TIMESTAMP_LOG_APPEND_TIME
from confluent_kafka.admin import AdminClient, NewTopic

from chaos_tests.checkers import OK, History, assert_valid
from chaos_tests.live.admin import full_isr, wait_for
from chaos_tests.live.cluster import ProxiedCluster
from chaos_tests.live.workload import Writer, final_read
from clients.cli.dev import BROKER_IDS, CONTROLLER_IDS

pytestmark = pytest.mark.live
TOPIC, PARTITIONS = "f15", 3
CLOCK_FILE = "clock-offset"
# Well below the jumps (an hour), well above what a loaded 2-core CI machine can stall a process
# for: a fence or a shrink during a hold is then the clock's doing, not the machine's.
SESSION_MS, LAG_MS = 6000, 6000
HOLD_S = 8                        # longer than the session and the ISR lag timeouts


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = ProxiedCluster(tmp_path_factory.mktemp("f15"),
                       {"broker.heartbeat.interval.ms": "500", "replica.lag.time.max.ms": str(LAG_MS),
                        "raftka.clock.offset.file": CLOCK_FILE},
                       {"broker.session.timeout.ms": str(SESSION_MS),
                        "raftka.clock.offset.file": CLOCK_FILE})
    try:
        c.start()
        yield c
    finally:
        c.stop()


def jump(cluster, seconds: float, controllers=CONTROLLER_IDS, brokers=BROKER_IDS) -> None:
    """Every named node's wall clock reads `seconds` off from now on (within 100 ms)."""
    root = cluster.layout.data_dir
    for name in [f"controller-{c}" for c in controllers] + [f"broker-{b}" for b in brokers]:
        # written aside and renamed: a node polling the file never reads it half-written
        tmp = root / name / (CLOCK_FILE + ".tmp")
        tmp.write_text(str(seconds))
        os.replace(tmp, root / name / CLOCK_FILE)


def live_brokers(bootstrap: str) -> set[int]:
    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).brokers)


def isr_sizes(bootstrap: str) -> dict[int, int]:
    meta = AdminClient({"bootstrap.servers": bootstrap}).list_topics(TOPIC, timeout=10)
    return {p: len(m.isrs) for p, m in meta.topics[TOPIC].partitions.items()}


class GroupMember(threading.Thread):
    """One consumer in a group, polling; counts the assignments it was given."""

    def __init__(self, bootstrap: str):
        super().__init__(daemon=True)
        self.assignments = 0
        self.stop = threading.Event()
        self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": "f15-group",
                           "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": 500,
                           "auto.offset.reset": "earliest"})
        self.c.subscribe([TOPIC], on_assign=self._assigned)

    def _assigned(self, _consumer, partitions):
        if partitions:
            self.assignments += 1

    def run(self):
        while not self.stop.is_set():
            self.c.poll(0.2)
        self.c.close()


def hold_steady(cluster, what: str) -> None:
    """For HOLD_S: all brokers live, every ISR full (checked every 0.5 s)."""
    end = time.monotonic() + HOLD_S
    while time.monotonic() < end:
        brokers = live_brokers(cluster.bootstrap)
        assert brokers == set(BROKER_IDS), f"{what}: brokers fenced, live only {sorted(brokers)}"
        sizes = isr_sizes(cluster.bootstrap)
        assert all(n == 3 for n in sizes.values()), f"{what}: an ISR shrank: {sizes}"
        time.sleep(0.5)


def test_f15_clock_jumps(cluster):
    bootstrap = cluster.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3, config={
            "min.insync.replicas": "2", "message.timestamp.type": "LogAppendTime"})]).values():
        fut.result(30)
    wait_for(lambda: full_isr(bootstrap, TOPIC, PARTITIONS), 30, "full ISRs")
    history = History()
    writer = Writer(bootstrap, TOPIC, PARTITIONS, history)
    member = GroupMember(bootstrap)
    member.start()
    wait_for(lambda: member.assignments == 1, 30, "the consumer's first assignment")
    stop = threading.Event()
    writing = threading.Thread(target=lambda: [writer.write_for(0.5) for _ in iter(stop.is_set, True)],
                               daemon=True)
    writing.start()
    try:
        jump(cluster, 3600)
        hold_steady(cluster, "an hour forward")
        jump(cluster, -3600)
        hold_steady(cluster, "an hour back")
        assert member.assignments == 1, "a clock jump expired the consumer's session"
        # the controllers' clocks are behind the time the brokers last heartbeated at
        frozen = BROKER_IDS[-1]
        t0 = time.monotonic()
        cluster.kill(f"broker-{frozen}", signal.SIGSTOP)
        try:
            wait_for(lambda: frozen not in live_brokers(bootstrap), 15,
                     "the frozen broker fenced after its session timeout")
            fenced_after = time.monotonic() - t0
        finally:
            cluster.kill(f"broker-{frozen}", signal.SIGCONT)
        assert fenced_after < SESSION_MS / 1000 + 5
        wait_for(lambda: live_brokers(bootstrap) == set(BROKER_IDS), 30, "the broker back")
        wait_for(lambda: full_isr(bootstrap, TOPIC, PARTITIONS), 30, "full ISRs again")
    finally:
        stop.set()
        writing.join(30)
        member.stop.set()
        member.join(30)
        jump(cluster, 0)
    assert writer.flush() == 0
    failed = [op for op in history.produces if op.outcome != OK]
    assert not failed, f"{len(failed)} writes failed across the jumps, e.g. {failed[0]}"
    final_read(bootstrap, TOPIC, PARTITIONS, history)
    assert_valid(history, idempotent=True)
    check_log_append_time(bootstrap)


def check_log_append_time(bootstrap: str) -> None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "f15-check",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([TOPIC])
    last: dict[int, int] = {}
    seen = 0
    idle_until = time.monotonic() + 10
    try:
        while time.monotonic() < idle_until:
            msg = c.poll(0.5)
            if msg is None or msg.error():
                continue
            idle_until = time.monotonic() + 3
            kind, ts = msg.timestamp()
            assert kind == TIMESTAMP_LOG_APPEND_TIME
            p = msg.partition()
            assert ts >= last.get(p, -1), \
                f"LogAppendTime went back in partition {p} at offset {msg.offset()}: {ts} < {last[p]}"
            last[p] = ts
            seen += 1
    finally:
        c.close()
    assert seen > 0 and len(last) == PARTITIONS
