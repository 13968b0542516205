"""JBOD live (issue #21 item 5; KIP-858, KIP-113): 3 controllers + 3 brokers with several
`log.dirs` each, real processes.

- placement: each directory has its own id (meta.properties); new replicas spread over the
  directories (fewest partitions first); DescribeLogDirs answers per directory (kafka-python,
  our CLI's Kafka JSON);
- AlterReplicaLogDirs while an acks=all producer writes: the replica moves (future log, then
  swap), every acknowledged record is read back exactly once at its offset; the refusals are
  Kafka's; `raftka log-dirs move --wait`;
- a restart finds every log in the directory holding it; a partition present in two
  directories stops the broker with Kafka's message;
- one directory failing under load (the `raftka.storage.fault.file` seam: every write there
  fails with ENOSPC) takes only its replicas offline: their leadership moves and the broker
  leaves their ISRs, its other directory's partitions keep their leader, nothing acknowledged
  is lost, DescribeLogDirs names the failed directory; every directory failing stops the broker.
- a move throttled by replica.alter.log.dirs.io.max.bytes.per.second resumes after a SIGKILL
  of its broker, and a lifted throttle reaches it;
- offline replicas are durable metadata (KIP-858 directories in the metadata log): Metadata
  lists them in offline_replicas, and after a SIGKILL of the active controller the new one never
  elects them (its preferred-leader rebalance leaves a failed single-replica partition
  leaderless), nothing acknowledged lost.

(confluent-kafka 2.x and aiokafka have no DescribeLogDirs/AlterReplicaLogDirs call.)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from kafka import TopicPartitionReplica
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import KafkaStorageError, LogDirNotFoundError, NoError, ReplicaNotAvailableError

from clients.cli.main import main as cli
from partition_server.log_dirs import read_meta
from partition_server.testing import LiveCluster

pytestmark = pytest.mark.live
FAULT = "FAIL_WRITES"


def _until(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while not (outcome := predicate()):
        assert time.monotonic() < deadline, what
        time.sleep(0.2)
    return outcome


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with LiveCluster(tmp_path_factory.mktemp("jbod"), {"raftka.storage.fault.file": FAULT},
                     log_dirs=2) as c:
        c.admin = KafkaAdminClient(bootstrap_servers=c.bootstrap)
        yield c
        c.admin.close()


def _dirs(c, broker: int) -> list[str]:
    return [str(c.layout.data_dir / f"broker-{broker}")] + [
        str(c.layout.data_dir / f"broker-{broker}-d{i}") for i in range(1, c.layout.log_dirs)]


def _where(c, topic: str) -> dict:
    """{(broker, partition): [(log dir, is future)]} from kafka-python's DescribeLogDirs."""
    out: dict = {}
    for b in c.admin.describe_log_dirs():
        for d in b["log_dirs"]:
            for t in d["topics"]:
                if t["name"] == topic:
                    for p in t["partitions"]:
                        out.setdefault((b["broker"], p["partition_index"]), []).append(
                            (d["log_dir"], p["is_future_key"]))
    return out


def _layout(c, topic: str) -> dict:
    md = c.admin.describe_topics([topic])[0]
    return {p["partition_index"]: (p["leader_id"], set(p["isr_nodes"])) for p in md["partitions"]}


def _create(c, topic: str, partitions: int, config: dict | None = None) -> None:
    c.admin.create_topics([NewTopic(topic, partitions, 3, topic_configs=config or {})])
    _until(lambda: len(_layout(c, topic)) == partitions and all(
        leader >= 0 for leader, _ in _layout(c, topic).values()), 30, "topic ready")


