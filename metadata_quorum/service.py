"""The controller process: Raft quorum + pure controller + a Kafka-protocol listener (trio).

Active controller = Raft leader. On becoming leader it commits an activation entry (a NoOp that
makes it the metadata log's writer, and after which everything committed by earlier leaders is
applied here), grants every broker a fresh session, and only then serves commands. Commands are
pipelined (pipeline.py, as KRaft): each runs against the committed image plus the records still
in flight, its records are proposed at once and the next command starts; its answer is sent after
they commit (so a success is never lost). A command without records answers once the last
proposal in flight committed (it read that state). A failed or timed-out commit renounces:
every command in flight fails, the speculative state is dropped, and the controller activates
again if it still leads. A failure is certain (NotActive: NOT_CONTROLLER, which a broker retries
elsewhere) when the entry never reached the log or was fenced off, else in doubt (CommitInDoubt:
it may still commit; CreateTopics/DeleteTopics/CreatePartitions answer REQUEST_TIMED_OUT). A lost leadership stops new commands; those in
flight get NOT_CONTROLLER unless Raft still reports their entries committed (then the success
stands: a retry would otherwise meet its own write as "already exists"). A node that is not
active answers mutations with NOT_CONTROLLER; brokers then try the next voter.

The metadata stream for brokers is served by *every* controller from its committed log, KRaft
style: `Fetch` (v12) on topic `__cluster_metadata` partition 0 from an offset, long-polled up to
`max_wait_ms`, answered with one RecordBatch whose record values are msgpack metadata records
(base offset = metadata offset). When the offset is older than the retained tail, the response
carries a `snapshot_id` and the broker sends `FetchSnapshot`, answered with the image as records
(`MetadataImage.to_records()`), ending at the snapshot's end offset.

pysyncobj's thread never blocks on us: its callbacks hop onto the trio loop through a RaftInbox
(raft_inbox.py: in order, one trio wake-up per batch).
"""

from __future__ import annotations

import functools
import logging
import time

import trio

from common.clock import steady_ms
from common.request_metrics import RequestStats, add_remote_time, enabled_by_env
from metadata_quorum.config import DEV_PASSWORD, ControllerConfig
from metadata_quorum.controller.quorum_controller import QuorumController
from metadata_quorum.controller_handlers import HANDLERS, SUPPORTED
from metadata_quorum.controller_stats import ControllerStats, elections
from metadata_quorum.health import metrics_listener
from metadata_quorum.heartbeat_connections import HeartbeatConnections
from metadata_quorum.image import Voter
from metadata_quorum.pipeline import CommandPipeline, NotProposable, Proposal
from metadata_quorum.quorum.raft import FAIL_REASON, Committed, RaftQuorum, Reset, fail_reason
from metadata_quorum.raft_inbox import RaftInbox
from metadata_quorum.stream_batches import SnapshotBatches
from metadata_quorum.voter_handlers import resolve_pending
from metadata_quorum.records import AbortTransactionRecord, FenceBrokerRecord, NoOpRecord, \
    RecordTooLarge
from common.network import serve_listener
from wire.messages.api_keys import ApiKey

log = logging.getLogger(__name__)

COMMIT_TIMEOUT_S = 5.0
TICK_S = 0.25
# a tick later than this past its time means this process stalled (see HeartbeatTracker.forgive)
STALL_SLACK_MS = 750
STALL_GRACE_MS = 1000               # time after a stall to read the heartbeats that waited
REBALANCE_EVERY_TICKS = 20          # preferred-leader check every 5 s
LEADERSHIP_POLL_S = 1.0             # safety net behind pysyncobj's state-change callback


class NotActive(Exception):
    """This controller is not the active one (or lost leadership mid-command)."""


class CommitInDoubt(NotActive):
    """Proposed but not known to be committed (timed out, or leadership changed while it
    waited): the entry may still commit under the next leader, so the command's outcome is
    unknown — not "not the active controller", which a broker safely retries elsewhere."""


# pysyncobj's answers that say the entry is not (and will never be) in the log
_NOT_APPENDED = {FAIL_REASON.NOT_LEADER, FAIL_REASON.MISSING_LEADER, FAIL_REASON.QUEUE_FULL,
                 FAIL_REASON.REQUEST_DENIED, FAIL_REASON.DISCARDED}


class CommandRefused(Exception):
    """The command's records cannot be committed at all (a record over the size limit)."""


def now_ms() -> int:
    # Every controller command's `now` times broker sessions only (no record carries it): the
    # steady clock, so a wall-clock jump neither fences every broker nor keeps a dead one alive.
    return steady_ms()


