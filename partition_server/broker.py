"""The partition server: a trio nursery owning the client listener, the controller link,
follower fetchers and periodic housekeeping. Handlers live in `handlers/`; the decisions on
partitions in `replica_manager.py`; replication state in `replication/`.

Start-up: open the log directory, register with the quorum (fenced), follow the metadata stream,
heartbeat; once the controller unfences us (we caught up with the metadata log) print
`broker <id> unfenced` and serve. Shutdown (SIGTERM): ask for controlled shutdown so leadership
moves away first, then stop.
"""

from __future__ import annotations

import functools
import logging
import os
import time

import trio

from common.clock import steady_ms
from common.request_metrics import RequestStats, enabled_by_env
from common.topic_configs import ALTER_LOG_DIRS_RATE, MOVES_THROTTLED_RATE
from metadata_quorum.image import TOPIC_RESOURCE, MetadataImage
from partition_server import clean_shutdown, housekeeping
from partition_server.config import BROKER_TO_TOPIC, BrokerConfig
from partition_server.broker_metrics import forget_deleted_topics
from partition_server.controller_client import ControllerClient
from partition_server.load_report import LoadReporter
from partition_server.replica_log_info import ReplicaLogInfoReporter
from partition_server.fetch_session import FetchSessionCache
from partition_server.image_delta import config_changed_topics, diff_images
from partition_server.log import LogConfig, PartitionLog
from partition_server.log.file_cache import OpenFileCache, default_max_open_files
from partition_server.log.offset_checkpoint import HIGH_WATERMARK_FILE, read_checkpoint, write_checkpoint
from partition_server.log_dirs import LogDirs
from common.network import serve_listener
from partition_server.purgatory import Purgatory
from partition_server.quotas import WindowConfig
from partition_server.replica_manager import ReplicaManager
from partition_server.replication.fetcher import FetcherManager
from partition_server.replication.partition import Role
from partition_server.replication.throttle import ReplicationQuotas, parse_rate

log = logging.getLogger(__name__)

# fewer new partitions than this are opened inline (a thread hop is not worth it)
OPEN_AHEAD_MIN = 64


def now_ms() -> int:
    return int(time.time() * 1000)


