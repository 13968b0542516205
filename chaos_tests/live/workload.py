"""Workloads for live chaos tests; each records what it saw into a `History`.

- `RawProducer`: acks=all Produce requests straight to one broker address on the wire codecs
  (no client library, no retries, no metadata: it keeps writing to a zombie leader after the
  cluster moved on). Every attempt is one record with a unique value; the send and completion
  times are kept so a test can ask what was acknowledged after a given moment.
- `Writer`: an idempotent acks=all confluent-kafka producer with retries.
- `KafkaPythonWriter`: the same with kafka-python (its own retry and reconnect logic).
- `OwnWriter`: the same with Raftka's own trio producer (clients/producer/, idempotent by
  default), driven by `run_until` on a thread of its own.
- `Reader`: a confluent-kafka consumer reading committed records from offset 0 as they come.
- `final_read`: the verification pass after healing (Consume(final=True) records).
"""

from __future__ import annotations

import dataclasses
import threading
import time

import trio
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from chaos_tests.checkers import FAIL, OK, UNKNOWN, History
from clients.connection import BrokerConnection, ConnectionClosed
from wire.errors import DecodeError, ErrorCode
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS
from wire.records.batch import build_batch

PRODUCE_VERSION = 9
# refused before anything was appended: the write certainly did not happen
DEFINITE = {ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NOT_LEADER_OR_FOLLOWER,
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.KAFKA_STORAGE_ERROR,
            ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH,
            ErrorCode.INVALID_REQUIRED_ACKS, ErrorCode.CORRUPT_MESSAGE}


@dataclasses.dataclass
class Attempt:
    value: str
    sent_at: float
    done_at: float
    outcome: str
    offset: int | None
    error: str | None


class RawProducer:
    def __init__(self, host: str, port: int, topic: str, partition: int, history: History,
                 name: str = "raw", concurrency: int = 4, timeout_ms: int = 2000,
                 definite=DEFINITE):
        self.addr = (host, port)
        self.definite = definite
        self.topic, self.partition = topic, partition
        self.history = history
        self.name = name
        self.concurrency = concurrency
        self.timeout_ms = timeout_ms
        self.attempts: list[Attempt] = []
        self._n = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> "RawProducer":
        self._thread = threading.Thread(target=lambda: trio.run(self._main), daemon=True,
                                        name=f"raw-producer-{self.name}")
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.timeout_ms / 1000 + 15)

    async def _main(self) -> None:
        async with trio.open_nursery() as nursery:
            for i in range(self.concurrency):
                nursery.start_soon(self._loop, i)

    def _next_value(self) -> str:
        with self._lock:
            self._n += 1
            return f"{self.name}-{self._n}"

    async def _loop(self, worker: int) -> None:
        conn = None
        while not self._stop.is_set():
            if conn is None:
                conn = BrokerConnection(*self.addr, client_id=f"{self.name}-{worker}")
                try:
                    await conn.connect(timeout_s=2)
                except (ConnectionClosed, OSError, trio.TooSlowError, DecodeError):
                    conn = None
                    await trio.sleep(0.2)
                    continue
            value = self._next_value()
            cls = REQUESTS[ApiKey.PRODUCE]
            req = cls(transactional_id=None, acks=-1, timeout_ms=self.timeout_ms,
                      topic_data=[cls.TopicProduceData(name=self.topic, partition_data=[
                          cls.PartitionProduceData(index=self.partition, records=build_batch(
                              [(None, value.encode(), None, None)]))])])
            sent = time.monotonic()
            offset, error = None, None
            try:
                resp = await conn.request(req, PRODUCE_VERSION, timeout_s=self.timeout_ms / 1000 + 3)
                p = resp.responses[0].partition_responses[0]
                code = ErrorCode(p.error_code)
                if code == ErrorCode.NONE:
                    outcome, offset = OK, p.base_offset
                else:
                    outcome, error = (FAIL if code in self.definite else UNKNOWN), code.name
            except (ConnectionClosed, OSError, trio.TooSlowError, DecodeError) as exc:
                outcome, error = UNKNOWN, type(exc).__name__
                with trio.CancelScope(shield=True):
                    await conn.aclose()
                conn = None
            done = time.monotonic()
            with self._lock:
                self.attempts.append(Attempt(value, sent, done, outcome, offset, error))
                # each worker is one sequential process (order is judged per process)
                self.history.produce(value, self.partition, outcome, offset,
                                     process=f"{self.name}-{worker}", time=done, error=error)
            if outcome != OK:
                await trio.sleep(0.05)
        if conn is not None:
            await conn.aclose()