class Writer:
    """An idempotent acks=all producer in a thread: acked[(partition, offset)] = value."""

    def __init__(self, c, topic: str, partitions: int):
        self.acked, self.failed, self.stop = {}, [], threading.Event()
        self.c, self.topic, self.partitions = c, topic, partitions
        self.thread = threading.Thread(target=self._run)
        self.thread.start()

    def _report(self, err, msg):
        if err is not None:
            self.failed.append(err)
        else:
            self.acked[(msg.partition(), msg.offset())] = msg.value()

    def _run(self):
        p = Producer({"bootstrap.servers": self.c.bootstrap, "acks": "all",
                      "enable.idempotence": True, "linger.ms": 5})
        i = 0
        while not self.stop.is_set():
            p.produce(self.topic, b"%d-" % i + b"x" * 200, partition=i % self.partitions,
                      on_delivery=self._report)
            p.poll(0)
            i += 1
            time.sleep(0.001)
        assert p.flush(60) == 0
        self.sent = i

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(90)


def _read_back(c, topic: str, partitions: int, acked: dict) -> None:
    """Every acknowledged record at its offset, each offset once."""
    consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": f"g-{uuid.uuid4().hex}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got, ends = {}, {}

    def end_of(p):          # leadership may be moving (a restarted broker gets its own back)
        try:
            return consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] + 1
        except KafkaException:
            return None
    for p in range(partitions):
        ends[p] = _until(lambda: end_of(p), 30, "the partition's end offset") - 1
    deadline = time.monotonic() + 60
    while sum(1 for k in got) < sum(ends.values()) and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and not m.error():
            assert (m.partition(), m.offset()) not in got
            got[(m.partition(), m.offset())] = m.value()
    consumer.close()
    for where, value in acked.items():
        assert got.get(where) == value, where
    values = [v.split(b"-")[0] for v in got.values()]
    assert len(values) == len(set(values))                  # no duplicates


def test_directories_have_ids_and_new_replicas_spread_over_them(cluster):
    ids = {read_meta(d)["directory.id"] for b in range(3) for d in _dirs(cluster, b)}
    assert len(ids) == 6 and all(uuid.UUID(i) for i in ids)
    topic = f"spread-{uuid.uuid4().hex[:6]}"
    _create(cluster, topic, 4)
    where = _where(cluster, topic)
    for b in range(3):                  # fewest partitions first: 2 + 2 on each broker
        counts = [sum(1 for p in range(4) if where[(b, p)] == [(d, False)])
                  for d in _dirs(cluster, b)]
        assert sum(counts) == 4 and max(counts) - min(counts) <= 2, (b, counts)