class Broker:
    def __init__(self, config: BrokerConfig):
        self.config = config
        self.broker_id = config.node_id
        # every `log.dirs` entry (JBOD, log_dirs.py); the broker's own files (clean-shutdown
        # record, session, boot id) live in the first one online at start
        self.log_dirs = LogDirs(config["log.dirs"], self.broker_id)
        self.log_dir = (self.log_dirs.online() or self.log_dirs.dirs)[0].path
        from common.listeners import resolve
        self.listener_set = resolve(config["listeners"], config["advertised.listeners"],
                                    config["listener.security.protocol.map"],
                                    config["inter.broker.listener.name"])
        inter = self.listener_set.advertised_for(self.listener_set.inter_broker)
        self.host, self.port = inter.host, inter.port
        self._open_storage(config)
        self.purgatory = Purgatory()
        self.replicas.on_change = self.purgatory.notify
        from partition_server.handlers.fetch_follower import close_session
        self.fetch_sessions = FetchSessionCache(config["max.incremental.fetch.session.cache.slots"],
                                                config["min.incremental.fetch.session.eviction.ms"],
                                                on_close=close_session)
        # the client side of this broker's own links: TLS/SASL values, never process-wide
        from common.listener_security import controller_client_security, inter_node_security
        self.inter_broker_security = inter_node_security(
            config.values.get, self.listener_set.bound_for(self.listener_set.inter_broker).protocol)
        self.controller_security = controller_client_security(config.values.get)
        self.client = ControllerClient(self.broker_id, config.voters, self.host, self.port,
                                       config["broker.rack"], config["broker.heartbeat.interval.ms"],
                                       security=self.controller_security)
        self._wire_client(config)
        from partition_server.security.endpoints import SECURITY_PROTOCOL_IDS
        self.client.listeners = [(x.name, x.host, x.port, SECURITY_PROTOCOL_IDS[x.protocol])
                                 for x in sorted(self.listener_set.advertised,
                                                 key=lambda x: x.name != inter.name)]
        self.image = MetadataImage()
        # leader and follower replication throttles (replication/throttle.py), from each image
        self.replication_quotas = ReplicationQuotas(
            self.broker_id, WindowConfig(config["replication.quota.window.num"],
                                         config["replication.quota.window.size.seconds"] * 1000),
            (parse_rate(config["leader.replication.throttled.rate"]),
             parse_rate(config["follower.replication.throttled.rate"])),
            parse_rate(config[MOVES_THROTTLED_RATE]))
        self._build_components()
        self._apply_failed: list = []       # (TopicImage, PartitionState) that could not open
        # security: credentials (inter-node user + metadata SCRAM records) and the authorizer,
        # rebuilt from every image (None: no authorizer configured, everything allowed)
        from common.listener_security import credential_lookup, static_credentials
        from partition_server.security import setup as security
        self.credentials = credential_lookup(
            lambda: self.image, static_credentials(
                config["raftka.inter.node.sasl.username"], config["raftka.inter.node.sasl.password"]))
        self.authorizer = security.build_authorizer(self.image, config.values.get)
        self.unfenced_once = trio.Event()
        self.dir_failed = trio.Event()
        # Like Kafka's broker, requests wait until the first metadata catch-up is *applied*:
        # before it the image is empty or stale, and a Metadata answer naming no brokers or no
        # topics (librdkafka then refuses to produce: "Unknown topic"), or a NOT_LEADER for a
        # partition we will lead in a moment, sends clients astray. "Caught up" is what the
        # client replayed; with thousands of logs to open ahead of applying it, the image can
        # stay empty for seconds after it (a restart at 10,000 partitions answered Metadata
        # with no topics). Nor does the broker ask to be unfenced before (Kafka's
        # readyToUnfence): leaders elected onto it would wait for it.
        self.serving = trio.Event()
        self._serve_from: int | None = None     # the replayed offset at the first catch-up
        self.client.ready_to_unfence = False
        self.stopping = False
        self.request_stats = RequestStats()         # filled when the metrics listener is on
        # what request handlers may touch (handlers/context.py), instead of this whole object
        from partition_server.handlers.context import HandlerContext
        self.handler_context = HandlerContext.of(self)

    def _wire_client(self, config: BrokerConfig) -> None:
        """What the controller link reports: load, replicas' log ends, log directories,
        clean-shutdown state."""
        # the balancer's disk goal: sizes of the partitions led here ride on heartbeats
        self.client.led_sizes = self._led_sizes
        self.client.load_reporter = LoadReporter(config["raftka.load.report.interval.ms"])
        # KIP-966 unclean recovery: log ends of leaderless replicas ride on heartbeats too
        log_infos = ReplicaLogInfoReporter(self.broker_id)
        self.client.replica_log_infos = lambda: log_infos.report(self.image,
                                                                 self.replicas.partitions)
        # the online directories, as Kafka registers (KIP-858: the controller keeps them)
        self.client.log_dir_ids = lambda: [d.dir_id for d in self.log_dirs.dirs
                                           if d.dir_id and d.online]
        self.client.offline_log_dir_ids = self.log_dirs.offline_ids
        # KIP-966: tell the controller whether our logs came through the last stop intact
        self.boot_id_file = config["raftka.boot.id.file"]
        if self.boot_id_file:
            self.boot_id_file = os.path.join(self.log_dir, self.boot_id_file)
        self.client.previous_broker_epoch = clean_shutdown.previous_epoch(self.log_dir,
                                                                          self.boot_id_file)
        self.client.on_registered = lambda epoch: clean_shutdown.registered(
            self.log_dir, epoch, self.boot_id_file)

    def _build_components(self) -> None:
        """The follower fetchers, producer ids, group and transaction coordinators. Each gets
        the collaborators it uses, not the broker; what the broker replaces while it runs (its
        metadata image) they read through a callable."""
        from partition_server.group.coordinator import GroupCoordinator
        from partition_server.handlers.producer_id import ProducerIdBlock
        from partition_server.peers import PeerConnections
        from partition_server.txn.coordinator import TransactionCoordinator
        config, image, security = self.config, self._current_image, self.inter_broker_security
        self.fetchers = FetcherManager(self.broker_id, config, self.replicas, self.purgatory,
                                       image, security, quota=self.replication_quotas.follower)
        self.producer_ids = ProducerIdBlock(self.client, self.broker_id)
        self.groups = GroupCoordinator(
            config, self.replicas, self.purgatory, image, self.client.call_active,
            PeerConnections(image, security, f"raftka-lag-{self.broker_id}"))
        self.txn = TransactionCoordinator(
            config, self.replicas, self.purgatory, image, self.client.call_active,
            self.producer_ids.allocate, self.groups,
            PeerConnections(image, security, f"raftka-txn-{self.broker_id}"))

    def _current_image(self) -> MetadataImage:
        return self.image

    def _open_storage(self, config: BrokerConfig) -> None:
        # segment files open at most (file_cache.py): descriptors bounded whatever the partitions
        self.segment_files = OpenFileCache(default_max_open_files(config["raftka.log.max.open.files"]))
        log.info("keeping at most %d segment files open", self.segment_files.max_open)
        self.replicas = ReplicaManager(self.broker_id, self._open_log)
        self.replicas.log_dirs = self.log_dirs
        self.replicas.on_log_dir_failure = self._on_log_dir_failure
        # each directory checkpoints the high watermarks of its own logs (Kafka's layout): an
        # entry counts only from the directory holding the log, never a stale one elsewhere
        self.hw_checkpoint_path = os.path.join(self.log_dir, HIGH_WATERMARK_FILE)
        for d in self.log_dirs.online():
            self.replicas.high_watermarks.update(
                (key, hw) for key, hw in read_checkpoint(os.path.join(d.path, HIGH_WATERMARK_FILE)).items()
                if self.log_dirs.placement.get(key) is d)
        self.replicas.storage_fault_file = config["raftka.storage.fault.file"] or None
        from partition_server.log_dir_moves import ReplicaMover
        self.replicas.dir_moves = ReplicaMover(self.replicas, self.log_dirs, self.segment_files)

    def _led_sizes(self) -> dict:
        """{(topic, partition): bytes on disk} of the partitions this broker leads."""
        parts = self.replicas.partitions
        return {tp: parts[tp].log.size_in_bytes for tp in self.replicas.led
                if tp in parts and not parts[tp].offline}

    def _on_log_dir_failure(self, log_dir) -> None:
        """A log directory failed: its replicas are offline already. The heartbeats name it
        (OfflineLogDirs) and `offline_replicas.report_loop` tells the controller which replicas
        it held, so the controller moves their leadership and ISR membership away; the other
        directories keep serving. A restart brings the replicas back once the disk is fixed;
        when every directory failed, the broker shuts down (LogDirs.on_all_failed)."""
        self.client.heartbeat_soon()    # OfflineLogDirs now, not after the interval
        self.dir_failed.set()           # then the report loop names the replicas

    # -- configuration ----------------------------------------------------------------------------

    def topic_config(self, topic: str, image: MetadataImage | None = None) -> dict[str, str]:
        """Effective topic config: broker defaults overridden by dynamic and topic configs
        (of `image`, default the current one)."""
        image = image or self.image
        merged = {}
        for broker_key, topic_key in BROKER_TO_TOPIC.items():
            value = self.config[broker_key]
            if value is not None:
                merged[topic_key] = ",".join(value) if isinstance(value, list) else str(value).lower() \
                    if isinstance(value, bool) else str(value)
        for broker_key, value in image.broker_config(self.broker_id).items():
            if broker_key in BROKER_TO_TOPIC:
                merged[BROKER_TO_TOPIC[broker_key]] = value
        merged.update(image.topic_config(topic))
        return merged

    def _open_log(self, topic: str, partition: int, topic_config: dict) -> PartitionLog:
        directory = os.path.join(self.log_dirs.place(topic, partition).path, f"{topic}-{partition}")
        # lazy: a new partition's directory and files appear with its first record (a
        # CreateTopics of 10,000 partitions no longer makes 20,000 directories and files)
        return PartitionLog(directory, LogConfig.from_kafka(topic_config), now_ms(),
                            files=self.segment_files, lazy=True)

    # -- metadata -------------------------------------------------------------------------------

    async def on_image(self, image: MetadataImage) -> None:
        """Make local replicas match the new image: leadership, new and deleted partitions.
        Only what changed since the previous image is applied (image_delta.py): an idle
        cluster's metadata changes (a broker registering, one partition's ISR) cost O(topics)
        identity checks plus the changed partitions, not a walk over every partition."""
        config_topics = config_changed_topics(self.image, image)
        delta = diff_images(self.image, image, config_topics)
        await self._open_logs_ahead(image, delta)
        old, self.image = self.image, image
        self.replication_quotas.update(image.configs, image.broker_config(self.broker_id),
                                       TOPIC_RESOURCE)
        if self.authorizer is not None:
            from partition_server.security.setup import build_authorizer
            self.authorizer = build_authorizer(image, self.config.values.get)
        for key in delta.removed:
            self.fetchers.unfollow(*key)
            self.replicas.remove_partition(*key, delete=True)
            self.purgatory.notify(key)
        forget_deleted_topics(self.replicas.topic_traffic, delta.removed, old, image)
        now = steady_ms()            # followers' caught-up times: ISR lag is a duration
        retry, self._apply_failed = self._apply_failed, []
        configs: dict = {}                  # per topic: computed once, not per partition
        retry = [(image.topics[t.name], p) for t, p in retry
                 if image.partition(t.name, p.partition_id) is p]   # else it is in the delta
        with self.replicas.batched_epoch_sync():        # no await inside: nothing served
            for t, p in delta.apply + retry:
                if t.name not in configs:
                    configs[t.name] = self.topic_config(t.name)
                self._apply_partition(t, p, configs[t.name], now)
        if image.brokers is not old.brokers:
            # A broker registered, was fenced or unfenced (rare): ISR expansion depends on
            # whether the follower's broker is usable (KIP-841), so look at every partition we
            # lead on the next ISR tick instead of waiting for the sweep.
            self.replicas.isr_candidates |= self.replicas.led
        self.replicas.discard_preopened()
        self.replication_quotas.update_moves(self.replicas.moving, self.replicas.moving_version,
                                             image.broker_config(self.broker_id))
        self.replicas.dir_moves.set_rate(parse_rate(image.broker_config(self.broker_id).get(
            ALTER_LOG_DIRS_RATE, self.config[ALTER_LOG_DIRS_RATE])))
        self.groups.on_image()
        self.txn.on_image()
        if config_topics is None:
            self.purgatory.notify_all()     # a broker-level default changed: anything may have
        self._maybe_serve()

    async def _open_logs_ahead(self, image: MetadataImage, delta) -> None:
        """Many partitions new to this broker (a start, a big CreateTopics): open their logs in
        threads, off the event loop, before applying the image (until then requests see the
        previous image, consistent with the hosted replicas)."""
        removed = set(delta.removed)
        wanted, configs = [], {}
        for t, p in delta.apply:
            key = (t.name, p.partition_id)
            if self.broker_id in p.replicas and key not in removed and self.replicas.get(*key) is None:
                if t.name not in configs:
                    configs[t.name] = self.topic_config(t.name, image)
                wanted.append((t.name, p.partition_id, configs[t.name]))
        if len(wanted) >= OPEN_AHEAD_MIN:
            started = time.monotonic()
            await trio.to_thread.run_sync(self.replicas.preopen, wanted,
                                          self.config["num.recovery.threads.per.data.dir"])
            log.info("opened %d logs in %.1f s", len(wanted), time.monotonic() - started)

    def _apply_partition(self, topic, p, cfg: dict, now: int) -> None:
        key = (topic.name, p.partition_id)
        if self.broker_id not in p.replicas:
            if self.replicas.get(*key) is not None:
                self.fetchers.unfollow(*key)
                self.replicas.remove_partition(*key, delete=True)
                self.purgatory.notify(key)
            return
        min_isr = int(cfg.get("min.insync.replicas", "1"))
        try:
            role = self.replicas.apply_partition(
                topic.name, topic.topic_id, p.partition_id, list(p.replicas), list(p.isr),
                p.leader, p.leader_epoch, p.partition_epoch, cfg, min_isr, now,
                p.replication_factor, p.adding_replicas)
        except OSError as exc:
            log.error("cannot open %s-%d: %s", topic.name, p.partition_id, exc)
            self._apply_failed.append((topic, p))       # tried again with the next image
            return
        if role is Role.FOLLOWER and p.leader >= 0:
            self.fetchers.follow(topic.name, p.partition_id, p.leader)
        else:
            self.fetchers.unfollow(topic.name, p.partition_id)
        self.purgatory.notify(key)          # waiters and fetch sessions re-check this partition

    def on_heartbeat_state(self) -> None:
        if self.client.caught_up and self._serve_from is None:
            self._serve_from = self.client.image.offset
            self._maybe_serve()
        if not self.client.fenced and not self.unfenced_once.is_set():
            print(f"broker {self.broker_id} unfenced: serving on {self.host}:{self.port}", flush=True)
            self.unfenced_once.set()

    def _maybe_serve(self) -> None:
        """Serve requests, and ask to be unfenced, once the image applied reaches what was
        replayed at the first catch-up (see `serving`)."""
        if self.serving.is_set() or self._serve_from is None or \
                self.image.offset < self._serve_from:
            return
        self.serving.set()
        self.client.ready_to_unfence = True
        self.client.heartbeat_soon()

    # -- housekeeping -----------------------------------------------------------------------------

    def isr_eligible(self, broker_id: int) -> bool:
        b = self.image.brokers.get(broker_id)
        return b is not None and b.usable

    def checkpoint_high_watermarks(self, force: bool = True) -> None:
        """Write every high watermark to the checkpoint file; unless `force`, only when one
        changed since the last write (an idle broker writes nothing)."""
        offsets = self.replicas.high_watermarks_to_checkpoint(only_if_changed=not force)
        if offsets is None:
            return
        placement = self.log_dirs.placement
        for d in self.log_dirs.online():
            path = os.path.join(d.path, HIGH_WATERMARK_FILE)
            try:
                self.replicas.check_storage(log_dir=d)
                write_checkpoint(path, {k: v for k, v in offsets.items() if placement.get(k) is d})
            except OSError as exc:
                log.error("writing %s failed: %s", path, exc)
                self.replicas.storage_failed(None, exc, d)

    # -- lifecycle --------------------------------------------------------------------------------

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        from partition_server.handlers import SUPPORTED, dispatch
        from partition_server.security import setup as security
        from partition_server.security.endpoints import rewrite
        listeners = security.broker_listeners(self.config, self.credentials)
        inter_name = self.listener_set.inter_broker

        async def dispatch_on(ctx, req):
            if not self.serving.is_set():
                await self.serving.wait()
            response = await dispatch(self.handler_context, ctx, req)
            if ctx.listener != inter_name and response is not None:
                rewrite(self.image, ctx.listener, req.api_key, response)   # per-listener addresses
            return response

        metrics_on = bool(self.config["raftka.metrics.listener"])
        if metrics_on and enabled_by_env():         # per-API counters and latency histograms
            dispatch_on = self.request_stats.wrap(dispatch_on)
        async with trio.open_nursery() as nursery:
            if metrics_on:          # first: /health/ready answers 503 (and why) while starting
                await nursery.start(self._serve_metrics)
            for listener, sec in listeners:
                await nursery.start(functools.partial(
                    serve_listener, listener.host, listener.port, dispatch_on, listener.name,
                    self.config["socket.request.max.bytes"], SUPPORTED,
                    idle_timeout_s=self.config["connections.max.idle.ms"] / 1000, security=sec))
            await self.client.register()
            nursery.start_soon(self.client.follow_metadata, self.on_image)
            nursery.start_soon(self.client.heartbeat_loop, self.on_heartbeat_state)
            nursery.start_soon(self.fetchers.run)
            nursery.start_soon(self.purgatory.run)      # times out purgatory waiters
            nursery.start_soon(self._isr_loop)
            nursery.start_soon(housekeeping.housekeeping_loop, self.replicas, self.purgatory,
                               self.config["log.retention.check.interval.ms"] / 1000,
                               self.config["replica.high.watermark.checkpoint.interval.ms"] / 1000,
                               self.checkpoint_high_watermarks)
            nursery.start_soon(self.groups.tick_loop)
            nursery.start_soon(self.txn.run)
            nursery.start_soon(self.groups.lag.run)
            nursery.start_soon(self._delete_stray_logs)
            nursery.start_soon(self.replicas.dir_moves.run)         # AlterReplicaLogDirs copies
            from partition_server.offline_replicas import report_loop
            nursery.start_soon(report_loop, self.client, self.replicas, self._current_image,
                               self.dir_failed, self.client.heartbeat_interval_s)
            task_status.started()

    async def _serve_metrics(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """`/metrics`, `/health/live`, `/health/ready` on raftka.metrics.listener."""
        from common.http_endpoint import health_answer
        from partition_server import health
        from partition_server.metrics import MetricSources, serve_metrics
        sources = MetricSources(self.replicas, self.fetch_sessions, self.fetchers,
                                self.groups, lambda: getattr(self, "client_quotas", None),
                                self.segment_files, self.replication_quotas,
                                image=lambda: self.image, requests=self.request_stats,
                                txns=self.txn.txns, txn_loads=self.txn.loads,
                                log_dir=[d.path for d in self.log_dirs.dirs])

        def ready():
            return health_answer(*health.readiness(self._health(health.BrokerHealth)),
                                 broker_id=self.broker_id)
        await serve_metrics(sources, ready, self.config["raftka.metrics.listener"],
                            task_status=task_status)

    def _health(self, cls):
        client = self.client
        me = self.image.brokers.get(self.broker_id)
        return cls(registered=(client.broker_epoch >= 0 and not client.unregistered
                               and me is not None and me.broker_epoch == client.broker_epoch),
                   fenced=client.fenced, applied_offset=self.image.offset,
                   replayed_offset=client.image.offset, heard_offset=client.heard_offset,
                   failed_logs=len(self._apply_failed),
                   log_dir_failed=self.replicas.log_dir_failed)

    async def _delete_stray_logs(self) -> None:
        """Once caught up with the metadata log: logs of partitions no longer ours (stray_logs.py,
        e.g. a reassignment that finished while this broker was down)."""
        from partition_server.stray_logs import delete_stray_logs
        # every log of this broker looks stray in the image before the catch-up (a restart
        # with 2,000 partitions lost them all)
        await self.caught_up_applied()
        for d in self.log_dirs.online():
            await delete_stray_logs(d.path, self.image, self.broker_id,
                                    set(self.replicas.partitions))
        self.replicas.dir_moves.drop_unhosted_futures()     # interrupted moves no longer ours

    async def caught_up_applied(self) -> None:
        """Until the first metadata catch-up is applied. "Caught up" is about the metadata the
        client has *replayed*; on_image may still be opening logs ahead (in threads) with the
        previous image in place. `serving` is set once what was replayed then is applied
        (on_image sets the image and applies its partitions in one step)."""
        await self.serving.wait()

    async def _isr_loop(self) -> None:
        """ISR changes proposed from a caught-up image only, as Kafka's broker publishes no
        metadata before its first catch-up: a restart's image is the one before it, where the
        other brokers look usable and leaderships are stale. At 30,000 partitions one broker's
        first AlterPartition was refused 30,000 times (INELIGIBLE_REPLICA, NOT_LEADER_OR_FOLLOWER),
        seconds of the active controller's loop while every broker's heartbeat waited."""
        from partition_server.replication.isr import send_alter_partition
        await self.caught_up_applied()
        await housekeeping.isr_loop(
            self.replicas, self.config["replica.lag.time.max.ms"], self.isr_eligible,
            functools.partial(send_alter_partition, self.client, self.broker_id, self.replicas,
                              self.purgatory))

    async def controlled_shutdown(self, timeout_s: float = 10.0) -> None:
        """Ask the controller to move our leaderships away, wait until told to stop (an
        unregistered broker leads nothing and has no controller to ask)."""
        self.client.want_shutdown = True
        with trio.move_on_after(timeout_s):
            while not self.client.should_shut_down and not self.client.unregistered:
                await trio.sleep(0.1)

    def close(self) -> None:
        self.replicas.close_all()
        self.checkpoint_high_watermarks()
        home = self.log_dirs.by_path(self.log_dir)
        if home is not None and home.online:
            clean_shutdown.record_clean(self.log_dir, self.client.broker_epoch)