@dataclasses.dataclass(frozen=True)
class PartitionView:
    leader: int
    leader_epoch: int
    isr: tuple


def partition_view(host: str, port: int, topic: str, partition: int = 0,
                   timeout_s: float = 5) -> PartitionView | None:
    """What ONE broker's metadata says about a partition (a Metadata request to exactly that
    address; client libraries would ask whichever broker they like, a zombie included)."""
    async def ask():
        conn = BrokerConnection(host, port, client_id="chaos-metadata")
        try:
            await conn.connect(timeout_s=timeout_s)
            cls = REQUESTS[ApiKey.METADATA]
            resp = await conn.request(cls(topics=[cls.MetadataRequestTopic(name=topic)],
                                          allow_auto_topic_creation=False), 9,
                                      timeout_s=timeout_s)
        finally:
            await conn.aclose()
        for t in resp.topics:
            for p in t.partitions:
                if t.name == topic and p.partition_index == partition and p.error_code == 0:
                    return PartitionView(p.leader_id, p.leader_epoch, tuple(p.isr_nodes))
        return None
    try:
        return trio.run(ask)
    except (ConnectionClosed, OSError, trio.TooSlowError, DecodeError):
        return None


class Writer:
    """Idempotent acks=all producer; every value's outcome lands in the history (a delivery
    failure after librdkafka's retries is in doubt: UNKNOWN)."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, history: History,
                 name: str = "writer"):
        self.topic, self.partitions = topic, partitions
        self.history = history
        self.name = name
        self.n = 0
        self.acked = 0
        self._lock = threading.Lock()
        self.p = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                           "enable.idempotence": True, "linger.ms": 2,
                           "message.timeout.ms": 120000})

    def _cb(self, err, msg):
        with self._lock:
            value = msg.value().decode()
            if err is None:
                self.acked += 1
                # librdkafka may report no offset (-1001) for an acknowledged retry
                offset = msg.offset() if msg.offset() is not None and msg.offset() >= 0 else None
                self.history.produce(value, msg.partition(), OK, offset,
                                     process=f"{self.name}-{msg.partition()}", time=time.monotonic())
            else:
                self.history.produce(value, msg.partition(), UNKNOWN, process=f"{self.name}-"
                                     f"{msg.partition()}", time=time.monotonic(), error=err.name())

    def write_for(self, seconds: float, rate_per_s: float = 300) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.n += 1
            self.p.produce(self.topic, f"{self.name}-{self.n}".encode(),
                           partition=self.n % self.partitions, on_delivery=self._cb)
            self.p.poll(1 / rate_per_s)

    def flush(self, timeout_s: float = 150) -> int:
        return self.p.flush(timeout_s)

    def close(self) -> None:
        """Shut librdkafka down (its threads and sockets otherwise outlive the test: queued
        messages hold our callback, so the producer is never collected). What is still
        queued is purged first, so close() cannot wait on a dead cluster; a purged value's
        outcome is recorded as UNKNOWN, which it is."""
        self.p.purge()
        self.p.poll(0)
        self.p.close()


class KafkaPythonWriter:
    """`Writer`'s twin on kafka-python: idempotent, acks=all, sequenced values `<name>-<n>` to
    partition n % partitions, outcomes recorded from the delivery futures (on its I/O thread)."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, history: History,
                 name: str = "kpwriter"):
        from kafka import KafkaProducer
        self.topic, self.partitions = topic, partitions
        self.history = history
        self.name = name
        self.n = 0
        self.acked = 0
        self.failed = 0
        self._lock = threading.Lock()
        self.p = KafkaProducer(bootstrap_servers=bootstrap.split(","), acks="all",
                               enable_idempotence=True, linger_ms=2, retries=2**31 - 1,
                               delivery_timeout_ms=120000, request_timeout_ms=15000,
                               max_in_flight_requests_per_connection=5,
                               reconnect_backoff_max_ms=500)

    def _record(self, value: str, partition: int, meta=None, exc=None) -> None:
        with self._lock:
            if exc is None:
                self.acked += 1
                offset = meta.offset if meta.offset is not None and meta.offset >= 0 else None
                self.history.produce(value, partition, OK, offset,
                                     process=f"{self.name}-{partition}", time=time.monotonic())
            else:
                self.failed += 1
                self.history.produce(value, partition, UNKNOWN, process=f"{self.name}-{partition}",
                                     time=time.monotonic(), error=type(exc).__name__)

    def write_for(self, seconds: float, rate_per_s: float = 300) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.n += 1
            value, partition = f"{self.name}-{self.n}", self.n % self.partitions
            fut = self.p.send(self.topic, value.encode(), partition=partition)
            fut.add_callback(lambda meta, v=value, pt=partition: self._record(v, pt, meta=meta))
            fut.add_errback(lambda exc, v=value, pt=partition: self._record(v, pt, exc=exc))
            time.sleep(1 / rate_per_s)

    def flush(self, timeout_s: float = 150) -> int:
        """How many sent values have no outcome yet after waiting (0: all completed)."""
        try:
            self.p.flush(timeout_s)
        except Exception:                  # noqa: BLE001 - kafka-python raises on timeout
            pass
        with self._lock:
            return self.n - self.acked - self.failed

    def close(self) -> None:
        self.p.close(timeout=10)


