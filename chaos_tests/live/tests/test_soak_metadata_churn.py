"""Metadata-churn soak (issue 17): a 3-controller + 3-broker cluster runs for RAFTKA_SOAK_SECONDS
(default 3600) under metadata churn while an idempotent acks=all producer writes to a fixed topic,
then the whole cluster restarts cleanly; nothing acknowledged may be lost and the controllers
must hold identical metadata.

Churn, one action at a time from a seeded `random.Random` (RAFTKA_SOAK_SEED, printed):
- CreateTopics of a `churn-<n>` topic (1-4 partitions, RF 3, min.insync.replicas 2), and
  DeleteTopics of the oldest once more than a few exist;
- IncrementalAlterConfigs SET/DELETE of `retention.ms` / `max.message.bytes` on a churn topic,
  and SET of a long `retention.ms` on the data topic;
- ISR changes: one broker at a time is paused (SIGSTOP) for 1-7 s on a timer thread, then
  resumed (SIGCONT); `replica.lag.time.max.ms` is 3 s, so most pauses take the broker out of
  the ISRs it is in (AlterPartition from the leaders) and back in once it catches up; pauses stay
  under the 9 s broker session timeout, so it is rarely fenced (a leader it was can be).
Admin requests may fail or time out while a broker is paused; those are counted, never asserted
on. What the churn knows for certain (a topic whose creation succeeded and that was never
asked to be deleted, a topic whose deletion succeeded, a config whose last change succeeded) is
checked against the controllers' image after the restart.

A consumer group member (`soak-group`) reads the data topic the whole time and commits what it
read after every poll that returned records: hours of uptime pile commits into one
`__consumer_offsets` partition, which the group's coordinator replays after the full restart
(partition_server/coordinator_load.py). Its commits may fail while a broker is paused (counted);
after the churn it commits its position once more until that is acknowledged, and after the
restart the group's committed offsets must be exactly that.

After the churn: resume every broker, let the producer finish, wait for a full ISR on the data
topic; check that every controller holds the same image (`controller_images`, FetchSnapshot to
each controller's own listener at one end offset) and that the image replayed from each
controller's metadata stream agrees with its snapshot (when the stream still starts at 0);
stop the whole cluster as `raftka dev` does (SIGTERM brokers, then controllers) and start it
again on the same data; check the images again (same topics, topic ids, partitions' replicas and
configs as before the restart); read the data topic back and run the history checkers (no lost
acknowledged write, no duplicate, no reordering, no inconsistent offset).

    RAFTKA_SOAK=1 RAFTKA_SOAK_SECONDS=120 python3 -m pytest \
        chaos_tests/live/tests/test_soak_metadata_churn.py -v
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                                   NewTopic, ResourceType)

from chaos_tests.checkers import History, assert_valid
from chaos_tests.live.admin import create_topic, full_isr, describe, wait_for
from chaos_tests.live.cluster import low_port_cluster
from chaos_tests.live.faults import FAULTS
from chaos_tests.live.metadata_images import (assert_same_images, controller_addresses,
                                              controller_images, log_image)
from chaos_tests.live.workload import Writer, final_read
from clients.cli.dev import BROKER_IDS, stop_cluster

pytestmark = [pytest.mark.live, pytest.mark.slow]

SOAK_S = float(os.environ.get("RAFTKA_SOAK_SECONDS", "3600"))
DATA_TOPIC = "soak-data"
DATA_PARTITIONS = 3
GROUP = "soak-group"
MAX_CHURN_TOPICS = 6
ADMIN_TIMEOUT_S = 15
EXISTS, GONE, UNKNOWN = "exists", "gone", "unknown"


class Churn:
    """Metadata churn through the brokers, with what is known for certain about its outcome."""

    def __init__(self, cluster, rng: random.Random):
        self.cluster = cluster
        self.rng = rng
        self.admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        self.n = 0
        self.topics: dict[str, str] = {}                  # name → EXISTS / GONE / UNKNOWN
        self.live: list[str] = []                         # asked to exist, oldest first
        # (topic, key) → value (None: deleted), or UNKNOWN when the last change is in doubt
        self.configs: dict[tuple[str, str], object] = {}
        self.counts: dict[str, list[int]] = {}            # action → [ok, failed]
        self.paused: str | None = None
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()

    def _count(self, action: str, ok: bool) -> None:
        c = self.counts.setdefault(action, [0, 0])
        c[0 if ok else 1] += 1

    def _wait(self, futures) -> bool:
        try:
            for f in futures.values():
                f.result(ADMIN_TIMEOUT_S + 5)
            return True
        except (KafkaException, TimeoutError, RuntimeError):
            return False
        except Exception:                                  # noqa: BLE001 - concurrent.futures
            return False

    def create(self) -> None:
        self.n += 1
        name = f"churn-{self.n}"
        futures = self.admin.create_topics(
            [NewTopic(name, self.rng.randint(1, 4), 3, config={"min.insync.replicas": "2"})],
            operation_timeout=ADMIN_TIMEOUT_S, request_timeout=ADMIN_TIMEOUT_S)
        ok = self._wait(futures)
        self._count("create", ok)
        self.topics[name] = EXISTS if ok else UNKNOWN
        self.configs[(name, "min.insync.replicas")] = "2" if ok else UNKNOWN
        self.live.append(name)

    def delete(self) -> None:
        name = self.live.pop(0)
        ok = self._wait(self.admin.delete_topics([name], operation_timeout=ADMIN_TIMEOUT_S,
                                                 request_timeout=ADMIN_TIMEOUT_S))
        self._count("delete", ok)
        self.topics[name] = GONE if ok else UNKNOWN

    def alter(self) -> None:
        if self.live and self.rng.random() < 0.8:
            topic = self.rng.choice(self.live)
            key = self.rng.choice(["retention.ms", "max.message.bytes"])
            if self.rng.random() < 0.25:
                op, value = AlterConfigOpType.DELETE, None
            else:
                op = AlterConfigOpType.SET
                value = str(self.rng.randint(3_600_000, 86_400_000) if key == "retention.ms"
                            else self.rng.randint(100_000, 2_000_000))
        else:                                             # the data topic: long retention only
            topic, key, op = DATA_TOPIC, "retention.ms", AlterConfigOpType.SET
            value = str(self.rng.randint(7, 30) * 86_400_000)
        resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
            ConfigEntry(key, value, incremental_operation=op)])
        ok = self._wait(self.admin.incremental_alter_configs([resource],
                                                             request_timeout=ADMIN_TIMEOUT_S))
        self._count("alter_config", ok)
        self.configs[(topic, key)] = value if ok else UNKNOWN

    def pause(self) -> None:
        with self._lock:
            if self.paused is not None:
                return
            target = f"broker-{self.rng.choice(BROKER_IDS)}"
            FAULTS["sigstop"].inject(self.cluster, target)
            self.paused = target
            self._count("pause", True)
            self._timer = threading.Timer(self.rng.uniform(1.0, 7.0), self.resume)
            self._timer.daemon = True
            self._timer.start()

    def resume(self) -> None:
        with self._lock:
            if self.paused is not None:
                FAULTS["sigstop"].heal(self.cluster, self.paused)
                self.paused = None

    def run_until(self, deadline: float) -> None:
        actions = [(self.create, 3), (self.delete, 2), (self.alter, 4), (self.pause, 1)]
        while time.monotonic() < deadline:
            act = self.rng.choices([a for a, _ in actions], [w for _, w in actions])[0]
            if act == self.delete and len(self.live) <= MAX_CHURN_TOPICS // 2:
                act = self.create
            if act == self.create and len(self.live) >= MAX_CHURN_TOPICS:
                act = self.delete
            act()
            # a gentle pace: metadata churn, not a load test (and the machine is shared)
            time.sleep(self.rng.uniform(0.1, 0.5))

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self.resume()

    def check_image(self, image) -> list[str]:
        """What the churn knows for certain, against one controller's image."""
        problems = []
        for name, state in self.topics.items():
            if state == EXISTS and name not in image.topics:
                problems.append(f"{name} was created (acknowledged) and never deleted, but is gone")
            if state == GONE and name in image.topics:
                problems.append(f"{name} was deleted (acknowledged) but still exists")
        for (topic, key), value in self.configs.items():
            if value == UNKNOWN or (topic != DATA_TOPIC and self.topics.get(topic) != EXISTS):
                continue
            got = image.topic_config(topic).get(key)
            if got != value:
                problems.append(f"{topic} {key}: the last acknowledged change set {value!r}, "
                                f"the image has {got!r}")
        return problems