def test_cli_json_names_every_directory(cluster, capsys):
    topic = f"cli-{uuid.uuid4().hex[:6]}"
    _create(cluster, topic, 2)
    assert cli(["log-dirs", "describe", "--bootstrap-server", cluster.bootstrap,
                "--topic-list", topic, "--output", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    for b in doc["brokers"]:
        assert [d["logDir"] for d in b["logDirs"]] == _dirs(cluster, b["broker"])
        assert sorted(p["partition"] for d in b["logDirs"] for p in d["partitions"]) == \
            [f"{topic}-0", f"{topic}-1"]


def test_move_between_directories_while_producing(cluster, capsys):
    topic = f"move-{uuid.uuid4().hex[:6]}"
    _create(cluster, topic, 2)
    layout = _layout(cluster, topic)
    writer = Writer(cluster, topic, 2)
    try:
        _until(lambda: len(writer.acked) > 2000, 60, "records acknowledged before the move")
        where = _where(cluster, topic)
        moves = {}
        for p in range(2):
            for b in (layout[p][0], next(x for x in range(3) if x != layout[p][0])):
                here = where[(b, p)][0][0]
                moves[TopicPartitionReplica(topic, p, b)] = next(
                    d for d in _dirs(cluster, b) if d != here)
        result = cluster.admin.alter_replica_log_dirs(moves)
        assert set(result.values()) == {NoError}, result

        def moved():
            now = _where(cluster, topic)
            return all(now[(r.broker_id, r.partition)] == [(d, False)] for r, d in moves.items())
        _until(moved, 60, "replicas moved (future logs swapped in)")
        count = len(writer.acked)
        _until(lambda: len(writer.acked) > count + 500, 60, "writes acknowledged after the move")
    finally:
        writer.finish()
    assert writer.failed == []
    _read_back(cluster, topic, 2, writer.acked)
    # the old copies are gone from the source directories
    for r, d in moves.items():
        _until(lambda: not any(n.startswith(f"{topic}-{r.partition}") for src in
                               _dirs(cluster, r.broker_id) if src != d for n in os.listdir(src)),
               30, "old copy deleted")
    # our CLI moves one back and waits for the swap
    r, d = next(iter(moves.items()))
    back = next(x for x in _dirs(cluster, r.broker_id) if x != d)
    capsys.readouterr()
    assert cli(["log-dirs", "move", f"{topic}-{r.partition}", "--broker", str(r.broker_id),
                "--to", back, "--wait", "60", "--bootstrap-server", cluster.bootstrap]) == 0
    assert f"is in {back}" in capsys.readouterr().out
    assert _where(cluster, topic)[(r.broker_id, r.partition)] == [(back, False)]


def test_alter_replica_log_dirs_refusals_are_kafkas(cluster, capsys):
    topic = f"refuse-{uuid.uuid4().hex[:6]}"
    _create(cluster, topic, 1)
    result = cluster.admin.alter_replica_log_dirs({
        TopicPartitionReplica(topic, 0, 0): "/no/such/dir",
        TopicPartitionReplica(topic, 7, 1): _dirs(cluster, 1)[1]})
    assert result[TopicPartitionReplica(topic, 0, 0)] is LogDirNotFoundError
    assert result[TopicPartitionReplica(topic, 7, 1)] is ReplicaNotAvailableError
    assert cli(["log-dirs", "move", f"{topic}-0", "--broker", "0", "--to", "/no/such/dir",
                "--bootstrap-server", cluster.bootstrap]) == 1
    assert "LOG_DIR_NOT_FOUND" in capsys.readouterr().err


def test_reassign_plan_log_dirs_place_new_and_move_existing_replicas(cluster, tmp_path):
    """kafka-reassign-partitions' `log_dirs`: a replica added by the plan is created in the
    named directory, a kept replica is moved to its named directory."""
    topic = f"plan-{uuid.uuid4().hex[:6]}"
    cluster.admin.create_topics([NewTopic(topic, replica_assignments={0: [0, 1]})])
    _until(lambda: _layout(cluster, topic).get(0, (-1,))[0] >= 0, 30, "topic ready")
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(300):
        p.produce(topic, b"%d-p" % i, partition=0)
    assert p.flush(30) == 0
    here0 = _where(cluster, topic)[(0, 0)][0][0]
    there0 = next(d for d in _dirs(cluster, 0) if d != here0)
    new2 = _dirs(cluster, 2)[1]
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [0, 2], "log_dirs": [there0, new2]}]}))
    assert cli(["reassign", "execute", "--reassignment-json-file", str(plan),
                "--bootstrap-server", cluster.bootstrap]) == 0
    _until(lambda: _where(cluster, topic).get((2, 0)) == [(new2, False)] and
           _where(cluster, topic).get((0, 0)) == [(there0, False)], 60,
           "replica 2 created in its named directory, replica 0 moved to its own")
    _until(lambda: _layout(cluster, topic)[0][1] == {0, 2}, 60, "reassignment finished")


def test_restart_finds_logs_in_their_directories(cluster):
    topic = f"restart-{uuid.uuid4().hex[:6]}"
    _create(cluster, topic, 4)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    acked = {}
    for i in range(400):
        p.produce(topic, b"%d-r" % i, partition=i % 4, on_delivery=lambda e, m: acked.__setitem__(
            (m.partition(), m.offset()), m.value()) if e is None else None)
    assert p.flush(30) == 0 and len(acked) == 400
    before = _where(cluster, topic)
    cluster.restart_broker(2)
    _until(lambda: all(2 in isr for _, isr in _layout(cluster, topic).values()), 60,
           "broker 2 back in every ISR")
    assert {k: v for k, v in _where(cluster, topic).items() if k[0] == 2} == \
        {k: v for k, v in before.items() if k[0] == 2}
    _read_back(cluster, topic, 4, acked)