class OwnWriter:
    """`Writer`'s twin on clients/producer/: idempotence on (its default), acks=all, values
    `<name>-<n>` to partition n % partitions. The producer lives in a trio run on the calling
    thread of `run_until`, which sends until `stop` is set, then flushes."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, history: History,
                 name: str = "own"):
        self.bootstrap = bootstrap
        self.topic, self.partitions = topic, partitions
        self.history = history
        self.name = name
        self.n = 0
        self.acked = 0
        self.failed = 0
        self._lock = threading.Lock()

    def _record(self, value: str, partition: int, meta, exc) -> None:
        with self._lock:
            if exc is None:
                self.acked += 1
                self.history.produce(value, partition, OK,
                                     meta.offset if meta.offset >= 0 else None,
                                     process=f"{self.name}-{partition}", time=time.monotonic())
            else:
                self.failed += 1
                self.history.produce(value, partition, UNKNOWN, process=f"{self.name}-{partition}",
                                     time=time.monotonic(), error=type(exc).__name__)

    def run_until(self, stop: threading.Event, rate_per_s: float = 200) -> None:
        trio.run(self._main, stop, rate_per_s)

    async def _main(self, stop: threading.Event, rate_per_s: float) -> None:
        from clients.producer import Producer as OwnProducer
        config = {"acks": "all", "linger.ms": 2, "delivery.timeout.ms": 120000,
                  "request.timeout.ms": 15000}
        async with OwnProducer(self.bootstrap, config) as p:
            assert p.idempotent, "clients/producer/ is no longer idempotent by default"
            while not stop.is_set():
                self.n += 1
                value, partition = f"{self.name}-{self.n}", self.n % self.partitions
                await p.send(self.topic, value.encode(), partition=partition,
                             on_delivery=lambda meta, exc, v=value, pt=partition:
                             self._record(v, pt, meta, exc))
                await trio.sleep(1 / rate_per_s)
            await p.flush()

    def flush(self, timeout_s: float = 150) -> int:
        """Values without an outcome (`run_until` flushed before returning)."""
        with self._lock:
            return self.n - self.acked - self.failed


def leader_epoch(m) -> int | None:
    """A consumed message's partition leader epoch, None when librdkafka does not know it."""
    e = m.leader_epoch()
    return e if e is not None and e >= 0 else None


class Reader:
    """Reads committed records from offset 0 of each partition on a thread, recording each
    with its key and partition leader epoch (the campaign's checkers read those)."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, history: History,
                 name: str = "reader", isolation_level: str = "read_committed",
                 extra_config: dict | None = None):
        self.history = history
        self.name = name
        # read_committed is librdkafka's default too; said here because F16 depends on it
        self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{name}-{topic}",
                           "enable.auto.commit": False, "auto.offset.reset": "earliest",
                           "isolation.level": isolation_level, **(extra_config or {})})
        self.c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=name)
        self.count = 0

    def start(self) -> "Reader":
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            m = self.c.poll(0.2)
            if m is None or m.error():
                continue
            self.count += 1
            self.history.consume(m.value().decode(), m.partition(), m.offset(),
                                 process=f"{self.name}-{m.partition()}", time=time.monotonic(),
                                 key=m.key().decode() if m.key() else None,
                                 epoch=leader_epoch(m))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.c.close()


# librdkafka 2.x answers _UNKNOWN_PARTITION when its metadata has the partition without a
# leader (leader -1, e.g. its only ISR member was fenced under load), and keeps answering so
# from that cached metadata: _high_watermark refreshes it before asking again
_LEADER_MOVING = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                  KafkaError._TIMED_OUT, KafkaError.OFFSET_NOT_AVAILABLE,
                  KafkaError._UNKNOWN_PARTITION}


def high_watermark(c: Consumer, tp: TopicPartition, timeout_s: float) -> int:
    """The partition's high watermark, asked again while leadership is still moving after the
    faults (a preferred-leader election can answer NOT_LEADER_FOR_PARTITION once; a broker
    fenced under load leaves a partition leaderless until it is back)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return c.get_watermark_offsets(tp, timeout=15)[1]
        except KafkaException as exc:
            if exc.args[0].code() not in _LEADER_MOVING or time.monotonic() > deadline:
                raise AssertionError(f"no high watermark for {tp.topic}-{tp.partition} in "
                                     f"{timeout_s}s: {exc.args[0]}; the partition: "
                                     f"{_partition_state(c, tp)}") from exc
            if exc.args[0].code() == KafkaError._UNKNOWN_PARTITION:
                _partition_state(c, tp)          # a Metadata request renews librdkafka's cache
            time.sleep(0.5)