class ControllerService:
    def __init__(self, config: ControllerConfig):
        self.config = config
        self.controller = QuorumController(config.session_timeout_ms, config.num_partitions,
                                           config.default_replication_factor,
                                           config.min_insync_replicas)
        peers = {nid: f"{h}:{p}" for nid, (h, p) in config.raft_peers.items()}
        self.quorum = RaftQuorum(config.node_id, peers, config.metadata_dir, config.password,
                                 compaction_min_entries=config.raft_compaction_min_entries,
                                 compaction_min_time_s=config.raft_compaction_min_time_ms / 1000,
                                 compaction_min_records=config.raft_compaction_min_records,
                                 joining=config.joining, fsync=config.raft_fsync,
                                 sync_record=config.raft_sync_record)
        if config.password == DEV_PASSWORD:      # config.py refuses it beyond loopback
            log.warning("the Raft port uses the built-in development password: any local user "
                        "could run code on this controller through it; set "
                        "raftka.controller.raft.password (raftka dev writes a random one)")
        # the configured voters: the voter set until a VotersRecord says otherwise
        self.static_voters = {nid: Voter(nid, peers[nid], h, p)
                              for nid, (h, p) in config.voters.items()}
        self.is_voter = not config.joining          # serves the metadata stream (see _voters_seen)
        self.voter_change_busy = False              # an AddRaftVoter/RemoveRaftVoter is running
        self.membership_differs = False
        self.next_offset = 0
        self.pipeline = CommandPipeline()           # committed + speculative images (pipeline.py)
        self.pipelined = config.pipeline            # False: one command at a time (benchmarks)
        self.tail: list[bytes] = []
        self.tail_start = 0
        self.new_data = trio.Event()
        self.snapshot_batches = SnapshotBatches()   # FetchSnapshot answers (stream_batches.py)
        self.active = False
        self.lock = trio.Lock()
        self.observers: dict[int, tuple[int, int]] = {}
        self.token = None
        self.inbox: RaftInbox | None = None     # pysyncobj's thread -> the trio loop
        self.heartbeat_conns = HeartbeatConnections(config.disconnect_fence_ms)
        self.role_changed = trio.Event()
        # per-API request counters and latency histograms, when /metrics is served
        self.request_stats = RequestStats() if metrics_listener(config.props) \
            and enabled_by_env() else None
        self.stats = ControllerStats()              # commit time, leader elections

    # -- commit path --------------------------------------------------------------------------

    def _on_event_threadsafe(self, event: Committed | Reset) -> None:
        self.inbox.call(self._on_event, event)

    def _on_event(self, event: Committed | Reset) -> None:
        """Mirror the Raft state machine's committed state (on the trio thread, in order)."""
        if isinstance(event, Reset):
            log.info("metadata state reset to offset %d (Raft snapshot loaded)", event.next_offset)
            self._install(event)
        else:
            if event.first != self.next_offset:
                # cannot happen while every state change reaches us as an event; should it,
                # the image (from the log) is still right, and the stream restarts at this
                # entry: brokers further back load a snapshot instead of reading a hole
                log.error("metadata offset gap: expected %d, got %d; the stream now starts at %d",
                          self.next_offset, event.first, event.first)
                self.tail_start, self.tail = event.first, []
            if event.image.voters is not self.pipeline.committed.voters:
                self._voters_seen(event.image)
            self.next_offset = event.first + len(event.encoded)
            self.pipeline.committed_upto(event.image, self.next_offset)
            # the speculative image while proposals are in flight, else this committed one
            self.controller.load_image(self.pipeline.speculative)
            self.tail.extend(event.encoded)
            limit = self.config.stream_tail_records
            if len(self.tail) > limit:
                drop = len(self.tail) - limit // 2
                del self.tail[:drop]
                self.tail_start += drop
        wake, self.new_data = self.new_data, trio.Event()
        wake.set()

    def _install(self, state: Reset) -> None:
        self._voters_seen(state.image)
        self.next_offset, self.tail_start, self.tail = state.next_offset, state.tail_start, \
            list(state.tail)
        self.pipeline.committed_upto(state.image, state.next_offset)
        if self.pipeline.inflight or self.active:
            # the state under what is in flight was replaced wholesale
            self._renounce("the metadata state was replaced by a Raft snapshot")
        self.controller.load_image(self.pipeline.speculative)

    @property
    def committed_image(self):
        """The image as of `next_offset` (what the metadata stream and snapshots serve)."""
        return self.pipeline.committed

    # -- the voter set (KIP-853; voter_handlers.py) ------------------------------------------

    def current_voters(self) -> dict[int, Voter]:
        voters = self.controller.image.voters
        return dict(voters) if voters is not None else dict(self.static_voters)

    def reachable_voters(self) -> set[int]:
        """Voters this (active) controller has a Raft connection to, itself included."""
        connected = {addr for addr, up in self.quorum.members().items() if up}
        return {v.node_id for v in self.current_voters().values() if v.raft_address in connected}

    def _voters_seen(self, image) -> None:
        """A new voter set: learn new voters' Raft addresses; a controller removed (or being
        removed) stops serving the metadata stream, which it would no longer receive, so
        brokers move to a voter that does."""
        if image.voters is None:
            return
        self.quorum.learn_addresses({v.raft_address: v.node_id for v in image.voters.values()})
        me = self.config.node_id
        voter = me in image.voters and image.voter_change[:2] != ("remove", me)
        if voter != self.is_voter:
            if voter:
                log.info("controller %d is a voter", me)
            else:
                log.warning("controller %d is %s the metadata quorum: it stops serving "
                            "brokers%s", me, "being removed from" if me in image.voters
                            else "no longer a voter of",
                            "" if me in image.voters else "; stop this process")
        self.is_voter = voter

    async def commit(self, records: list) -> None:
        """Propose `records` as one atomic operation and wait for their commit (NotActive if
        this controller is not active or it fails)."""
        await self.outcome(self.propose(records))

    def propose(self, records: list, activate: bool = False) -> Proposal:
        """Propose `records` (one Raft entry, or several forming a metadata transaction:
        records.entry_items) back to back, fenced by this activation (pipeline.py); the next
        command sees them at once. An error on any entry fails the whole and renounces (an
        open transaction left behind is aborted before the next command:
        `_abort_open_transaction`)."""
        elected = elections(self.controller.image, records)     # before the image moves on
        try:
            proposal = self.pipeline.activate(records) if activate \
                else self.pipeline.propose(records)
        except RecordTooLarge as exc:
            raise CommandRefused(str(exc)) from None
        except NotProposable as exc:
            raise NotActive(str(exc)) from None
        self.controller.load_image(self.pipeline.speculative)
        proposal.started, proposal.elected = time.perf_counter(), elected

        def entry_done(res, err):
            error, in_doubt = None, False
            if err != 0:
                # refused before the log (not appended) is certain; a leader change after the
                # append may still see it committed by the next leader
                error, in_doubt = f"commit failed: {fail_reason(err)}", err not in _NOT_APPENDED
            elif not isinstance(res, int) or res < 0:
                error = "commit failed: the entry was fenced off (written on a state that did " \
                        "not commit)"
            self.pipeline.entry_done(proposal, error, in_doubt)
            if error is not None and self.active and not self.pipeline.active:
                self._renounced(error)          # this activation's proposal failed
            self.controller.load_image(self.pipeline.speculative)  # the committed one when idle

        def callback(res, err):
            # after the Committed event of its entry (the same inbox, in order)
            self.inbox.call(entry_done, res, err)

        for entry in proposal.entries:
            self.quorum.propose(entry, callback)
        return proposal

    async def outcome(self, proposal: Proposal | None, records: bool = True) -> None:
        """Wait until `proposal` committed: NotActive if it failed for sure, CommitInDoubt if it
        may still commit (timed out, or failed along with another proposal in flight)."""
        if proposal is None:
            return
        if not proposal.done:
            done = trio.Event()
            proposal.on_finish.append(done.set)
            # An entry's answer comes when this node applies it, after every entry before it:
            # a node that took over with a backlog to apply (a restart at 30,000 partitions
            # replays seconds of it) is not out of quorum. While the applied index moves, the
            # wait goes on; a whole timeout without it moving is a timeout, as before.
            applied = self.quorum.applied_index()
            while True:
                with trio.move_on_after(COMMIT_TIMEOUT_S + len(proposal.entries) * 0.1):
                    await done.wait()
                if proposal.done or self.quorum.applied_index() == applied:
                    break
                applied = self.quorum.applied_index()
            if not proposal.done:
                self.pipeline.fail(proposal, "commit timed out (no quorum?)", in_doubt=True)
                if self.active and not self.pipeline.active:
                    self._renounced("commit timed out (no quorum?)")
        if records:
            add_remote_time(time.perf_counter() - proposal.started)   # RemoteTimeMs
        if proposal.error is not None:
            raise (CommitInDoubt if proposal.in_doubt else NotActive)(proposal.error)
        if records:
            self.stats.committed(time.perf_counter() - proposal.started, proposal.elected)

    def _renounce(self, reason: str) -> None:
        """Drop the speculative state; every command in flight fails with NOT_CONTROLLER."""
        self.pipeline.renounce(reason)
        self._renounced(reason)

    def _renounced(self, reason: str) -> None:
        self.controller.load_image(self.pipeline.speculative)
        if self.active:
            log.warning("controller %d renounces (%s): commands in flight fail, and it becomes "
                        "active again if it still leads", self.config.node_id, reason)
            self.active = False
        self.role_changed.set()

    async def _abort_open_transaction(self) -> None:
        """A metadata transaction left open in the committed log (a multi-entry commit that
        failed part-way, here or on the previous active controller) is aborted before anything
        else is written, as KRaft's active controller does on taking over (KIP-868)."""
        if self.controller.image.in_transaction:
            log.warning("aborting a metadata transaction left open at offset %d",
                        self.controller.image.offset)
            await self.commit([AbortTransactionRecord("left open by a failed commit")])

    async def mutate(self, command):
        """Run `command(now_ms) -> (records, result)` as the active controller; `result` once
        its records (or, without records, those in flight when it ran) committed."""
        async with self.lock:
            if not self.active:
                raise NotActive("not the active controller")
            await self._abort_open_transaction()
            records, result = command(now_ms())
            if records:
                proposal = self.propose(records)
            else:
                proposal = self.pipeline.last_pending()
            if not self.pipelined:              # one at a time: the lock held to the commit
                await self.outcome(proposal, bool(records))
                return result
        await self.outcome(proposal, bool(records))
        return result

    # -- background loops ---------------------------------------------------------------------

    async def _leadership_loop(self) -> None:
        """Follow Raft leadership: woken by pysyncobj's state changes (RaftQuorum
        .on_state_change), with a slow poll as a safety net — it used to poll every 50 ms, a
        fixed cost of every idle controller."""
        while True:
            self.role_changed = trio.Event()
            leader = self.quorum.is_leader
            if leader and not self.active:
                try:
                    await self.become_active()
                    log.info("controller %d is now active (term %s)", self.config.node_id,
                             self.quorum.status()["term"])
                    await self._resolve_voter_change()
                except NotActive as exc:
                    log.info("could not become active: %s", exc)
                    await trio.sleep(0.05)          # e.g. no quorum yet: try again soon
                    continue
            elif not leader and self.active:
                # commands in flight wait for Raft's word on their entries (committed: their
                # success stands) or fail by the commit timeout / the next activation
                self.active = False
                self.pipeline.deactivate()
                log.info("controller %d is no longer active", self.config.node_id)
            with trio.move_on_after(LEADERSHIP_POLL_S):
                await self.role_changed.wait()

    async def become_active(self) -> None:
        """Commit the activation entry (after whatever this or an earlier leader left in the
        log: the state is settled once it commits), end a transaction left open, and give
        every broker a fresh session before fencing anyone."""
        async with self.lock:
            await self.outcome(self.propose([NoOpRecord()], activate=True))
            await self._abort_open_transaction()
            if not self.pipeline.active:        # renounced again since (a failed entry)
                raise NotActive("renounced while becoming active")
            self.controller.become_active(now_ms())
            self.active = True

    async def _resolve_voter_change(self) -> None:
        """A voter change left in flight (by a previous active controller, or one whose end
        could not commit) is ended here: see voter_handlers.resolve_pending."""
        if self.active and self.controller.image.voter_change and not self.voter_change_busy:
            try:
                await resolve_pending(self)
            except (NotActive, CommandRefused) as exc:
                log.info("voter change not resolved yet: %s", exc)

    def _check_membership(self) -> None:
        """The active controller's Raft membership should be the committed voter set whenever
        no change is in flight; say so once when it is not (a bug, or a stale voter the
        operator must look at), and once when it is again."""
        if not self.active or self.controller.image.voter_change or self.voter_change_busy:
            return
        raft = set(self.quorum.members())
        voters = {v.raft_address for v in self.current_voters().values()}
        differs = raft != voters
        if differs != self.membership_differs:
            if differs:
                log.warning("Raft membership %s differs from the voter set %s", sorted(raft),
                            sorted(voters))
            else:
                log.info("Raft membership matches the voter set again")
            self.membership_differs = differs

    def _on_raft_state_threadsafe(self) -> None:
        self.inbox.call(lambda: self.role_changed.set())

    async def _tick_loop(self) -> None:
        ticks = 0
        last = steady_ms()
        was_stalled = False
        while True:
            await trio.sleep(TICK_S)
            ticks += 1
            now = steady_ms()
            stalled_ms = now - last - int(TICK_S * 1000) - STALL_SLACK_MS
            last = now
            # an isolated stall is forgiven; under continuous starvation (every tick late) the
            # sessions run as usual, so a dead broker is still fenced, at most one stall later
            if stalled_ms > 0 and self.active and not was_stalled:
                log.warning("controller stalled for %d ms: every broker session gets %d ms more "
                            "at least", stalled_ms + STALL_SLACK_MS, STALL_GRACE_MS)
                self.controller.heartbeats.forgive(now, STALL_GRACE_MS)
            was_stalled = stalled_ms > 0
            rebalance = ticks % REBALANCE_EVERY_TICKS == 0
            self.quorum.maybe_joined()
            await self._resolve_voter_change()
            self._check_membership()
            if self.active:
                try:
                    await self.mutate(lambda now: (self._tick(now, rebalance), None))
                except NotActive:
                    pass

    def _tick(self, now_ms: int, rebalance: bool) -> list:
        records = self.controller.tick(now_ms, rebalance)
        fenced = [rec.broker_id for rec in records if isinstance(rec, FenceBrokerRecord)]
        for broker_id in fenced:
            # an operator's first question after an outage: which broker, and why
            log.warning("fencing broker %d: %s", broker_id,
                        self.controller.heartbeats.why_expired(broker_id, now_ms))
        return records

    # -- requests -----------------------------------------------------------------------------

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        self.token = trio.lowlevel.current_trio_token()
        self.inbox = RaftInbox(self.token)
        self._install(self.quorum.log.subscribe(self._on_event_threadsafe))
        self.quorum.on_state_change = self._on_raft_state_threadsafe
        host, port = self.config.listener
        dispatch = self._dispatch_wire
        if self.request_stats is not None:
            dispatch = self.request_stats.wrap(dispatch)
        async with trio.open_nursery() as nursery:
            from common.listener_security import controller_listener_security
            listeners = await nursery.start(functools.partial(
                serve_listener, host, port, dispatch, "CONTROLLER", 100 * 1024 * 1024,
                SUPPORTED, security=controller_listener_security(self.config.props,
                                                                 lambda: self.pipeline.committed)))
            listener = metrics_listener(self.config.props)
            if listener:                            # /metrics and /health/* (health.py)
                from common.http_endpoint import serve_http
                from metadata_quorum.health import routes
                await nursery.start(serve_http, routes(self), listener)
            nursery.start_soon(self._leadership_loop)
            nursery.start_soon(self._tick_loop)
            bound = listeners[0].socket.getsockname()
            print(f"controller {self.config.node_id} listening on {bound[0]}:{bound[1]}", flush=True)
            task_status.started(bound)

    async def _dispatch_wire(self, ctx, request):
        if request.api_key != ApiKey.BROKER_HEARTBEAT:
            return await HANDLERS[request.api_key](self, request)
        broker_id, arrived = request.body.broker_id, now_ms()
        self._heartbeat_arrived(request.body, arrived)
        if self.config.disconnect_fence_ms <= 0:            # disconnect fencing off
            return await HANDLERS[request.api_key](self, request)
        if self.heartbeat_conns.arrived(ctx, broker_id, arrived):
            ctx.on_close.append(lambda: self._heartbeat_connection_closed(ctx, broker_id))
        try:
            return await HANDLERS[request.api_key](self, request)
        finally:
            self.heartbeat_conns.answered(ctx, now_ms())

    def _heartbeat_arrived(self, body, now: int) -> None:
        """The session counts from a heartbeat's arrival, not from its turn among the commands
        (as Kafka since KAFKA-17793): at 30,000 partitions heartbeats waited seconds behind
        commands thousands of ISR changes long. A stale or unknown registration is not
        touched (the command refuses it)."""
        registered = self.controller.image.brokers.get(body.broker_id)
        if self.active and registered is not None and registered.broker_epoch == body.broker_epoch:
            self.controller.heartbeats.touch(body.broker_id, now)

    def _heartbeat_connection_closed(self, ctx, broker_id: int) -> None:
        """Disconnect fencing: see heartbeat_connections.py. Fencing a live broker by mistake
        is safe: it is unfenced at its next heartbeat."""
        if self.heartbeat_conns.closed(ctx, broker_id) and self.active:
            self.controller.heartbeats.cut_short(broker_id, now_ms(),
                                                 self.config.disconnect_fence_ms)

    def close(self) -> None:
        self.quorum.destroy()