def test_a_partition_in_two_directories_stops_the_broker_with_kafkas_message(cluster):
    topic = f"dup-{uuid.uuid4().hex[:6]}"
    _create(cluster, topic, 1)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    p.produce(topic, b"v", partition=0)
    assert p.flush(30) == 0
    src = _where(cluster, topic)[(1, 0)][0][0]
    other = next(d for d in _dirs(cluster, 1) if d != src)
    cluster.kill("broker-1")
    shutil.copytree(os.path.join(src, f"{topic}-0"), os.path.join(other, f"{topic}-0"))
    try:
        config = cluster.layout.data_dir / "configs" / "broker-1.properties"
        out = subprocess.run([sys.executable, "-m", "partition_server", "--config", str(config)],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 1
        assert f"Duplicate log directories for {topic}-0 are found in both" in out.stderr
        assert "Traceback" not in out.stderr
    finally:
        shutil.rmtree(os.path.join(other, f"{topic}-0"))
        cluster.restart_broker(1)


def test_one_failed_directory_takes_only_its_replicas_offline(cluster):
    topic = f"fail-{uuid.uuid4().hex[:6]}"
    _create(cluster, topic, 6, {"min.insync.replicas": "2"})
    victim = 0
    layout = _layout(cluster, topic)
    where = _where(cluster, topic)
    bad = _dirs(cluster, victim)[1]
    doomed = {p for p in range(6) if where[(victim, p)] == [(bad, False)]}
    kept_led = {p for p in range(6) if p not in doomed and layout[p][0] == victim}
    assert doomed and len(doomed) < 6
    writer = Writer(cluster, topic, 6)
    try:
        _until(lambda: len(writer.acked) > 1000, 60, "records acknowledged before the failure")
        open(os.path.join(bad, FAULT), "w").close()

        def moved_off():
            now = _layout(cluster, topic)
            return all(now[p][0] != victim and victim not in now[p][1] for p in doomed) and now
        now = _until(moved_off, 60, "leadership and ISR membership left the failed directory")
        assert all(now[p][0] == victim and victim in now[p][1] for p in kept_led), now
        count = len(writer.acked)
        _until(lambda: len(writer.acked) > count + 1000, 60, "writes go on after the failure")
    finally:
        writer.finish()
    assert cluster.proc(f"broker-{victim}").proc.poll() is None          # still serving
    assert writer.failed == []
    _read_back(cluster, topic, 6, writer.acked)
    failed = [d for b in cluster.admin.describe_log_dirs() if b["broker"] == victim
              for d in b["log_dirs"] if d["log_dir"] == bad]
    assert failed and failed[0]["error_code"] == KafkaStorageError.errno
    # AlterReplicaLogDirs into an offline directory: KAFKA_STORAGE_ERROR, as Kafka
    some = next(p for p in range(6) if p not in doomed)
    assert cluster.admin.alter_replica_log_dirs({TopicPartitionReplica(topic, some, victim): bad}) \
        == {TopicPartitionReplica(topic, some, victim): KafkaStorageError}
    # the last directory failing too: the broker shuts down (Kafka's rule)
    open(os.path.join(_dirs(cluster, victim)[0], FAULT), "w").close()
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(200):
        p.produce(topic, b"last-%d" % i, partition=i % 6)
    p.flush(60)
    proc = cluster.proc(f"broker-{victim}").proc
    proc.wait(60)
    assert proc.returncode == 1
    for d in _dirs(cluster, victim):
        os.unlink(os.path.join(d, FAULT))
    cluster.restart_broker(victim)
    _until(lambda: all(victim in isr for _, isr in _layout(cluster, topic).values()), 60,
           "the restarted broker is back in every ISR")
    # the shut-down broker was fenced at once (Kafka's SHUTDOWN_NOW), so it left Metadata for
    # a moment; kafka-python's admin keeps the controller id it had and answers
    # UnknownBrokerIdError from its cached brokers until it refreshes: a new client reads afresh
    cluster.admin.close()
    cluster.admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)


