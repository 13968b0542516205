"""The campaign's workloads. Each records into a round's `History` (data plane: what was
acknowledged, read, and the final log) and `OpLog` (every operation's invoke and completion
times: the linearizability checker and the throughput/latency timeline read it).

- `KeyedProducer`: idempotent acks=all confluent-kafka producer; values `w-<n>` (sequenced:
  `sequence-order` applies), keys `k0..k9`, or as many as the topic's partitions when it has
  more (the key picks the partition: `key-order`).
- `epoch_reader`: reads every partition from offset 0 as records come (read_committed),
  recording each record's key and partition leader epoch.
- `MetadataWorker`: CreateTopics / DeleteTopics on a few topic names and config writes
  (IncrementalAlterConfigs of retention.ms on one topic). These are decided by the active
  controller, so their answers must be linearizable. Reads during the run are not modelled:
  a broker answers Metadata and DescribeConfigs from its own image, which lags the controller
  (as in Kafka, where those reads are not linearizable either); the round ends with one read
  per key after the brokers agree, which must fit some linearization of the writes.
- `final_read_with_epochs`: the verification pass (`Consume(final=True)` with epochs, keys).
"""

from __future__ import annotations

import random
import threading
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, \
    NewTopic

from chaos_tests.checkers import OK, UNKNOWN, History
from chaos_tests.checkers import ops as oplog_mod
from chaos_tests.checkers.ops import OpLog
from chaos_tests.live.workload import Reader, high_watermark, leader_epoch

KEYS = 10
CONFIG = "retention.ms"
# librdkafka logs every refused connection while a node is down: thousands of lines per round
# that say nothing the history does not; critical messages only
QUIET = {"log_level": 2}


class KeyedProducer:
    def __init__(self, bootstrap: str, topic: str, history: History, log: OpLog,
                 keys: int = KEYS):
        self.topic, self.history, self.log, self.keys = topic, history, log, keys
        self.n = self.acked = self.refused = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.p = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                           "enable.idempotence": True, "linger.ms": 2,
                           "message.timeout.ms": 60000, **QUIET})
        self._thread = threading.Thread(target=self._run, daemon=True, name="campaign-producer")

    def start(self) -> "KeyedProducer":
        self._thread.start()
        return self

    def _cb(self, err, msg, index: int, key: str) -> None:
        now = time.monotonic()
        value = msg.value().decode()
        with self._lock:
            if err is None:
                self.acked += 1
                offset = msg.offset() if msg.offset() is not None and msg.offset() >= 0 else None
                self.history.produce(value, msg.partition(), OK, offset, process="w",
                                     time=now, key=key)
                self.log.complete(index, oplog_mod.OK, now, result=offset)
            else:
                self.history.produce(value, msg.partition(), UNKNOWN, process="w", time=now,
                                     error=err.name(), key=key)
                self.log.complete(index, oplog_mod.INFO, now, error=err.name())

    def _run(self, rate_per_s: float = 200) -> None:
        while not self._stop.is_set():
            self.n += 1
            key, value = f"k{self.n % self.keys}", f"w-{self.n}"
            index = self.log.invoke("w", "produce", value, time.monotonic())
            try:
                self.p.produce(self.topic, value.encode(), key=key.encode(),
                               on_delivery=lambda e, m, i=index, k=key: self._cb(e, m, i, k))
            except BufferError:
                self.log.complete(index, oplog_mod.FAIL, time.monotonic(), error="BufferError")
            except KafkaException as exc:   # refused before it was queued ("Unknown topic"):
                # certainly not written; before, it ended the thread and the round wrote nothing
                self.log.complete(index, oplog_mod.FAIL, time.monotonic(),
                                  error=_error_name(exc))
                self.refused += 1
            self.p.poll(1 / rate_per_s)

    def stop(self, flush_s: float = 90) -> int:
        """Stop producing, wait for outstanding answers; returns how many never came."""
        self._stop.set()
        self._thread.join(10)
        left = self.p.flush(flush_s)
        self.p.purge()
        self.p.poll(0)
        return left


def epoch_reader(bootstrap: str, topic: str, partitions: int, history: History) -> Reader:
    """The live harness's Reader (it records keys and leader epochs), quiet."""
    return Reader(bootstrap, topic, partitions, history, name="r", extra_config=QUIET)