def _writer_loop(writer: Writer, stop: threading.Event, errors: list) -> None:
    try:
        while not stop.is_set():
            writer.write_for(1.0, rate_per_s=200)
    except Exception as exc:                              # noqa: BLE001 - reported by the test
        errors.append(f"{type(exc).__name__}: {exc}")


class Committer:
    """The group member: polls the data topic, commits after each poll that read something."""

    def __init__(self, bootstrap: str):
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP,
                                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
        self.consumer.subscribe([DATA_TOPIC])
        self.next: dict[int, int] = {}          # partition → offset after the last record read
        self.counts = [0, 0]                    # commits acknowledged, failed
        self.read = 0

    def offsets(self) -> list:
        return [TopicPartition(DATA_TOPIC, p, o) for p, o in sorted(self.next.items())]

    def step(self) -> None:
        msgs = self.consumer.consume(500, 0.1)
        for m in msgs:
            if m.error() is None:
                self.next[m.partition()] = m.offset() + 1
                self.read += 1
        if not msgs or not self.next:
            return
        try:
            self.consumer.commit(offsets=self.offsets(), asynchronous=False)
            self.counts[0] += 1
        except KafkaException:
            self.counts[1] += 1                 # a paused coordinator, say: the next one

    def final_commit(self, timeout_s: float) -> dict[int, int]:
        """Commit the position until acknowledged; returns it."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self.consumer.commit(offsets=self.offsets(), asynchronous=False)
                return dict(self.next)
            except KafkaException as exc:
                if time.monotonic() > deadline:
                    raise AssertionError(f"the group's final commit failed for {timeout_s} s: "
                                         f"{exc}") from exc
                time.sleep(0.5)


def _committer_loop(committer: Committer, stop: threading.Event, errors: list) -> None:
    try:
        while not stop.is_set():
            committer.step()
    except Exception as exc:                              # noqa: BLE001 - reported by the test
        errors.append(f"{type(exc).__name__}: {exc}")


def committed_offsets(bootstrap: str, partitions: int) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP,
                  "enable.auto.commit": False})
    try:
        got = c.committed([TopicPartition(DATA_TOPIC, p) for p in range(partitions)],
                          timeout=60)
        return {tp.partition: tp.offset for tp in got if tp.offset >= 0}
    finally:
        c.close()


def durable_view(image) -> dict:
    """What a clean restart must keep: topics (id, partitions' replicas) and configs."""
    return {"topics": {name: (str(t.topic_id), {p: tuple(s.replicas)
                                                 for p, s in sorted(t.partitions.items())})
                       for name, t in sorted(image.topics.items())},
            "configs": {f"{k[0]}/{k[1]}": dict(sorted(v.items()))
                        for k, v in sorted(image.configs.items())}}


def check_controllers(cluster, churn: Churn) -> dict:
    images = controller_images(cluster, timeout_s=120)
    assert len(images) == 3, f"only controllers {sorted(images)} answered"
    assert_same_images(images)
    replay_checked = {}
    for cid, (host, port) in controller_addresses(cluster).items():
        replayed = log_image(host, port)
        # compared only at the same offset: a record committed in between is no difference
        if replayed is not None and replayed.offset == images[cid].offset:
            assert replayed.same_state(images[cid]), \
                f"controller {cid}: its metadata stream replayed from 0 differs from its image"
        replay_checked[cid] = "same" if replayed is not None and \
            replayed.offset == images[cid].offset else \
            ("stream starts after 0" if replayed is None else "moved on, not compared")
    print(f"stream replayed from 0 vs image: {replay_checked}")
    image = next(iter(images.values()))
    data = image.topics[DATA_TOPIC].partitions
    # evidence that the pauses moved ISRs: each ISR or leader change bumps the partition epoch
    print(f"controllers agree at offset {image.offset}; {DATA_TOPIC} partition epochs "
          f"{ {p: s.partition_epoch for p, s in sorted(data.items())} }, leader epochs "
          f"{ {p: s.leader_epoch for p, s in sorted(data.items())} }")
    problems = churn.check_image(image)
    assert not problems, "metadata lost or wrong:\n" + "\n".join(problems)
    return durable_view(image)


def _log_tails(cluster, lines: int = 15) -> str:
    out = []
    for p in cluster.procs:
        try:
            tail = cluster.layout.log_path(p.name).read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            tail = []
        out.append(f"--- {p.name} (exit {p.proc.poll()}):\n" + "\n".join(tail))
    return "\n".join(out)


def _started(loop, *args) -> threading.Thread:
    t = threading.Thread(target=loop, args=args, daemon=True, name=loop.__name__)
    t.start()
    return t


def full_restart(cluster) -> None:
    """The whole cluster, stopped as `raftka dev` stops on Ctrl-C, then started again; returns
    once the data topic's ISR is full."""
    stop_cluster(cluster.procs)
    unclean = {p.name: p.proc.returncode for p in cluster.procs if p.proc.returncode != 0}
    print(f"clean stop: exit codes other than 0: {unclean or 'none'}")
    try:
        cluster.start(timeout_s=180)
    except RuntimeError as exc:
        raise AssertionError(f"the cluster did not come back after a clean full restart: "
                             f"{exc}\n{_log_tails(cluster)}") from exc
    wait_for(lambda: full_isr(cluster.bootstrap, DATA_TOPIC, DATA_PARTITIONS), 120,
             "a full ISR on the data topic after the restart",
             describe=lambda: describe(cluster.bootstrap, DATA_TOPIC))


def test_metadata_churn_soak_then_full_restart(tmp_path):
    seed = int(os.environ.get("RAFTKA_SOAK_SEED", str(random.randrange(1 << 30))))
    print(f"metadata churn soak: {SOAK_S:.0f}s, seed {seed} (RAFTKA_SOAK_SEED to replay)")
    rng = random.Random(seed)
    history = History()
    cluster = low_port_cluster(tmp_path / "cluster", {"broker.heartbeat.interval.ms": "500",
                                                      "replica.lag.time.max.ms": "3000"})
    churn = writer = None
    stop_writing = threading.Event()
    stop_committing = threading.Event()
    writer_errors: list[str] = []
    try:
        cluster.start()
        create_topic(cluster.bootstrap, DATA_TOPIC, DATA_PARTITIONS)
        writer = Writer(cluster.bootstrap, DATA_TOPIC, DATA_PARTITIONS, history, name="soak")
        writing = _started(_writer_loop, writer, stop_writing, writer_errors)
        committer = Committer(cluster.bootstrap)
        committing = _started(_committer_loop, committer, stop_committing, writer_errors)
        churn = Churn(cluster, rng)
        try:
            churn.run_until(time.monotonic() + SOAK_S)
        finally:
            churn.stop()
            stop_writing.set()
            writing.join(30)
            stop_committing.set()
            committing.join(30)
        print(f"churn: {churn.counts}; writer sent {writer.n}, acknowledged {writer.acked}; "
              f"the group read {committer.read} records, commits acknowledged / failed "
              f"{committer.counts}")
        assert not writer_errors, writer_errors
        assert committer.counts[0] > 0, "the group never committed"
        committed = committer.final_commit(120)
        committer.consumer.close()
        assert writer.flush(150) == 0, "acks=all writes still outstanding 150 s after the churn"
        assert churn.counts.get("create", [0])[0] and churn.counts.get("alter_config", [0])[0], \
            f"the churn changed nothing: {churn.counts}"
        wait_for(lambda: full_isr(cluster.bootstrap, DATA_TOPIC, DATA_PARTITIONS), 120,
                 "a full ISR on the data topic after the churn",
                 describe=lambda: describe(cluster.bootstrap, DATA_TOPIC))
        before = check_controllers(cluster, churn)

        full_restart(cluster)
        after = check_controllers(cluster, churn)
        assert after == before, "topics or configs changed across the clean restart"
        # the group's coordinator replayed its partition: the last acknowledged commit is there
        reloaded = committed_offsets(cluster.bootstrap, DATA_PARTITIONS)
        assert reloaded == committed, \
            f"committed offsets after the restart {reloaded}, acknowledged before {committed}"
        final_read(cluster.bootstrap, DATA_TOPIC, DATA_PARTITIONS, history, timeout_s=120)
    finally:
        stop_committing.set()
        if churn is not None:
            churn.stop()
        for p in cluster.procs:                           # a paused broker cannot stop
            if p.proc.poll() is None:
                p.proc.send_signal(signal.SIGCONT)
        cluster.stop()
    assert_valid(history, idempotent=True, dump_to=tmp_path / "soak.jsonl")
    assert len(history.acked) == writer.acked > 0
