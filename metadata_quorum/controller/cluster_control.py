"""Broker registration, heartbeats, fencing and controlled shutdown (Kafka's
ClusterControlManager + BrokerHeartbeatManager; KIP-631).

Broker lifecycle, as the controller sees it:

    (unknown) ──register──▶ FENCED ──heartbeat with metadata offset ≥ registration offset──▶ ACTIVE
    ACTIVE ──session lapses (no heartbeat for broker.session.timeout.ms)──▶ FENCED
    ACTIVE ──heartbeat wants shutdown──▶ CONTROLLED_SHUTDOWN ──leads nothing──▶ FENCED, told to
                                                                              shut down
    any ──register again (new incarnation)──▶ FENCED with a new broker epoch

Heartbeat times are soft state on the active controller, never logged: a newly elected controller
starts every broker's session afresh (`reset_sessions`) before it may fence anyone.
"""

from __future__ import annotations

import dataclasses

from metadata_quorum import records as r
from metadata_quorum.controller.replication_control import (leadership_changes,
                                                            unclean_shutdown_changes)
from metadata_quorum.image import MetadataImage
from wire.errors import ErrorCode


@dataclasses.dataclass
class RegistrationResult:
    error: ErrorCode
    broker_epoch: int = -1
    message: str | None = None


@dataclasses.dataclass
class HeartbeatResult:
    error: ErrorCode
    is_caught_up: bool = False
    is_fenced: bool = True
    should_shut_down: bool = False


class HeartbeatTracker:
    """Last heartbeat time per broker (soft state of the active controller)."""

    def __init__(self, session_timeout_ms: int):
        self.session_timeout_ms = session_timeout_ms
        self.last_seen: dict[int, int] = {}
        self.closed_at: dict[int, int] = {}     # a session cut short: when its connection closed

    def touch(self, broker_id: int, now_ms: int) -> None:
        self.last_seen[broker_id] = now_ms
        self.closed_at.pop(broker_id, None)

    def alive(self, broker_id: int, now_ms: int) -> bool:
        seen = self.last_seen.get(broker_id)
        return seen is not None and now_ms - seen <= self.session_timeout_ms

    def cut_short(self, broker_id: int, now_ms: int, grace_ms: int) -> None:
        """The broker's heartbeat connection closed: its session ends `grace_ms` from now
        unless a heartbeat arrives first (a live broker reconnects and heartbeats at once)."""
        seen = self.last_seen.get(broker_id)
        if seen is not None:
            self.last_seen[broker_id] = min(seen, now_ms + grace_ms - self.session_timeout_ms)
            self.closed_at[broker_id] = now_ms

    def why_expired(self, broker_id: int, now_ms: int) -> str:
        """An operator's first question after a fencing: which broker, and why."""
        closed = self.closed_at.get(broker_id)
        seen = self.last_seen.get(broker_id)
        if closed is not None:
            return f"its heartbeat connection closed {now_ms - closed} ms ago and no heartbeat came"
        return (f"no heartbeat for {now_ms - seen} ms" if seen is not None else "never heard from"
                ) + f" (broker.session.timeout.ms {self.session_timeout_ms})"

    def forgive(self, now_ms: int, grace_ms: int) -> None:
        """This controller was not running for a while (CPU starvation, a GC or swap pause,
        SIGSTOP): heartbeats sent meanwhile wait unread in its sockets, so the first tick after
        the stall must not fence every broker at once and take every partition offline. Every
        session gets at least `grace_ms` left — time to read what waits in the sockets. Not
        the stall's length added on: stalls that keep coming would then keep a dead broker
        alive for as long as they came."""
        floor = now_ms + grace_ms - self.session_timeout_ms
        for b, seen in self.last_seen.items():
            self.last_seen[b] = max(seen, floor)

    def reset_sessions(self, broker_ids, now_ms: int) -> None:
        self.last_seen = {b: now_ms for b in broker_ids}
        self.closed_at = {}

    def expired(self, image: MetadataImage, now_ms: int) -> list[int]:
        return sorted(b.broker_id for b in image.brokers.values()
                      if not b.fenced and not self.alive(b.broker_id, now_ms))