def final_read_with_epochs(bootstrap: str, topic: str, partitions: int, history: History,
                           timeout_s: float = 60) -> int:
    """Every partition read from offset 0 to its high watermark, all assigned at once (one
    partition after another cost librdkafka's fetch start, ~0.2 s each, over hundreds)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"final-{topic}",
                  "enable.auto.commit": False, **QUIET})
    total = 0
    try:
        highs = {p: high_watermark(c, TopicPartition(topic, p, 0), timeout_s)
                 for p in range(partitions)}
        seen = {p: 0 for p, high in highs.items() if high > 0}
        c.assign([TopicPartition(topic, p, 0) for p in seen])
        deadline = time.monotonic() + timeout_s
        while any(seen[p] < highs[p] for p in seen) and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None or m.error() or m.offset() >= highs[m.partition()]:
                continue
            p = m.partition()
            history.consume(m.value().decode(), p, m.offset(), final=True, process="final",
                            time=time.monotonic(), epoch=leader_epoch(m),
                            key=m.key().decode() if m.key() else None)
            seen[p], total = m.offset() + 1, total + 1
        short = {p: f"{seen[p]} of {highs[p]}" for p in seen if seen[p] < highs[p]}
        if short:
            raise RuntimeError(f"final read of {topic} stopped short: {short}")
        history.final_read_complete = True
    finally:
        c.close()
    return total


# librdkafka's names where they differ from Kafka's (the checkers speak Kafka's)
_KAFKA_NAMES = {"UNKNOWN_TOPIC_OR_PART": "UNKNOWN_TOPIC_OR_PARTITION"}


def _error_name(exc: BaseException) -> str:
    if isinstance(exc, KafkaException) and exc.args and hasattr(exc.args[0], "name"):
        name = exc.args[0].name()
        return _KAFKA_NAMES.get(name, name)
    return type(exc).__name__


# answers that say for certain what the controller did (anything else: in doubt)
_DEFINITE = {"TOPIC_ALREADY_EXISTS", "UNKNOWN_TOPIC_OR_PARTITION", "INVALID_REPLICATION_FACTOR",
             "INVALID_CONFIG", "POLICY_VIOLATION", "INVALID_REQUEST"}


class MetadataWorker:
    """A thread of random create/delete/config-write operations, each recorded in `log`."""

    def __init__(self, bootstrap: str, names: list[str], config_topic: str, log: OpLog,
                 seed: int, process: str = "admin"):
        self.names, self.config_topic, self.log = names, config_topic, log
        self.process = process
        self.rng = random.Random(seed)
        self.admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
        self.count = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="campaign-admin")

    def start(self) -> "MetadataWorker":
        self._thread.start()
        return self

    def _call(self, f: str, key, arg, submit) -> None:
        index = self.log.invoke(self.process, f, (key, arg), time.monotonic())
        try:
            submit().result(timeout=20)
        except Exception as exc:          # noqa: BLE001 - every failure is recorded, typed
            name = _error_name(exc)
            kind = oplog_mod.FAIL if name in _DEFINITE else oplog_mod.INFO
            self.log.complete(index, kind, time.monotonic(), error=name)
        else:
            self.log.complete(index, oplog_mod.OK, time.monotonic())
        self.count += 1

    def step(self) -> None:
        roll, name = self.rng.random(), self.rng.choice(self.names)
        if roll < 0.4:
            self._call("create", name, None, lambda: self.admin.create_topics(
                [NewTopic(name, 1, 3)], operation_timeout=15)[name])
        elif roll < 0.75:
            self._call("delete", name, None, lambda: self.admin.delete_topics(
                [name], operation_timeout=15)[name])
        else:
            value = str(self.rng.randrange(3_600_000, 7_200_000))
            res = ConfigResource(ConfigResource.Type.TOPIC, self.config_topic, incremental_configs=[
                ConfigEntry(CONFIG, value, incremental_operation=AlterConfigOpType.SET)])
            self._call("write", (self.config_topic, CONFIG), value,
                       lambda: self.admin.incremental_alter_configs([res])[res])

    def _run(self) -> None:
        while not self._stop.is_set():
            self.step()
            self._stop.wait(self.rng.uniform(0.05, 0.3))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def final_reads(self, timeout_s: float = 30) -> None:
        """One read per key once the brokers' images agree (each asked in turn)."""
        deadline = time.monotonic() + timeout_s
        while True:
            views = [self._view(b) for b in self._brokers()]
            if all(v == views[0] for v in views) or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        topics, config = views[0]
        now = time.monotonic()
        for name in self.names:
            i = self.log.invoke(self.process, "read", (name, None), now)
            self.log.complete(i, oplog_mod.OK, now, result=name in topics)
        i = self.log.invoke(self.process, "read", ((self.config_topic, CONFIG), None), now)
        self.log.complete(i, oplog_mod.OK, now, result=config)

    def _brokers(self) -> list[str]:
        md = self.admin.list_topics(timeout=10)
        return [f"{b.host}:{b.port}" for b in md.brokers.values()]

    def _view(self, broker: str):
        admin = AdminClient({"bootstrap.servers": broker, **QUIET})
        topics = set(admin.list_topics(timeout=10).topics)
        res = ConfigResource(ConfigResource.Type.TOPIC, self.config_topic)
        entries = admin.describe_configs([res])[res].result(timeout=10)
        entry = entries.get(CONFIG)
        config = entry.value if entry is not None and not entry.is_default else None
        return topics & set(self.names), config
