"""A simulated broker: the real replication code driven by simulated messages and timers.

Real pieces: `ReplicaManager` (produce append, min.insync.replicas, acks=all completion, leader
fetch with divergence check), `PartitionState` (HW, ISR proposals, epochs), the follower side of
`FetcherManager` (`_build` requests, `_process` responses: append, truncate, HW), the fetch
handler's response builder. Simulated here: sockets, the clock, the controller client (register,
heartbeat, AlterPartition as in `replication/isr.py`), `Broker.on_image` (mirrored: a few lines
of dispatch), the acks=all purgatory and the fetch long-poll.

Process faults: `crash(power_loss)` forgets everything in memory (and with `power_loss` the
unflushed log suffix); the "disk" (logs and the HW checkpoint) survives. `pause()` freezes the
process (SIGSTOP): messages and timers wait until `resume()`.
"""

from __future__ import annotations

import os
import types

from metadata_quorum.image import MetadataImage
from partition_server.replica_log_info import ReplicaLogInfoReporter
from partition_server.replica_manager import FetchResult, ReplicaManager
from partition_server.replication.fetcher import FetcherManager
from partition_server.replication.isr import NOT_APPLIED
from partition_server.replication.partition import Role
from chaos_tests.sim.storage import Disk
from wire.errors import ErrorCode, KafkaError
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import RESPONSES

FETCH_VERSION = 12


def fetch_response(_broker, _req, results):
    """The Fetch v12 response the handler builds (partition_server/handlers/fetch.py), for the
    fields replication reads: error, high watermark, log start, diverging epoch, records."""
    cls = RESPONSES[ApiKey.FETCH]
    topics: dict = {}
    for topic, p, r in results:
        pd = cls.PartitionData(partition_index=p.partition, error_code=r.error,
                               high_watermark=r.high_watermark,
                               last_stable_offset=r.last_stable_offset,
                               log_start_offset=r.log_start_offset, preferred_read_replica=-1,
                               records=b"".join(x.read() for x in r.records) if r.records else b"")
        if r.diverging_epoch is not None:
            pd.diverging_epoch = cls.EpochEndOffset(epoch=r.diverging_epoch[0],
                                                    end_offset=r.diverging_epoch[1])
        topics.setdefault(topic, []).append(pd)
    return cls(error_code=0, session_id=0,
               responses=[cls.FetchableTopicResponse(topic=t, partitions=ps)
                          for t, ps in topics.items()])


class _Purgatory:
    def __init__(self, broker: "SimBroker"):
        self.broker = broker

    def notify(self, key) -> None:
        self.broker.dirty.add(key)

    def notify_all(self) -> None:
        self.broker.dirty.update(self.broker.replicas.hosted_keys())


