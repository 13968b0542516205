"""The controller service's side of metadata transactions (KIP-868): a multi-entry commit that
fails part-way leaves a transaction open in the committed log; the next command first commits an
Abort, so nothing of the failed operation ever applies and later operations do.

The Raft layer is a stand-in that commits synchronously through the real `MetadataLog` (and can
fail an entry), so the service code under test is the real one.
"""

import uuid

import trio
import trio.testing

from metadata_quorum.config import ControllerConfig
from metadata_quorum.controller.quorum_controller import QuorumController
from metadata_quorum.quorum.raft import MetadataLog
from metadata_quorum import records as r
from metadata_quorum.controller_stats import ControllerStats
from metadata_quorum.heartbeat_connections import HeartbeatConnections
from metadata_quorum.pipeline import CommandPipeline
from metadata_quorum.raft_inbox import RaftInbox
from metadata_quorum.service import ControllerService, NotActive

import pytest


class FakeQuorum:
    """Commits each proposed entry at once through a real MetadataLog; `fail_from` makes the
    n-th entry onwards fail as a lost leadership would (never committed)."""

    def __init__(self):
        self.log = MetadataLog()
        self.proposed = 0
        self.applied = 0
        self.fail_from: int | None = None

    def propose(self, batch: bytes, callback) -> None:
        self.proposed += 1
        if self.fail_from is not None and self.proposed >= self.fail_from:
            callback(None, 1)           # FAIL_REASON.QUEUE_FULL-style error: not committed
            return
        first = self.log.apply.__wrapped__(self.log, batch)
        self.applied += 1
        callback(first, 0)

    def applied_index(self) -> int:
        """RaftQuorum's: how many entries were applied here."""
        return self.applied


async def make_service() -> ControllerService:
    svc = ControllerService.__new__(ControllerService)
    svc.config = ControllerConfig(0, {0: ("127.0.0.1", 1)}, {0: ("127.0.0.1", 2)},
                                  ("127.0.0.1", 1), "/nonexistent", "x")
    svc.controller = QuorumController(default_replication_factor=1)
    svc.quorum = FakeQuorum()
    svc.next_offset, svc.tail, svc.tail_start = 0, [], 0
    svc.new_data = trio.Event()
    svc.active = False
    svc.lock = trio.Lock()
    svc.observers = {}
    svc.heartbeat_conns = HeartbeatConnections(svc.config.disconnect_fence_ms)
    svc.role_changed = trio.Event()
    svc.stats = ControllerStats()
    svc.token = trio.lowlevel.current_trio_token()
    svc.inbox = RaftInbox(svc.token)
    svc.pipeline = CommandPipeline()
    svc.pipelined = True
    svc._install(svc.quorum.log.subscribe(svc._on_event_threadsafe))
    await svc.become_active()                   # what the leadership loop does
    return svc


def big_topic(name: str, partitions: int):
    tid = uuid.uuid4()
    return [r.TopicRecord(name, tid)] + [r.PartitionRecord(tid, p, (0,), (0,), 0)
                                         for p in range(partitions)]


async def settle():
    await trio.testing.wait_all_tasks_blocked()


async def test_a_failed_multi_entry_commit_is_aborted_before_the_next_command():
    svc = await make_service()
    await svc.mutate(lambda now: ([r.RegisterBrokerRecord(0, "i", 1, "h", 1, fenced=False)], None))
    entries = len(r.encode_entries(big_topic("big", 5_000)))
    assert entries > 3
    svc.quorum.fail_from = svc.quorum.proposed + 3      # the third entry of it fails
    with pytest.raises(NotActive):
        await svc.mutate(lambda now: (big_topic("big", 5_000), None))
    await settle()
    assert svc.controller.image.in_transaction and "big" not in svc.controller.image.topics
    assert not svc.active                       # a failed commit renounces ...
    svc.quorum.fail_from = None
    await svc.become_active()                   # ... and the leadership loop activates again
    await svc.mutate(lambda now: (big_topic("small", 3), None))
    await settle()
    image = svc.controller.image
    assert not image.in_transaction
    assert "big" not in image.topics and len(image.topics["small"].partitions) == 3
    # the committed log holds the Abort right before the next command's records
    tail = [type(r.decode_record(x)).__name__ for x in svc.tail]
    assert tail.index("AbortTransactionRecord") < tail.index("TopicRecord", tail.index(
        "AbortTransactionRecord"))
    assert image.same_state(svc.quorum.log.image)


async def test_a_successful_multi_entry_commit_applies_all_at_once():
    svc = await make_service()
    commits = sum(svc.stats.commit_time.hist[:-1])
    await svc.mutate(lambda now: (big_topic("big", 5_000), None))
    await settle()
    image = svc.controller.image
    assert not image.in_transaction and len(image.topics["big"].partitions) == 5_000
    assert svc.next_offset == image.offset + 1 == len(svc.tail)
    assert sum(svc.stats.commit_time.hist[:-1]) == commits + 1    # one command, one commit time


async def test_a_record_over_the_size_limit_is_refused_without_writing_anything():
    from metadata_quorum.service import CommandRefused
    svc = await make_service()
    huge = r.ConfigRecord(2, "t", "x", "v" * (r.MAX_RECORD_BYTES + 1))
    proposed = svc.quorum.proposed
    with pytest.raises(CommandRefused):
        await svc.mutate(lambda now: ([huge], None))
    assert svc.quorum.proposed == proposed