def _active_controller(c) -> str | None:
    """The name of the active controller process, from the controllers' /metrics gauges."""
    import re
    import urllib.request
    from clients.cli.dev import CONTROLLER_IDS
    for i, cid in enumerate(CONTROLLER_IDS):
        if c.proc(f"controller-{cid}").proc.poll() is not None:
            continue
        try:
            url = f"http://127.0.0.1:{c.layout.controller_metrics_port(i)}/metrics"
            with urllib.request.urlopen(url, timeout=5) as r:
                text = r.read().decode()
        except OSError:
            continue
        m = re.search(r"^raftka_controller_active (\S+)$", text, re.M)
        if m and float(m.group(1)) == 1:
            return f"controller-{cid}"
    return None


def _offline_replicas(c, topic: str) -> dict:
    """{partition: offline replicas} as Metadata answers them (kafka-python)."""
    md = c.admin.describe_topics([topic])[0]
    return {p["partition_index"]: set(p["offline_replicas"]) for p in md["partitions"]}


def test_offline_replicas_are_durable_metadata_across_a_controller_failover(cluster):
    """KIP-858 state in the metadata log: a failed directory's replicas are offline in the
    image of every controller, so the controller elected after a SIGKILL of the active one
    never elects them (a preferred-leader rebalance would hand a single-replica partition back
    to its last ISR member), and Metadata lists them in offline_replicas."""
    victim = 1
    topic, solo, marker = (f"{x}-{uuid.uuid4().hex[:6]}" for x in ("fo", "solo", "mark"))
    _create(cluster, topic, 6, {"min.insync.replicas": "2"})
    cluster.admin.create_topics([NewTopic(solo, replica_assignments={p: [victim] for p in
                                                                     range(4)}),
                                 NewTopic(marker, replica_assignments={0: [2, 0, 1]})])
    _until(lambda: all(leader == victim for leader, _ in _layout(cluster, solo).values()) and
           _layout(cluster, marker).get(0, (-1,))[0] == 2, 30, "new topics led")
    bad = _dirs(cluster, victim)[1]
    doomed = {t: {p for (b, p), where in _where(cluster, t).items()
                  if b == victim and where == [(bad, False)]} for t in (topic, solo)}
    assert doomed[topic] and doomed[solo] and len(doomed[solo]) < 4
    writer = Writer(cluster, topic, 6)
    try:
        _until(lambda: len(writer.acked) > 500, 60, "records acknowledged before the failure")
        open(os.path.join(bad, FAULT), "w").close()
        _until(lambda: all(_layout(cluster, topic)[p][0] != victim and victim not in
                           _layout(cluster, topic)[p][1] for p in doomed[topic]) and
               all(_layout(cluster, solo)[p][0] == -1 for p in doomed[solo]), 60,
               "the failed directory's replicas out of leadership")
        # Metadata names them offline (the broker itself is live)
        assert _until(lambda: all(victim in _offline_replicas(cluster, t)[p]
                                  for t in doomed for p in doomed[t]), 30, "offline_replicas")
        healthy = _offline_replicas(cluster, solo)
        assert all(healthy[p] == set() for p in range(4) if p not in doomed[solo])
        active = _until(lambda: _active_controller(cluster), 30, "an active controller")
        cluster.kill(active)
        _until(lambda: _active_controller(cluster) not in (None, active), 60,
               "another controller active")
        # a preferred-leader rebalance on the new controller: broker 2 restarted loses the
        # marker's leadership, which the rebalance gives back once it is in sync again
        cluster.restart_broker(2)
        # (the marker's replica on broker 1 may be in the failed directory too: not in its ISR)
        _until(lambda: _layout(cluster, marker)[0][0] == 2, 60,
               "the new controller's preferred-leader rebalance ran")
        for t in doomed:
            now = _layout(cluster, t)
            assert all(now[p][0] != victim for p in doomed[t]), (t, now)
        assert all(_layout(cluster, solo)[p][0] == -1 for p in doomed[solo])
        assert all(_layout(cluster, solo)[p][0] == victim for p in range(4)
                   if p not in doomed[solo])
        count = len(writer.acked)
        _until(lambda: len(writer.acked) > count + 200, 60, "writes go on after the failover")
    finally:
        writer.finish()
    assert writer.failed == []
    _read_back(cluster, topic, 6, writer.acked)
    # the directory fixed and the broker restarted: its replicas are back, online
    os.unlink(os.path.join(bad, FAULT))
    cluster.restart_broker(victim)
    _until(lambda: all(leader == victim for leader, _ in _layout(cluster, solo).values()), 60,
           "the single-replica partitions led again")
    assert all(not x for x in _offline_replicas(cluster, solo).values())
    from clients.cli.dev import CONTROLLER_IDS
    cluster.restart_controller(CONTROLLER_IDS.index(int(active.split("-")[1])))