def _partition_state(c: Consumer, tp: TopicPartition) -> str:
    try:
        topic = c.list_topics(tp.topic, timeout=10).topics[tp.topic]
        part = topic.partitions.get(tp.partition)
        return (f"topic error {topic.error}" if part is None else
                f"leader {part.leader} isr {part.isrs} replicas {part.replicas} error {part.error}")
    except KafkaException as exc:
        return f"(metadata failed: {exc.args[0]})"


def final_read(bootstrap: str, topic: str, partitions: int, history: History,
               timeout_s: float = 60) -> int:
    """Record every committed record of the topic as the final log; returns how many."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"final-{topic}",
                  "enable.auto.commit": False})
    total = 0
    try:
        for p in range(partitions):
            tp = TopicPartition(topic, p, 0)
            high = high_watermark(c, tp, timeout_s)
            c.assign([tp])
            seen = 0
            deadline = time.monotonic() + timeout_s
            while seen < high and time.monotonic() < deadline:
                m = c.poll(0.5)
                if m is None or m.error():
                    continue
                history.consume(m.value().decode(), p, m.offset(), final=True, process="final",
                                time=time.monotonic())
                seen = m.offset() + 1
                total += 1
            if seen < high:
                raise AssertionError(f"final read of {topic}-{p} stopped at {seen} of {high}")
        history.final_read_complete = True
    finally:
        c.close()
    return total


def open_transactions(bootstrap: str, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
    """Partitions whose last stable offset is behind the high watermark (a transaction still
    open there): partition → (LSO, HW). ListOffsets follows the consumer's isolation level."""
    ends = {}
    for level in ("read_committed", "read_uncommitted"):
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"watermarks-{topic}",
                      "isolation.level": level, "enable.auto.commit": False})
        try:
            # asked again while leadership moves (a restarted broker's preferred-leader
            # election): a NOT_LEADER here once ended a campaign run
            ends[level] = [high_watermark(c, TopicPartition(topic, p), 30)
                           for p in range(partitions)]
        finally:
            c.close()
    return {p: (lso, hw) for p, (lso, hw) in
            enumerate(zip(ends["read_committed"], ends["read_uncommitted"])) if lso != hw}


def final_read_committed(bootstrap: str, topic: str, partitions: int, history: History,
                         timeout_s: float = 60) -> int:
    """The final log as read_committed readers see it, once no transaction is open: every
    record recorded as `Consume(final=True)`. Aborted records and markers never arrive, so the
    read ends when every partition reports its end (partition EOF at the LSO, which is the HW
    by then) — not after an idle window: on a loaded machine the first fetch alone took longer
    than a 3 s window, and a campaign round judged an empty final read ("cannot judge")."""
    deadline = time.monotonic() + timeout_s
    while (still := open_transactions(bootstrap, topic, partitions)):
        if time.monotonic() > deadline:
            raise AssertionError(f"transactions still open in {topic} (partition: (LSO, HW)): "
                                 f"{still}")
        time.sleep(0.5)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"final-rc-{topic}",
                  "isolation.level": "read_committed", "enable.auto.commit": False,
                  "enable.partition.eof": True})
    ends = {p: high_watermark(c, TopicPartition(topic, p), timeout_s) for p in range(partitions)}
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    total, done = 0, {p for p, end in ends.items() if end == 0}
    try:
        while len(done) < partitions:
            if time.monotonic() > deadline + timeout_s:
                raise AssertionError(f"final read of {topic}: partitions {sorted(set(ends) - done)}"
                                     f" never reached their end {ends}")
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                eof = m.error().code() == KafkaError._PARTITION_EOF
                if eof and m.offset() >= ends[m.partition()]:
                    done.add(m.partition())
                continue
            history.consume(m.value().decode(), m.partition(), m.offset(), final=True,
                            process="final", time=time.monotonic())
            total += 1
        history.final_read_complete = True      # every partition read to its end
    finally:
        c.close()
    return total