def register_broker(image: MetadataImage, tracker: HeartbeatTracker, broker_id: int,
                    incarnation_id: str, host: str, port: int, rack: str | None, now_ms: int,
                    listeners: tuple = (), previous_broker_epoch: int | None = None,
                    default_min_isr: int = 1, log_dirs=()):
    """`previous_broker_epoch` (KIP-966): the epoch the broker had when it last shut down
    cleanly, -1 after an unclean shutdown; None when the caller cannot tell (old request
    versions), then nothing is assumed.

    Another incarnation registered and alive is DUPLICATE_BROKER_REGISTRATION, unless the
    newcomer names that incarnation's epoch as its previous one: only a process holding the log
    directory the old one registered from knows it (partition_server/clean_shutdown.py), and a
    broker holds its log directories' locks for its life (common/dir_lock.py), so the old
    process has exited and its session is merely not yet expired. A full cluster restart leaves
    every broker registered and unfenced (no broker can hand its leaderships to another that is
    stopping too), and a newly active controller starts every session afresh: each broker was
    refused for a whole session timeout (9 s) before this, where Kafka refuses the same."""
    old = image.brokers.get(broker_id)
    if old is not None and old.incarnation_id != incarnation_id and not old.fenced \
            and tracker.alive(broker_id, now_ms) and previous_broker_epoch != old.broker_epoch:
        return [], RegistrationResult(ErrorCode.DUPLICATE_BROKER_REGISTRATION, -1,
                                      f"broker {broker_id} is registered by another live process")
    epoch = max(image.offset + 1, (old.broker_epoch + 1) if old else 0)
    records: list = []
    if old is not None and not old.fenced:
        # the previous incarnation may still lead partitions: move them before replacing it
        records += leadership_changes(image, {broker_id}, default_min_isr=default_min_isr)
    if old is not None and previous_broker_epoch is not None and \
            previous_broker_epoch != old.broker_epoch:
        after = image.apply_all(image.offset + 1, records) if records else image
        unclean = unclean_shutdown_changes(after, broker_id)
        if unclean:
            records += unclean
            after = after.apply_all(after.offset + 1, unclean)
            # an emptied ISR may have a usable eligible replica to elect right away
            records += leadership_changes(after, {broker_id}, default_min_isr=default_min_isr)
    records.append(r.RegisterBrokerRecord(broker_id, incarnation_id, epoch, host, port, rack,
                                          fenced=True, listeners=tuple(map(tuple, listeners)),
                                          log_dirs=tuple(log_dirs or ())))
    tracker.touch(broker_id, now_ms)
    return records, RegistrationResult(ErrorCode.NONE, epoch)


def broker_heartbeat(image: MetadataImage, tracker: HeartbeatTracker, broker_id: int,
                     broker_epoch: int, metadata_offset: int, want_fence: bool,
                     want_shutdown: bool, now_ms: int, default_min_isr: int = 1):
    b = image.brokers.get(broker_id)
    if b is None:
        return [], HeartbeatResult(ErrorCode.BROKER_ID_NOT_REGISTERED)
    if b.broker_epoch != broker_epoch:
        return [], HeartbeatResult(ErrorCode.STALE_BROKER_EPOCH)
    tracker.touch(broker_id, now_ms)
    caught_up = metadata_offset >= b.registered_at_offset
    records: list = []
    if want_shutdown and not b.in_controlled_shutdown and not b.fenced:
        records += leadership_changes(image, {broker_id}, default_min_isr=default_min_isr)
        records.append(r.BrokerRegistrationChangeRecord(broker_id, broker_epoch,
                                                        in_controlled_shutdown=True))
        return records, HeartbeatResult(ErrorCode.NONE, caught_up, False, False)
    if b.in_controlled_shutdown or (want_shutdown and b.fenced):
        leads = any(True for _ in image.partitions_led_by(broker_id))
        if not leads and not b.fenced:
            # controlled shutdown done (Kafka's SHUTDOWN_NOW): fenced now, so the restarted
            # process registers at once; with its session left alive, every broker of a full
            # restart was refused DUPLICATE_BROKER_REGISTRATION for a session timeout (9 s)
            records += leadership_changes(image, {broker_id}, default_min_isr=default_min_isr)
            records.append(r.FenceBrokerRecord(broker_id, broker_epoch))
            return records, HeartbeatResult(ErrorCode.NONE, caught_up, True, True)
        return [], HeartbeatResult(ErrorCode.NONE, caught_up, b.fenced, not leads)
    if b.fenced and caught_up and not want_fence:
        records.append(r.UnfenceBrokerRecord(broker_id, broker_epoch))
        records += leadership_changes(image, set(), {broker_id}, default_min_isr)
        return records, HeartbeatResult(ErrorCode.NONE, True, False)
    if not b.fenced and want_fence:
        records += leadership_changes(image, {broker_id}, default_min_isr=default_min_isr)
        records.append(r.FenceBrokerRecord(broker_id, broker_epoch))
        return records, HeartbeatResult(ErrorCode.NONE, caught_up, True)
    return [], HeartbeatResult(ErrorCode.NONE, caught_up, b.fenced)


def fence_expired(image: MetadataImage, tracker: HeartbeatTracker, now_ms: int,
                  default_min_isr: int = 1) -> list:
    """Fence brokers whose session lapsed and move their leaderships (periodic tick)."""
    records: list = []
    # One broker at a time, each against the image the previous fencing leaves behind, so an
    # ISR shrinks to its last member instead of keeping members that were fenced together.
    for broker_id in tracker.expired(image, now_ms):
        recs = leadership_changes(image, {broker_id}, default_min_isr=default_min_isr)
        recs.append(r.FenceBrokerRecord(broker_id, image.brokers[broker_id].broker_epoch))
        image = image.apply_all(image.offset + 1, recs)
        records += recs
    return records