class SimBroker:
    def __init__(self, sim, broker_id: int, config: dict):
        self.sim = sim
        self.broker_id = broker_id
        self.name = f"broker-{broker_id}"
        self.cfg = config
        self.config = {"replica.fetch.max.bytes": 1 << 20}     # what FetcherManager reads
        self.disk = Disk(os.path.join(sim.root, self.name))   # survives crashes
        self.up = False
        self.paused = False
        self.incarnation = 0
        self.backlog: list = []
        self.replicas: ReplicaManager | None = None

    # -- process lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        self.up, self.paused = True, False
        self.incarnation += 1
        self.replicas = ReplicaManager(self.broker_id, self._open_log)
        self.log_infos = ReplicaLogInfoReporter(self.broker_id)
        self.replicas.high_watermarks = dict(self.disk.hw_checkpoint)
        self.purgatory = _Purgatory(self)
        self.dirty: set = set()
        self.image = MetadataImage()
        self.broker_epoch = -1
        self.registered = False
        self.req = 0
        # its follower logic (_build/_process), not its tasks
        self.fetcher = FetcherManager(broker_id=self.broker_id, config=self.config,
                                      replicas=self.replicas, purgatory=self.purgatory,
                                      image=lambda: self.image, security=None)
        self.assignments: dict = {}           # (topic, partition) → leader id
        self.fetch_inflight: dict = {}        # leader id → request id
        self.fetch_bodies: dict = {}          # request id → the Fetch sent (to judge its answer)
        self.alter_inflight: dict = {}        # request id → (hosted, change)
        self.produces: dict = {}              # request id → pending acks=all produce
        self.held_fetches: dict = {}          # request id → (src, request, deadline)
        self._register()
        self._every(self.cfg["heartbeat_ms"], self._heartbeat)
        self._every(max(self.cfg["lag_ms"] // 4, 50), self._isr_tick)
        self._every(self.cfg["flush_ms"], self._flush)
        self._every(self.cfg["checkpoint_ms"], self._checkpoint)
        self._every(self.cfg["fetch_retry_ms"], self._fetch_all)

    def crash(self, power_loss: bool) -> int:
        """SIGKILL (page cache survives) or power loss (unflushed data is gone)."""
        self.up = False
        self.paused = False
        self.backlog = []
        self.incarnation += 1
        self.replicas = None
        return self.disk.crash(power_loss)

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        """SIGCONT: what waited runs in order, each message or timer as its own event."""
        if not self.up or not self.paused:
            return
        self.paused = False
        backlog, self.backlog = self.backlog, []
        inc = self.incarnation
        for item in backlog:
            self.sim.sched.after(0, self._replay, inc, item)

    def _replay(self, inc, item) -> None:
        if not self.up or self.incarnation != inc:
            return
        if self.paused:
            self.backlog.append(item)
            return
        if item[0] == "msg":
            self._handle(item[1], item[2])
        else:
            item[1](*item[2])
        self._after_change()

    def _open_log(self, topic, partition, _config):
        return self.disk.open_log(topic, partition)

    # -- timers and messages --------------------------------------------------------------------

    def _timer(self, delay_ms: int, fn, *args) -> None:
        inc = self.incarnation

        def fire():
            if not self.up or self.incarnation != inc:
                return
            if self.paused:
                self.backlog.append(("timer", fn, args))
                return
            fn(*args)
            self._after_change()
        self.sim.sched.after(delay_ms, fire)

    def _every(self, period_ms: int, fn) -> None:
        def again():
            fn()
            self._timer(period_ms, again)
        self._timer(self.sim.sched.rng.randint(1, period_ms), again)

    def accepts(self) -> bool:
        return self.up

    def receive(self, src, msg) -> None:
        if self.paused:
            self.backlog.append(("msg", src, msg))
            return
        self._handle(src, msg)
        self._after_change()

    def _send(self, dst, msg) -> None:
        self.sim.net.send(self.name, dst, msg)

    def _next_req(self) -> int:
        self.req += 1
        return self.req

    def _handle(self, src, msg) -> None:
        kind = msg[0]
        if kind == "image":
            self.apply_image(msg[1])
        elif kind == "registered":
            self._on_registered(*msg[1:])
        elif kind == "heartbeat_ok":
            self._on_heartbeat(*msg[1:])
        elif kind == "alter_partition_ok":
            self._on_alter_partition(*msg[1:])
        elif kind == "fetch":
            self._on_fetch(src, msg[1], msg[2])
        elif kind == "fetch_resp":
            self._on_fetch_response(src, msg[1], msg[2])
        elif kind == "produce":
            self._on_produce(src, *msg[1:])
        elif kind == "consume":
            self._on_consume(src, *msg[1:])
        elif kind == "metadata":
            self._send(src, ("metadata_resp", msg[1], self.image))

    # -- controller client ----------------------------------------------------------------------

    def _register(self) -> None:
        """controller_client.register: retry until a registration answer arrives; only the
        answer to the latest attempt counts (earlier ones went to dropped connections)."""
        self.registered = False
        self.register_req = self._next_req()
        self._send("controller", ("register", self.broker_id,
                                  f"b{self.broker_id}-i{self.incarnation}", self.register_req,
                                  self.disk.intact_epoch))
        self._timer(self.cfg["request_timeout_ms"], self._register_timeout, self.register_req)

    def _register_timeout(self, req) -> None:
        if not self.registered and self.register_req == req:
            self._register()

    def _on_registered(self, req, error, broker_epoch, image) -> None:
        if req != self.register_req or self.registered or error != ErrorCode.NONE:
            return
        self.registered = True
        self.broker_epoch = broker_epoch
        self.disk.intact_epoch = broker_epoch     # clean_shutdown.registered (same boot)
        self.apply_image(image)

    def _heartbeat(self) -> None:
        if self.registered:
            self.heartbeat_req = self._next_req()
            # as the broker's heartbeat: log ends of leaderless replicas (KIP-966 recovery)
            infos = self.log_infos.report(self.image, self.replicas.partitions)
            self._send("controller", ("heartbeat", self.broker_id, self.broker_epoch,
                                      self.image.offset, self.heartbeat_req, infos))

    def _on_heartbeat(self, req, error, _fenced, image) -> None:
        if req != getattr(self, "heartbeat_req", None) or not self.registered:
            return
        if error in (ErrorCode.STALE_BROKER_EPOCH, ErrorCode.BROKER_ID_NOT_REGISTERED):
            self._register()          # our registration is gone: register afresh
            return
        self.apply_image(image)

    def apply_image(self, image) -> None:
        """Mirror of `Broker.on_image`: only newer images; make replicas match it."""
        if image.offset <= self.image.offset:
            return
        self.image = image
        now = self.sim.sched.now
        wanted = set()
        for topic in image.topics.values():
            cfg = image.topic_config(topic.name)
            min_isr = int(cfg.get("min.insync.replicas", "1"))
            for p in topic.partitions.values():
                if self.broker_id not in p.replicas:
                    continue
                wanted.add((topic.name, p.partition_id))
                role = self.replicas.apply_partition(
                    topic.name, topic.topic_id, p.partition_id, list(p.replicas), list(p.isr),
                    p.leader, p.leader_epoch, p.partition_epoch, cfg, min_isr, now,
                    p.replication_factor, p.adding_replicas)
                if role is Role.FOLLOWER and p.leader >= 0:
                    self.assignments[(topic.name, p.partition_id)] = p.leader
                else:
                    self.assignments.pop((topic.name, p.partition_id), None)
        for key in list(self.replicas.hosted_keys()):
            if key not in wanted:
                self.assignments.pop(key, None)
                self.replicas.remove_partition(*key, delete=True)
                self.sim.invariants.on_replica_removed(self, key)
        # FetcherManager.run cancels the task of a leader we no longer follow anything from:
        # its in-flight fetch is abandoned and its answer never processed
        for leader in set(self.fetch_inflight) - set(self.assignments.values()):
            self.fetch_bodies.pop(self.fetch_inflight.pop(leader), None)
        self.purgatory.notify_all()
        self._fetch_all()

    # -- ISR changes (replication/isr.py) -------------------------------------------------------

    def _isr_tick(self) -> None:
        """`Broker._isr_loop` + `send_alter_partition`: every proposed change in one request,
        and the loop waits for its answer (or the timeout) before proposing again. (The real
        loop also waits for the first metadata catch-up, and sends more than
        `housekeeping.ALTER_PARTITION_MAX` changes as several requests: never reached here.)"""
        if self.alter_inflight or not self.registered:
            return
        now = self.sim.sched.now
        changes = []
        for hosted in list(self.replicas.partitions.values()):
            change = hosted.state.isr_change_needed(now, self.cfg["lag_ms"])
            if change is not None:
                changes.append((hosted, change))
        if not changes:
            return
        req = self._next_req()
        self.alter_inflight[req] = changes
        self._send("controller", ("alter_partition", self.broker_id, self.broker_epoch,
                                  [(c, h.topic_id) for h, c in changes], req))
        self._timer(self.cfg["request_timeout_ms"], self._alter_timeout, req)

    def _alter_timeout(self, req) -> None:
        for hosted, _ in self.alter_inflight.pop(req, ()):
            hosted.state.isr_change_uncertain()       # ControllerUnavailable in isr.py

    def _on_alter_partition(self, req, results) -> None:
        changes = self.alter_inflight.pop(req, None)
        if changes is None:
            return                                    # timed out already (a late answer)
        for (hosted, change), res in zip(changes, results):
            # as replication/isr.py: refused against our partition epoch → forget the proposal;
            # other refusals → keep it pending and send again; accepted → apply at once
            if res.error != ErrorCode.NONE:
                if res.error in NOT_APPLIED:
                    hosted.state.isr_change_failed()
                else:
                    hosted.state.isr_change_uncertain()
                continue
            hosted.state.become_leader(res.leader_epoch, res.partition_epoch,
                                       list(hosted.state.replicas), list(res.isr), 0)
            hosted.state.maybe_advance_high_watermark()
            self.purgatory.notify((hosted.topic, hosted.partition))

    # -- leader side: fetch -----------------------------------------------------------------------

    def _read_all(self, body):
        req = types.SimpleNamespace(body=body, api_version=FETCH_VERSION)
        now = self.sim.sched.now
        results = []
        for t in body.topics:
            for p in t.partitions:
                if t.topic not in self.image.topics:
                    results.append((t.topic, p, FetchResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)))
                    continue
                try:
                    res = self.replicas.read(t.topic, p.partition, p.fetch_offset,
                                             p.partition_max_bytes, p.current_leader_epoch,
                                             body.replica_id, p.last_fetched_epoch, now, True)
                except KafkaError as exc:
                    res = FetchResult(exc.error_code)
                results.append((t.topic, p, res))
        return req, results

    def _on_fetch(self, src, req_id, body) -> None:
        req, results = self._read_all(body)
        for t in body.topics:
            for p in t.partitions:
                self.purgatory.notify((t.topic, p.partition))
        has_data = any(r.size for _, _, r in results)
        errors = any(r.error != ErrorCode.NONE for _, _, r in results)
        if has_data or errors or body.max_wait_ms <= 0:
            self._send(src, ("fetch_resp", req_id, fetch_response(self, req, results)))
            return
        # long-poll: answer when something arrives or max_wait passes
        self.held_fetches[req_id] = (src, body)
        self._timer(body.max_wait_ms, self._release_fetch, req_id)

    def _release_fetch(self, req_id) -> None:
        held = self.held_fetches.pop(req_id, None)
        if held is not None:
            src, body = held
            req, results = self._read_all(body)
            self._send(src, ("fetch_resp", req_id, fetch_response(self, req, results)))

    # -- follower side: the real FetcherManager logic ---------------------------------------------

    def _fetch_all(self) -> None:
        for leader in set(self.assignments.values()):
            if leader in self.fetch_inflight:
                continue
            parts = [k for k, v in self.assignments.items() if v == leader]
            body = self.fetcher._build(parts)
            if not body.topics:
                continue
            req = self._next_req()
            self.fetch_inflight[leader] = req
            self.fetch_bodies[req] = body
            self._send(f"broker-{leader}", ("fetch", req, body))
            self._timer(self.cfg["fetch_wait_ms"] + self.cfg["request_timeout_ms"],
                        self._fetch_timeout, leader, req)

    def _fetch_timeout(self, leader, req) -> None:
        if self.fetch_inflight.get(leader) == req:
            del self.fetch_inflight[leader]           # a new connection, the old answer is dropped
            self.fetch_bodies.pop(req, None)

    def _on_fetch_response(self, src, req, resp) -> None:
        leader = int(src.split("-")[1])
        if self.fetch_inflight.get(leader) != req:
            return
        del self.fetch_inflight[leader]
        errors = self.fetcher._process(resp, self.fetch_bodies.pop(req), leader)
        if not errors:
            self._fetch_all()
        # with errors the periodic `_fetch_all` retries after fetch_retry_ms (metadata catches up)

    # -- produce (handlers/produce.py with its purgatory) ------------------------------------------

    def _on_produce(self, src, req, topic, partition, records, acks) -> None:
        if topic not in self.image.topics or self.image.partition(topic, partition) is None:
            self._send(src, ("produce_resp", req, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1))
            return
        res = self.replicas.append_records(topic, partition, records, acks, self.sim.sched.now)
        if res.error != ErrorCode.NONE or acks != -1:
            self._send(src, ("produce_resp", req, res.error, res.base_offset))
            return
        self.purgatory.notify((topic, partition))
        self.produces[req] = (src, topic, partition, res)
        self._timer(self.cfg["request_timeout_ms"], self._produce_timeout, req)

    def _produce_timeout(self, req) -> None:
        entry = self.produces.pop(req, None)
        if entry is not None:
            src, topic, partition, res = entry
            outcome = self.replicas.produce_completion(topic, partition, res.last_offset)
            code = ErrorCode.REQUEST_TIMED_OUT if outcome is None else outcome
            self._send(src, ("produce_resp", req, code, res.base_offset))

    def _after_change(self) -> None:
        """What `purgatory.notify` wakes in the real broker: acks=all waiters, held fetches."""
        if not self.up or self.replicas is None or not self.dirty:
            return
        dirty, self.dirty = self.dirty, set()
        for req, (src, topic, partition, res) in list(self.produces.items()):
            if (topic, partition) not in dirty:
                continue
            outcome = self.replicas.produce_completion(topic, partition, res.last_offset)
            if outcome is not None:
                del self.produces[req]
                self._send(src, ("produce_resp", req, outcome, res.base_offset))
        for req_id, (src, body) in list(self.held_fetches.items()):
            if any((t.topic, p.partition) in dirty for t in body.topics for p in t.partitions):
                req, results = self._read_all(body)
                if any(r.size or r.error != ErrorCode.NONE for _, _, r in results):
                    del self.held_fetches[req_id]
                    self._send(src, ("fetch_resp", req_id, fetch_response(self, req, results)))

    # -- consumers ---------------------------------------------------------------------------------

    def _on_consume(self, src, req, topic, partition, offset, epoch) -> None:
        try:
            res = self.replicas.read(topic, partition, offset, 1 << 16, epoch, -1, -1,
                                     self.sim.sched.now, True)
        except KafkaError as exc:
            res = FetchResult(exc.error_code)
        data = b"".join(x.read() for x in res.records)
        self._send(src, ("consume_resp", req, res.error, data, res.high_watermark))

    # -- housekeeping ------------------------------------------------------------------------------

    def _flush(self) -> None:
        for hosted in self.replicas.partitions.values():
            hosted.log.flush()

    def _checkpoint(self) -> None:
        offsets = self.replicas.high_watermarks_to_checkpoint()
        if offsets is not None:
            self.disk.hw_checkpoint = dict(offsets)
