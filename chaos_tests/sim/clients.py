"""Simulated clients that record what they saw into a `History`.

`SimProducer`: an idempotent acks=all producer (one batch in flight, retries keep the batch and
its sequence, as librdkafka does). A batch that cannot be delivered within the delivery timeout
is given up: UNKNOWN if some attempt may have been appended, FAIL if every attempt was refused
before append; the producer then starts over with a new producer id (an epoch bump would do).
`SimConsumer`: reads committed records from the leader it knows, in order, and records each.
"""

from __future__ import annotations

from chaos_tests.checkers import FAIL, OK, UNKNOWN
from wire.errors import ErrorCode
from wire.records.batch import decode_batch, build_batch

# Refused before anything was appended: the attempt cannot have written the batch.
NOT_APPENDED = {ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NOT_LEADER_OR_FOLLOWER,
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.FENCED_LEADER_EPOCH,
                ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.KAFKA_STORAGE_ERROR}
GIVE_UP = {ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorCode.UNKNOWN_PRODUCER_ID,
           ErrorCode.INVALID_PRODUCER_EPOCH}


class _Client:
    def __init__(self, sim, name: str, topic: str, partition: int):
        self.sim = sim
        self.name = name
        self.topic = topic
        self.partition = partition
        self.leader = -1
        self.leader_epoch = -1
        self.req = 0
        self.waiting = None               # request id we wait for
        self.stopped = False

    def accepts(self) -> bool:
        return True

    def _send_to(self, broker_id: int, msg) -> int:
        self.req += 1
        self.waiting = self.req
        self.sim.net.send(self.name, f"broker-{broker_id}", (msg[0], self.req) + msg[1:])
        return self.req

    def refresh_metadata(self) -> None:
        b = self.sim.sched.rng.choice(self.sim.brokers)
        req = self._send_to(b.broker_id, ("metadata",))
        self.sim.sched.after(300, self._metadata_timeout, req)

    def _metadata_timeout(self, req) -> None:
        if self.waiting == req:
            self.refresh_metadata()

    def _on_metadata(self, image) -> None:
        p = image.partition(self.topic, self.partition)
        if p is None or p.leader < 0:
            self.sim.sched.after(100, self.refresh_metadata)
            return
        self.leader, self.leader_epoch = p.leader, p.leader_epoch
        self.sim.sched.after(1, self.next)

    def receive(self, src, msg) -> None:
        if msg[1] != self.waiting:
            return                      # a late or duplicated answer on a dropped "connection"
        self.waiting = None
        if msg[0] == "metadata_resp":
            self._on_metadata(msg[2])
        else:
            self.on_response(*msg[2:])


class SimProducer(_Client):
    def __init__(self, sim, name, topic, partition, first_pid: int):
        super().__init__(sim, name, topic, partition)
        self.pid = first_pid
        self.seq = 0
        self.counter = 0
        self.batch = None                 # (values, bytes, first attempt time)
        self.maybe_appended = False
        self.acked = 0

    def start(self) -> None:
        self.refresh_metadata()

    def next(self) -> None:
        if self.waiting is not None:
            return
        if self.batch is None:
            if self.stopped:
                return
            n = self.sim.sched.rng.randint(1, 3)
            values = [f"{self.name}-{self.counter + i}" for i in range(n)]
            self.counter += n
            data = build_batch([(None, v.encode(), None, 0) for v in values],
                               producer_id=self.pid, producer_epoch=0, base_sequence=self.seq,
                               now_ms=0)
            self.batch = (values, data, self.sim.sched.now)
            self.maybe_appended = False
        if self.leader < 0:
            self.refresh_metadata()
            return
        values, data, _ = self.batch
        req = self._send_to(self.leader, ("produce", self.topic, self.partition, data, -1))
        self.sim.sched.after(self.sim.cfg["request_timeout_ms"] + 500, self._timeout, req)

    def _timeout(self, req) -> None:
        if self.waiting == req:
            self.waiting = None
            self.maybe_appended = True
            self._retry(refresh=True)

    def _retry(self, refresh: bool) -> None:
        values, _, first = self.batch
        if self.sim.sched.now - first > self.sim.cfg["delivery_timeout_ms"]:
            self._finish(UNKNOWN if self.maybe_appended else FAIL, None, "delivery timeout")
            return
        if refresh:
            self.leader = -1
        self.sim.sched.after(self.sim.sched.rng.randint(20, 100), self.next)

    def _finish(self, outcome, base_offset, error) -> None:
        values, _, _ = self.batch
        now = self.sim.sched.now
        for i, v in enumerate(values):
            offset = base_offset + i if outcome == OK else None
            self.sim.history.produce(v, self.partition, outcome, offset, process=self.name,
                                     time=now, error=error)
            if outcome == OK:
                self.sim.invariants.on_ack(self.topic, self.partition, offset, v)
        if outcome == OK:
            self.acked += len(values)
            self.seq += len(values)
        else:
            self.pid += 1                 # start over: sequence state may be unknowable
            self.seq = 0
        self.batch = None
        self.sim.sched.after(self.sim.sched.rng.randint(0, 20), self.next)

    def on_response(self, error, base_offset) -> None:
        if error == ErrorCode.NONE:
            self._finish(OK, base_offset, None)
        elif error in GIVE_UP:
            self._finish(UNKNOWN if self.maybe_appended else FAIL, None, ErrorCode(error).name)
        else:
            if error not in NOT_APPENDED:
                self.maybe_appended = True        # timed out / shrank after append: in doubt
            self._retry(refresh=error not in (ErrorCode.NOT_ENOUGH_REPLICAS,
                                              ErrorCode.REQUEST_TIMED_OUT,
                                              ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND))


class SimConsumer(_Client):
    def __init__(self, sim, name, topic, partition):
        super().__init__(sim, name, topic, partition)
        self.position = 0

    def start(self) -> None:
        self.refresh_metadata()

    def next(self) -> None:
        if self.waiting is not None or self.stopped:
            return
        if self.leader < 0:
            self.refresh_metadata()
            return
        req = self._send_to(self.leader, ("consume", self.topic, self.partition, self.position,
                                          self.leader_epoch))
        self.sim.sched.after(1000, self._timeout, req)

    def _timeout(self, req) -> None:
        if self.waiting == req:
            self.waiting = None
            self.leader = -1
            self.next()

    def on_response(self, error, data, _hw) -> None:
        if error != ErrorCode.NONE:
            self.leader = -1
            self.sim.sched.after(100, self.next)
            return
        now = self.sim.sched.now
        pos = 0
        while pos < len(data):
            batch = decode_batch(data, pos)
            for r in batch.records:
                if r.offset >= self.position:
                    self.sim.history.consume(r.value.decode(), self.partition, r.offset,
                                             process=self.name, time=now)
                    self.position = r.offset + 1
            pos += batch.header.size_in_bytes
        self.sim.sched.after(20 if data else 100, self.next)