RATE_KEY = "replica.alter.log.dirs.io.max.bytes.per.second"


def _set_broker_config(c, broker: int, key: str, value: str | None) -> None:
    from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry,
                                       ConfigResource)
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    op = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
    res = ConfigResource(ConfigResource.Type.BROKER, str(broker), incremental_configs=[
        ConfigEntry(key, value or "", incremental_operation=op)])
    admin.incremental_alter_configs([res])[res].result(30)

    def shown():
        got = admin.describe_configs([ConfigResource(ConfigResource.Type.BROKER, str(broker))])
        entry = next(iter(got.values())).result(30)[key]
        return entry.value == value if value is not None else entry.is_default
    _until(shown, 30, f"{key} reached broker {broker}")


def _future_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(path, n)) for n in os.listdir(path)
               if n.endswith(".log"))


def test_a_throttled_move_resumes_after_a_restart_and_takes_a_new_rate(cluster):
    """replica.alter.log.dirs.io.max.bytes.per.second (dynamic, per broker) bounds the copy;
    the broker SIGKILLed mid-move carries on with the same future log after its restart
    (Kafka's behaviour; the future was discarded before); lifting the throttle reaches the move
    in progress, which then finishes; every acknowledged record is read back once."""
    import glob
    broker, rate = 2, 100_000
    topic = f"thr-{uuid.uuid4().hex[:6]}"
    _create(cluster, topic, 1)
    # small batches: a copy step takes whole batches, so one batch may overdraw the credit
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 20,
                  "batch.size": 16384})
    acked = {}
    for i in range(3000):
        p.produce(topic, b"%d-" % i + os.urandom(500).hex().encode(), partition=0,
                  on_delivery=lambda e, m: acked.__setitem__((m.partition(), m.offset()),
                                                             m.value()) if e is None else None)
    assert p.flush(60) == 0 and len(acked) == 3000          # ~3 MB
    _set_broker_config(cluster, broker, RATE_KEY, str(rate))
    src = _where(cluster, topic)[(broker, 0)][0][0]
    dest = next(d for d in _dirs(cluster, broker) if d != src)
    started = time.monotonic()
    tpr = TopicPartitionReplica(topic, 0, broker)
    assert cluster.admin.alter_replica_log_dirs({tpr: dest}) == {tpr: NoError}
    future = _until(lambda: glob.glob(os.path.join(dest, f"{topic}-0.*-future")), 30,
                    "the future log")[0]
    _until(lambda: _future_bytes(future) > 2 * rate, 60, "some bytes copied")
    # the bound: one second of credit plus the rate since the move began, plus a batch (a
    # slow machine only copies less), and the move is far from done
    copied, elapsed = _future_bytes(future), time.monotonic() - started
    assert copied <= rate * (elapsed + 1) + 65536, (copied, elapsed)
    assert set(_where(cluster, topic)[(broker, 0)]) == {(dest, True), (src, False)}  # moving
    cluster.kill(f"broker-{broker}")
    at_kill = _future_bytes(future)
    cluster.restart_broker(broker)
    # the same future log, carried on from where it was (a new move would be a new name)
    assert glob.glob(os.path.join(dest, f"{topic}-0.*-future")) == [future]
    _until(lambda: _future_bytes(future) > at_kill, 60, "the copy carries on")
    assert any(f for (b, _), where in _where(cluster, topic).items() if b == broker
               for _, f in where), "DescribeLogDirs lists the future"
    _set_broker_config(cluster, broker, RATE_KEY, None)             # unthrottled from now on
    _until(lambda: _where(cluster, topic)[(broker, 0)] == [(dest, False)], 60,
           "the move finished once the throttle was lifted")
    assert not os.path.exists(future)
    _read_back(cluster, topic, 1, acked)


