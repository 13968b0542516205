"""Issue #17: a broker holds more partitions than it may open files. One broker (RF 1) runs with
an open-file limit of 1,024 (soft and hard, so it cannot raise it) and hosts 2,000 partitions:
every partition is produced to and read back, the broker is restarted cleanly, everything is
read back again and produced to again, then it is SIGKILLed and read back once more (crash
recovery of evicted active segments). Before the bounded segment-file cache the broker kept a
descriptor per segment and failed with EMFILE opening the logs."""

import os
import signal
import sys
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from clients.cli.dev import CONTROLLER_IDS, DevLayout, ManagedProcess, wait_ready, write_properties
from partition_server.testing import free_base_port

pytestmark = pytest.mark.live

NOFILE = 1024
TOPICS, PER_TOPIC = 20, 100                      # 2,000 partitions, ~2x the descriptor limit
RF1 = {"default.replication.factor": "1", "min.insync.replicas": "1",
       "offsets.topic.replication.factor": "1", "transaction.state.log.replication.factor": "1",
       "transaction.state.log.min.isr": "1"}
# The broker under a hard limit it cannot raise: set in the child before the broker starts.
LIMITED = ("import resource, runpy, sys; "
           f"resource.setrlimit(resource.RLIMIT_NOFILE, ({NOFILE}, {NOFILE})); "
           "sys.argv = ['partition_server'] + sys.argv[1:]; "
           "runpy.run_module('partition_server', run_name='__main__')")


class OneBroker:
    def __init__(self, tmp_path):
        self.layout = DevLayout(tmp_path, free_base_port(), RF1)
        self.config = tmp_path / "configs" / "broker-0.properties"
        self.procs = {}

    def start_controllers(self):
        for i, cid in enumerate(CONTROLLER_IDS):
            path = self.layout.data_dir / "configs" / f"controller-{cid}.properties"
            write_properties(path, self.layout.controller_properties(i))
            self.procs[cid] = ManagedProcess(
                f"controller-{cid}", [sys.executable, "-m", "metadata_quorum", "--config", str(path)],
                "listening on", True, self.layout.log_path(f"controller-{cid}"))

    def start_broker(self, timeout_s=180):
        write_properties(self.config, self.layout.broker_properties(0))
        self.procs["broker"] = ManagedProcess(
            "broker-0", [sys.executable, "-c", LIMITED, "--config", str(self.config)],
            "unfenced", True, self.layout.log_path("broker-0"))
        problem = wait_ready(list(self.procs.values()), timeout_s)
        assert problem is None, problem + "\n" + self.broker_log_tail()

    def broker_log_tail(self) -> str:
        try:
            return "".join(self.layout.log_path("broker-0").read_text().splitlines(True)[-30:])
        except OSError:
            return ""

    def segment_fds(self) -> int:
        pid = self.procs["broker"].proc.pid
        n = 0
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                n += os.readlink(f"/proc/{pid}/fd/{fd}").endswith(".log")
            except OSError:
                pass
        return n

    def stop(self):
        for p in self.procs.values():
            p.stop(60)
            if p.proc.poll() is None:
                p.proc.kill()


def _topics():
    return [f"fd{t}" for t in range(TOPICS)]


def _produce(bootstrap: str, tag: str) -> None:
    errors = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20,
                  "enable.idempotence": False, "message.timeout.ms": 120000})
    for topic in _topics():
        for part in range(PER_TOPIC):
            p.produce(topic, f"{tag}:{topic}:{part}".encode(), partition=part,
                      on_delivery=lambda err, msg: err and errors.append(err))
        p.poll(0)
    assert p.flush(180) == 0
    assert not errors, errors[:5]


def _read_all(bootstrap: str, expect_per_partition: list[str], timeout_s=180) -> None:
    """Every partition holds exactly the tagged records, in order."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False,
                  "fetch.wait.max.ms": 100})
    c.assign([TopicPartition(t, p, 0) for t in _topics() for p in range(PER_TOPIC)])
    want = TOPICS * PER_TOPIC * len(expect_per_partition)
    got: dict = {}
    n = 0
    deadline = time.monotonic() + timeout_s
    try:
        while n < want and time.monotonic() < deadline:
            for m in c.consume(1000, 1.0):
                assert m.error() is None, m.error()
                got.setdefault((m.topic(), m.partition()), []).append(m.value().decode())
                n += 1
    finally:
        c.close()
    missing = [(t, p) for t in _topics() for p in range(PER_TOPIC)
               if got.get((t, p)) != [f"{tag}:{t}:{p}" for tag in expect_per_partition]]
    assert not missing, f"{len(missing)} partitions wrong, e.g. {missing[:3]}: " \
                        f"{[got.get(k) for k in missing[:3]]}"


def test_more_partitions_than_open_files(tmp_path):
    c = OneBroker(tmp_path)
    try:
        c.start_controllers()
        c.start_broker()
        bootstrap = f"127.0.0.1:{c.layout.broker_port(0)}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for f in admin.create_topics([NewTopic(t, PER_TOPIC, 1) for t in _topics()],
                                     request_timeout=120).values():
            f.result(180)
        _produce(bootstrap, "a")
        _read_all(bootstrap, ["a"])
        assert c.segment_fds() <= NOFILE // 2, c.segment_fds()

        c.procs["broker"].stop(120)                  # SIGTERM: controlled shutdown, clean close
        assert c.procs["broker"].proc.returncode == 0, c.broker_log_tail()
        c.start_broker()
        _read_all(bootstrap, ["a"])
        _produce(bootstrap, "b")

        c.procs["broker"].proc.send_signal(signal.SIGKILL)   # no close: recovery on start
        c.procs["broker"].proc.wait(30)
        c.start_broker()
        _read_all(bootstrap, ["a", "b"])
        assert "Too many open files" not in c.broker_log_tail()
    finally:
        c.stop()
