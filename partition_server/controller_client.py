"""A broker's link to the controller quorum (trio): registration, heartbeats, the metadata
stream, and forwarding admin requests to the active controller.

- The metadata stream is followed from *any* voter (Fetch on `__cluster_metadata`, long-polled);
  records are replayed into a new immutable `MetadataImage` and handed to `on_image`. The image
  offset only moves forward: a voter that answers with an offset below ours is skipped.
- Registration and heartbeats go to the active controller; NOT_CONTROLLER or a dead connection
  moves on to the next voter.
- `controller.quorum.voters` is where to start; once the image carries the voter set
  (VotersRecord, KIP-853) that set is used, so controllers added later are found and removed
  ones are no longer asked.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from typing import Awaitable, Callable

import trio

from common.connection import BrokerConnection, ConnectionClosed
from common.request_metrics import add_remote_time
from common.security import PLAINTEXT, ClientSecurity
from metadata_quorum.image import MetadataImage
from metadata_quorum.records import MetadataRecordError, decode_record
from partition_server.heartbeat_exchange import FAILURES, Exchange
from partition_server.load_report import LoadReporter, by_topic
from partition_server.replica_log_info import by_topic as log_info_by_topic
from wire.errors import DecodeError, ErrorCode
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS
from wire.records.batch import decode_batch, iter_batches

log = logging.getLogger(__name__)

METADATA_TOPIC = "__cluster_metadata"
# A fetched metadata batch at least this big (a broker's controlled shutdown at 30,000
# partitions is ~30,000 records, ~1.5 MiB) is decoded and applied to the image in a worker
# thread: pure work that held the event loop for a quarter of a second and more at that size,
# while the broker answered nothing. The GIL still runs one thread at a time, but trio's loop
# gets its turn every switch interval (5 ms). Small batches, the usual ones, stay on the loop
# (a thread hand-off costs ~0.1 ms).
REPLAY_OFF_LOOP_BYTES = 64 << 10
VERSIONS = {1: 12, 19: 7, 20: 6, 30: 3, 31: 3, 33: 2, 37: 3, 43: 2, 44: 1, 55: 2, 56: 3, 59: 1, 62: 4, 63: 1,
            67: 0, 51: 0, 73: 0}


class ControllerUnavailable(Exception):
    """No voter accepted the request in time."""


def _forget(pool: dict, voter: int, conn: BrokerConnection) -> None:
    """Take `conn` out of `pool` (already closed), unless the pool has moved on to another."""
    if pool.get(voter) is conn:
        del pool[voter]


def _at(exc: BaseException, stage: str) -> BaseException:
    """`exc`, marked with the stage of the call it ended ("while connecting", "after sending")."""
    exc.stage = stage
    return exc


class ControllerClient:
    def __init__(self, broker_id: int, voters: dict[int, tuple[str, int]], host: str, port: int,
                 rack: str | None, heartbeat_interval_ms: int = 2000, *,
                 security: ClientSecurity = PLAINTEXT):
        self.broker_id = broker_id
        self.security = security          # TLS/SASL towards the controllers' listener
        self.voters = dict(sorted(voters.items()))
        self.host, self.port, self.rack = host, port, rack
        # advertised listeners (name, host, port, protocol id), the inter-broker one first
        self.listeners = [("PLAINTEXT", host, port, 0)]
        self.heartbeat_interval_s = heartbeat_interval_ms / 1000
        self.incarnation_id = uuid.uuid4()
        self.broker_epoch = -1
        # the epoch of our last clean shutdown, -1 if there was none (KIP-966); set by the broker
        self.previous_broker_epoch = -1
        self.on_registered: Callable[[int], None] | None = None
        self.image = MetadataImage()
        self.fenced = True
        self.caught_up = False
        # False: heartbeats ask to stay fenced (Kafka's readyToUnfence); a broker sets it once
        # it serves requests from its caught-up image
        self.ready_to_unfence = True
        self.heard_offset = -1            # last metadata offset the quorum told us of (health)
        self._want_shutdown = False
        self._heartbeat_now = trio.Event()    # set: send the next heartbeat without waiting
        self.should_shut_down = False
        self._seen_registered = False     # our current registration was in our image
        self.unregistered = False         # UnregisterBroker removed us (KIP-631)
        self._active_hint = next(iter(self.voters))
        self._failed_at: dict[int, float] = {}     # voter -> when a call to it last failed
        self._heard_at: dict[int, float] = {}      # voter -> when it last answered as active
        self._conns: dict[int, BrokerConnection] = {}        # requests to the active controller
        self._fetch_conns: dict[int, BrokerConnection] = {}  # the long-polled metadata stream
        # heartbeats only: the controller fences a broker soon after this connection closes
        # (metadata_quorum/service.py), so no other request's timeout may close it
        self._heartbeat_conns: dict[int, BrokerConnection] = {}
        # heartbeats that outlived their call at a voter that has them (heartbeat_exchange.py)
        self._parked: dict[int, Exchange] = {}
        self._last_stage = ""             # where the last Exchange was when its call ended
        self.image_changed = trio.Event()
        # the balancer's load report (load_report.py): sizes of the partitions led here, set by
        # the broker; None sends no report
        self.led_sizes: Callable[[], dict] | None = None
        self.load_reporter = LoadReporter()
        # KIP-858: ids of this broker's log directories (registration) and of the offline ones
        # (heartbeats), set by the broker
        self.log_dir_ids: Callable[[], list] = lambda: []
        self.offline_log_dir_ids: Callable[[], list] = lambda: []
        # KIP-966 unclean recovery (replica_log_info.py): log ends of our leaderless replicas,
        # [(topic_id, partition, partition_epoch, last_leader_epoch, log_end_offset)], set by
        # the broker; sent on every heartbeat while there are any
        self.replica_log_infos: Callable[[], list] | None = None

    # -- connections ----------------------------------------------------------------------------

    def _new_conn(self, voter: int) -> BrokerConnection:
        """A connection to `voter`, not yet connected."""
        if voter not in self.voters:         # removed from the quorum since chosen
            raise OSError(f"controller {voter} is no longer a voter")
        host, port = self.voters[voter]
        return BrokerConnection(host, port, client_id=f"broker-{self.broker_id}",
                                security=self.security)

    async def _conn(self, voter: int, pool: dict | None = None) -> BrokerConnection:
        pool = self._conns if pool is None else pool
        conn = pool.get(voter)
        if conn is None:
            conn = self._new_conn(voter)
            await conn.connect(timeout_s=2)
            pool[voter] = conn
        return conn

    async def _drop(self, voter: int, pool: dict | None = None) -> None:
        conn = (self._conns if pool is None else pool).pop(voter, None)
        if conn is not None:
            with trio.CancelScope(shield=True):
                await conn.aclose()

    async def call_active(self, message, timeout_s: float = 10.0, error_of=None,
                          version: int | None = None, pool: dict | None = None,
                          doubt: list | None = None, trail: list | None = None,
                          park: trio.Nursery | None = None):
        """Send to the active controller, trying voters in turn on NOT_CONTROLLER/failure.
        `doubt`: each voter a request was sent to and then got no answer (timed out, connection
        lost) is appended — that request may still take effect, so a later attempt's answer may
        be its doing (a retried CreateTopics answered TOPIC_ALREADY_EXISTS by its own first
        try). `trail`: what happened at each voter tried, in order ("3000: NOT_CONTROLLER"),
        for the log line of a call that failed. `park` (heartbeats): a nursery in which a
        request that outlives the call at a voter that has it waits on for its answer
        (heartbeat_exchange.py)."""
        if version is None:
            version = VERSIONS[message.API_KEY]
        # the voters believed inactive or unreachable last: the longest-failed-ago first
        order = [self._active_hint] + sorted(
            (v for v in self.voters if v != self._active_hint),
            key=lambda v: self._failed_at.get(v, 0.0))
        if park is not None:
            self._collect_parked(pool, error_of)
            # the others are asked first: a voter that has not answered the last heartbeat
            # yet may be paused, and a controller elected in its place must hear from us
            order = [v for v in order if v not in self._parked] + \
                [v for v in order if v in self._parked]
        started = trio.current_time()
        try:
            return await self._call_in_turn(order, message, version, timeout_s, error_of, pool,
                                            doubt, [] if trail is None else trail, park)
        finally:        # a forwarded admin request waits on the quorum (RemoteTimeMs)
            add_remote_time(trio.current_time() - started)

    async def _call_in_turn(self, order, message, version, timeout_s, error_of, pool, doubt,
                            trail: list, park):
        voter, stage = None, ""
        with trio.move_on_after(timeout_s):
            while True:
                for voter in order:
                    stage = "while connecting"
                    try:
                        if park is None:
                            conn = await self._conn(voter, pool)
                            stage = "after sending"
                            resp = await conn.request(message, version, timeout_s=5)
                        else:
                            resp = await self._exchange(voter, message, version, pool, park,
                                                        error_of)
                    except FAILURES as exc:
                        stage = getattr(exc, "stage", stage)
                        if stage == "while connecting":
                            trail.append(f"{voter}: could not connect ({type(exc).__name__})")
                        else:
                            trail.append(f"{voter}: no answer ({type(exc).__name__})")
                            if doubt is not None:
                                doubt.append(voter)
                        self._failed_at[voter] = trio.current_time()
                        await self._drop(voter, pool)
                        continue
                    if error_of is not None and error_of(resp) == ErrorCode.NOT_CONTROLLER:
                        trail.append(f"{voter}: NOT_CONTROLLER")
                        continue
                    self._heard_from(voter)
                    return resp
                await trio.sleep(0.1)
        if voter is not None:
            # The budget ran out on `voter`.
            if voter in self._parked:
                # it has the request and will read it: slow, not cut off; the hint stays
                trail.append(f"{voter}: no answer in time (it has the request; still waiting)")
                raise ControllerUnavailable("no active controller answered")
            if park is not None and self._last_stage:
                stage = self._last_stage
            # One that is cut off (packets dropped, no reset) fails no faster than a
            # heartbeat's whole budget (2 intervals): if every call started with it, none
            # reached the controller elected in its place and the brokers were fenced (issue
            # 20's netfaults test). It goes last; the next call starts with
            # the voter that failed longest ago. Unless it answered another call as the active
            # controller meanwhile (a heartbeat): then it is slow, not cut off. At 30,000
            # partitions an AlterPartition of thousands of ISR changes outlasted its budget on
            # a busy active controller; the hint moved, the next heartbeat went to the two
            # followers first (NOT_CONTROLLER, seconds on loaded machines), and a live broker
            # was fenced.
            trail.append(f"{voter}: no answer in time ({stage})")
            now = trio.current_time()
            self._failed_at[voter] = now
            if voter == self._active_hint and \
                    now - self._heard_at.get(voter, -math.inf) >= timeout_s:
                self._active_hint = min((v for v in self.voters if v != voter),
                                        key=lambda v: self._failed_at.get(v, 0.0), default=voter)
        raise ControllerUnavailable("no active controller answered")

    async def _exchange(self, voter: int, message, version: int, pool: dict,
                        park: trio.Nursery, error_of):
        """`message` to `voter` as an Exchange in `park` (connecting first if `pool` has no
        connection to it). An earlier request parked there is waited on first: its answer
        frees the connection (NOT_CONTROLLER is returned: the voter is not active). A failure
        raised carries `stage`."""
        parked = self._parked.pop(voter, None)
        if parked is not None and parked.message is not message:
            earlier = await self._wait_for(voter, parked, pool)
            if error_of is not None and error_of(earlier) == ErrorCode.NOT_CONTROLLER:
                return earlier
            parked = None
        if parked is None:
            conn = pool.get(voter)
            if conn is None:
                try:
                    conn = self._new_conn(voter)
                except OSError as exc:
                    raise _at(exc, "while connecting") from None
                parked = Exchange(conn, message, version,
                                  on_connected=lambda: pool.__setitem__(voter, conn))
            else:
                parked = Exchange(conn, message, version)
            park.start_soon(parked.run)
        return await self._wait_for(voter, parked, pool)

    async def _wait_for(self, voter: int, exchange: Exchange, pool: dict):
        """`exchange`'s answer. When the call's time runs out first, it is parked if the voter
        has acknowledged the bytes, else given up (its connection closed)."""
        try:
            await exchange.done.wait()
        finally:
            self._last_stage = exchange.stage
            if not exchange.done.is_set():
                left = exchange.conn.unacknowledged()
                if left == 0:
                    self._parked[voter] = exchange
                else:           # the log line says how much the voter had not taken
                    if left is not None:
                        self._last_stage += f", {left} bytes unacknowledged"
                    exchange.cancel()
                    _forget(pool, voter, exchange.conn)
        if exchange.error is not None:
            _forget(pool, voter, exchange.conn)        # closed by its failure
            raise _at(exchange.error, exchange.stage)
        return exchange.response

    def _collect_parked(self, pool: dict, error_of) -> None:
        """Answers that came for parked heartbeats between calls: who is active, who failed."""
        now = trio.current_time()
        for voter, exchange in list(self._parked.items()):
            if not exchange.done.is_set():
                continue
            del self._parked[voter]
            if exchange.error is not None:
                self._failed_at[voter] = now
                _forget(pool, voter, exchange.conn)
            elif error_of is None or error_of(exchange.response) != ErrorCode.NOT_CONTROLLER:
                self._heard_from(voter)

    def _heard_from(self, voter: int) -> None:
        """`voter` answered as the active controller."""
        self._heard_at[voter] = trio.current_time()
        self._active_hint = voter
        self._failed_at.pop(voter, None)

    # -- registration and heartbeats ----------------------------------------------------------

    async def register(self) -> None:
        req_cls = REQUESTS[ApiKey.BROKER_REGISTRATION]
        req = req_cls(broker_id=self.broker_id, cluster_id="raftka",
                      incarnation_id=self.incarnation_id,
                      listeners=[req_cls.Listener(name=n, host=h, port=p, security_protocol=sp)
                                 for n, h, p, sp in self.listeners],
                      rack=self.rack, log_dirs=self.log_dir_ids(),
                      # registering again in the same process: our logs lost nothing
                      previous_broker_epoch=self.broker_epoch if self.broker_epoch >= 0
                      else self.previous_broker_epoch)
        while True:
            try:
                resp = await self.call_active(req, error_of=lambda r: r.error_code)
            except ControllerUnavailable:
                await trio.sleep(0.5)
                continue
            if resp.error_code == ErrorCode.NONE:
                self.broker_epoch = resp.broker_epoch
                self._seen_registered = False
                log.info("broker %d registered with epoch %d", self.broker_id, self.broker_epoch)
                if self.on_registered is not None:
                    self.on_registered(self.broker_epoch)
                return
            log.warning("registration refused: %s", ErrorCode(resp.error_code).name)
            await trio.sleep(1)

    @property
    def want_shutdown(self) -> bool:
        return self._want_shutdown

    @want_shutdown.setter
    def want_shutdown(self, value: bool) -> None:
        # as Kafka's BrokerLifecycleManager: a controlled shutdown heartbeats at once instead of
        # after the interval (it takes two heartbeats: the first moves our leaderships away, the
        # next is told to stop; at a 2 s interval every broker stop waited ~4 s for nothing)
        if value and not self._want_shutdown:
            self._heartbeat_now.set()
        self._want_shutdown = value

    def heartbeat_soon(self) -> None:
        """Send the next heartbeat now (a log directory went offline: OfflineLogDirs)."""
        self._heartbeat_now.set()

    async def _sleep_between_heartbeats(self) -> None:
        # fast while fenced (unfencing need not wait a whole interval) and while shutting down
        fast = self.fenced or (self._want_shutdown and not self.should_shut_down)
        with trio.move_on_after(0.2 if fast else self.heartbeat_interval_s):
            await self._heartbeat_now.wait()
        if self._heartbeat_now.is_set():
            self._heartbeat_now = trio.Event()

    async def heartbeat_loop(self, on_state: Callable[[], None]) -> None:
        async with trio.open_nursery() as park:     # heartbeats that outlive their call
            await self._heartbeats(on_state, park)

    async def _heartbeats(self, on_state: Callable[[], None], park: trio.Nursery) -> None:
        req_cls = REQUESTS[ApiKey.BROKER_HEARTBEAT]
        while True:
            req = req_cls(broker_id=self.broker_id, broker_epoch=self.broker_epoch,
                          current_metadata_offset=self.image.offset,
                          want_fence=not self.ready_to_unfence,
                          want_shut_down=self.want_shutdown,
                          offline_log_dirs=self.offline_log_dir_ids())
            report = self._load_report(req)
            self._log_info_report(req)
            trail: list = []
            try:
                resp = await self.call_active(req, timeout_s=self.heartbeat_interval_s * 2,
                                              error_of=lambda r: r.error_code,
                                              pool=self._heartbeat_conns, trail=trail,
                                              park=park)
            except ControllerUnavailable:
                # the controller fences a broker whose heartbeat connection closed and no
                # heartbeat follows soon: say so, a fencing after this is explained here, and
                # say what each voter did (a session that lapses although heartbeats were sent
                # reads differently from one whose heartbeats never got out)
                log.warning("heartbeat not answered within %.1f s; trying again (%s)",
                            self.heartbeat_interval_s * 2, "; ".join(trail) or "no voter")
                await trio.sleep(0.2)
                continue
            if report is not None and resp.error_code == ErrorCode.NONE:
                self.load_reporter.delivered(*report, self._heartbeat_conns.get(
                    self._active_hint), int(time.monotonic() * 1000))
            if resp.error_code == ErrorCode.BROKER_ID_NOT_REGISTERED and \
                    await self._was_unregistered():
                # UnregisterBroker (KIP-631) removed us: as Kafka's broker, stay out (no
                # re-registration, so we stay out of Metadata) until this process restarts
                if not self.unregistered:
                    log.warning("broker %d was unregistered; it stays out of the cluster until "
                                "restarted", self.broker_id)
                self.unregistered = True
                await trio.sleep(self.heartbeat_interval_s)
                continue
            if resp.error_code in (ErrorCode.STALE_BROKER_EPOCH, ErrorCode.BROKER_ID_NOT_REGISTERED):
                # our registration is gone (e.g. fenced and replaced): register afresh
                await self.register()
                continue
            if resp.error_code == ErrorCode.NONE and not self._seen_registered:
                b = self.image.brokers.get(self.broker_id)
                self._seen_registered = b is not None and b.broker_epoch == self.broker_epoch
            if resp.error_code == ErrorCode.NONE:
                changed = (resp.is_fenced != self.fenced or resp.is_caught_up != self.caught_up
                           or resp.should_shut_down != self.should_shut_down)
                self.fenced, self.caught_up = resp.is_fenced, resp.is_caught_up
                self.should_shut_down = resp.should_shut_down
                if changed:
                    on_state()
            await self._sleep_between_heartbeats()

    def _load_report(self, req) -> tuple[bool, dict] | None:
        """Fill `req`'s load report fields when one is due; (full, sent) or None."""
        if self.led_sizes is None:
            return None
        peer = self._heartbeat_conns.get(self._active_hint)
        if not self.load_reporter.due(int(time.monotonic() * 1000), peer):
            return None
        full, sent = self.load_reporter.report(self.led_sizes(), peer)
        req.raftka_load_report_full = full
        req.raftka_partition_sizes = [
            req.RaftkaTopicSizes(name=topic, partitions=[
                req.RaftkaPartitionSize(partition_index=p, size_bytes=size) for p, size in ps])
            for topic, ps in by_topic(sent).items()]
        return full, sent

    def _log_info_report(self, req) -> None:
        infos = self.replica_log_infos() if self.replica_log_infos is not None else None
        if infos:
            req.raftka_replica_log_info = [
                req.RaftkaTopicLogInfo(topic_id=topic_id, partitions=[
                    req.RaftkaPartitionLogInfo(partition_index=p, partition_epoch=pe,
                                               last_written_leader_epoch=le, log_end_offset=leo)
                    for p, pe, le, leo in parts])
                for topic_id, parts in log_info_by_topic(infos).items()]

    async def _was_unregistered(self, wait_s: float = 5.0) -> bool:
        """Our registration, once in our image, left it (an UnregisterBrokerRecord): waits a
        little for the image to catch up with the controller that just said so. A controller
        that lost its state also answers BROKER_ID_NOT_REGISTERED, but no record removed us from
        our image then: we register again."""
        if not self._seen_registered:
            return False
        with trio.move_on_after(wait_s):
            while self.broker_id in self.image.brokers:
                await trio.sleep(0.1)
        return self.broker_id not in self.image.brokers

    # -- metadata stream ------------------------------------------------------------------------

    async def follow_metadata(self, on_image: Callable[[MetadataImage], Awaitable[None]]) -> None:
        fetch_cls = REQUESTS[ApiKey.FETCH]
        i = 0
        failed = False
        while True:
            voters = list(self.voters)
            # Like KRaft observers, follow the active controller when we know it (so it can
            # report us in DescribeQuorum); any voter serves the stream if it is unreachable.
            voter = voters[i % len(voters)] if failed else self._active_hint
            failed = False
            req = fetch_cls(replica_id=self.broker_id, max_wait_ms=500, min_bytes=1,
                            max_bytes=8 << 20, topics=[fetch_cls.FetchTopic(
                                topic=METADATA_TOPIC, partitions=[fetch_cls.FetchPartition(
                                    partition=0, fetch_offset=self.image.offset + 1,
                                    partition_max_bytes=8 << 20)])])
            try:
                conn = await self._conn(voter, self._fetch_conns)
                resp = await conn.request(req, 12, timeout_s=5)
                part = resp.responses[0].partitions[0]
            except (ConnectionClosed, OSError, DecodeError, IndexError, trio.TooSlowError):
                await self._drop(voter, self._fetch_conns)
                i, failed = i + 1, True
                await trio.sleep(0.1)
                continue
            if part.error_code != ErrorCode.NONE:
                i, failed = i + 1, True    # this voter is behind us (or broken): ask another
                await trio.sleep(0.1)
                continue
            self.heard_offset = max(self.heard_offset, part.high_watermark - 1)
            if part.snapshot_id.end_offset >= 0:
                try:
                    await self._load_snapshot(conn, on_image)
                except (ConnectionClosed, OSError, DecodeError, IndexError, trio.TooSlowError) as exc:
                    # a 30,000-partition snapshot can take longer than the timeout on a loaded
                    # machine: try again (another voter) instead of taking the broker down
                    log.warning("loading the metadata snapshot from %s failed: %r", voter, exc)
                    await self._drop(voter, self._fetch_conns)
                    i, failed = i + 1, True
                    await trio.sleep(0.1)
                continue
            if part.records is not None and len(part.records):
                new = await self._replay_fetched(bytes(part.records))
                if new is not None:
                    await on_image(new)
                    self._signal()          # see _signal

    async def _replay_fetched(self, data: bytes) -> MetadataImage | None:
        if len(data) < REPLAY_OFF_LOOP_BYTES:
            return self._replay(data)
        return self._install(await trio.to_thread.run_sync(replayed, self.image, data))

    def _replay(self, data: bytes) -> MetadataImage | None:
        """Replay a fetched batch as one image change (image.apply_records copies each part it
        touches once, however many records the batch holds)."""
        return self._install(replayed(self.image, data))

    def _install(self, image: MetadataImage | None) -> MetadataImage | None:
        """Make `image` (None: nothing new) the replayed image. Only follow_metadata replays,
        so the image a worker thread started from is still ours when it is installed."""
        if image is None:
            return None
        self.image = image
        self._learn_voters()
        self._signal()
        return image

    async def _load_snapshot(self, conn: BrokerConnection, on_image) -> None:
        cls = REQUESTS[ApiKey.FETCH_SNAPSHOT]
        req = cls(replica_id=self.broker_id, max_bytes=64 << 20, topics=[cls.TopicSnapshot(
            name=METADATA_TOPIC, partitions=[cls.PartitionSnapshot(partition=0)])])
        resp = await conn.request(req, 1, timeout_s=30)
        part = resp.topics[0].partitions[0]
        end = part.snapshot_id.end_offset
        if end - 1 <= self.image.offset:
            return                      # never go back to an older state
        # a 30,000-partition image is ~0.3 s of CPU to decode and build (more on a loaded
        # machine, ~6 MiB of records): off the event loop
        self._install(await trio.to_thread.run_sync(
            snapshot_image, bytes(part.unaligned_records or b""), end - 1))
        await on_image(self.image)
        self._signal()

    def _learn_voters(self) -> None:
        voters = self.image.voters
        if voters is None or not voters:
            return
        endpoints = {nid: (v.host, v.port) for nid, v in sorted(voters.items())}
        if endpoints != self.voters:
            log.info("controller voters now %s", sorted(endpoints))
            self.voters = endpoints
            if self._active_hint not in endpoints:
                self._active_hint = next(iter(endpoints))

    def _signal(self) -> None:
        """Wake the waiters on `image_changed`: once the image is replayed and again once
        `on_image` has applied it. Handlers wait for what the broker serves (its image, set at
        the end of on_image); with only the first wake-up, a waiter that looked while on_image
        was opening thousands of logs off the event loop slept until the next metadata change
        or its timeout: each CreateTopics of 2,000 partitions answered 5 s late."""
        event, self.image_changed = self.image_changed, trio.Event()
        event.set()

    async def aclose(self) -> None:
        for voter in list(self._conns):
            await self._drop(voter)
        for voter in list(self._fetch_conns):
            await self._drop(voter, self._fetch_conns)
        for voter in list(self._heartbeat_conns):
            await self._drop(voter, self._heartbeat_conns)


def replayed(image: MetadataImage, data: bytes) -> MetadataImage | None:
    """`image` with a fetched batch of records applied, None if nothing in it is new or it
    does not follow on (a gap). Pure: runs in a worker thread for big batches."""
    pairs = []
    expected = image.offset + 1
    for h in iter_batches(data):
        for rec in decode_batch(h.bytes()).records:
            if rec.offset < expected:
                continue
            if rec.offset != expected:
                log.error("metadata gap at %d (have %d)", rec.offset, expected - 1)
                return None
            try:
                record = decode_record(rec.value)
            except MetadataRecordError as exc:
                log.error("undecodable metadata record at %d: %s", rec.offset, exc)
                record = None               # counted as skipped by the image
            pairs.append((rec.offset, record))
            expected += 1
    return image.apply_records(pairs) if pairs else None


def snapshot_image(data: bytes, offset: int) -> MetadataImage:
    """The image a FetchSnapshot answer holds (pure; a worker thread builds it)."""
    records = []
    for h in iter_batches(data):
        records += [decode_record(r.value) for r in decode_batch(h.bytes()).records]
    return MetadataImage.from_records(records, offset)