def test_a_directory_unreadable_at_start_keeps_its_replicas_offline(cluster):
    """A broker started with one of its directories unreadable (a file where the directory
    should be): the partitions not found in its readable directory may live there, so they are
    hosted there as offline replicas (Kafka's LOST directory) and assigned to it: never led,
    never recreated empty; the broker's other replicas serve. The directory back and the broker
    restarted, everything it held is led and read again."""
    victim = 0
    solo = f"unread-{uuid.uuid4().hex[:6]}"
    cluster.admin.create_topics([NewTopic(solo, replica_assignments={p: [victim] for p in
                                                                     range(4)})])
    _until(lambda: len(_layout(cluster, solo)) == 4 and all(
        leader == victim for leader, _ in _layout(cluster, solo).values()), 30, "topic led")
    # one replica: acks=1 (the fixture's min.insync.replicas refuses acks=all here)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "1"})
    acked = {}
    for i in range(200):
        p.produce(solo, b"%d-u" % i, partition=i % 4, on_delivery=lambda e, m: acked.__setitem__(
            (m.partition(), m.offset()), m.value()) if e is None else None)
    assert p.flush(30) == 0 and len(acked) == 200
    bad = _dirs(cluster, victim)[1]
    doomed = {q for (b, q), where in _where(cluster, solo).items() if where == [(bad, False)]}
    assert doomed and len(doomed) < 4, _where(cluster, solo)
    cluster.kill(f"broker-{victim}")
    os.rename(bad, bad + ".away")
    with open(bad, "w") as f:
        f.write("not a directory")
    try:
        cluster.restart_broker(victim)
        _until(lambda: all(_layout(cluster, solo)[q][0] == (-1 if q in doomed else victim)
                           for q in range(4)), 60,
               f"only the unreadable directory's replicas out of leadership ({doomed})")
        _until(lambda: all((victim in _offline_replicas(cluster, solo)[q]) == (q in doomed)
                           for q in range(4)), 30, "offline_replicas")
        # nothing was recreated empty in the readable directory
        assert not any(q in doomed for (b, q) in _where(cluster, solo))
    finally:
        cluster.kill(f"broker-{victim}")
        os.unlink(bad)
        os.rename(bad + ".away", bad)
        cluster.restart_broker(victim)
    _until(lambda: all(leader == victim for leader, _ in _layout(cluster, solo).values()), 60,
           "every partition led again")
    assert all(not x for x in _offline_replicas(cluster, solo).values())
    _read_back(cluster, solo, 4, acked)
