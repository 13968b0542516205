"""A follower's Fetch in an incremental session, leader side (handlers/fetch_follower.py): after
the full fetch, an idle incremental fetch reads no partition and answers none; an append wakes
a waiting fetch that then reads only that partition (and, once woken, the partitions appended
in the next scheduler passes, within a bound); registrations follow the session."""

import types

import trio
import trio.testing

from partition_server.config import FETCH_MAX_BYTES
from partition_server.fetch_session import FetchSessionCache
from partition_server.handlers.fetch import handle_fetch
from partition_server.handlers.fetch_follower import COALESCE_MAX_PASSES, close_session
from partition_server.log import LogConfig, PartitionLog
from partition_server.purgatory import Purgatory
from partition_server.replica_manager import ReplicaManager
from partition_server.replication.throttle import ReplicationQuotas
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS
from wire.records.batch import build_batch

N = 200
T0 = 1_700_000_000_000


class FakeBroker:
    def __init__(self, tmp_path, replicas=(0, 1)):
        def opener(topic, partition, cfg):
            return PartitionLog(str(tmp_path / f"{topic}-{partition}"), LogConfig())
        self.purgatory = Purgatory()
        self.replicas = ReplicaManager(0, opener)
        self.replicas.on_change = self.purgatory.notify
        self.fetch_sessions = FetchSessionCache(on_close=close_session)
        self.replication_quotas = ReplicationQuotas(0)
        self.config = {"fetch.max.bytes": FETCH_MAX_BYTES}
        self.image = types.SimpleNamespace(
            topics={"t": object()}, topic_names={},
            partition=lambda topic, p: object() if topic == "t" and 0 <= p < N else None)
        for p in range(N):
            self.replicas.apply_partition("t", None, p, list(replicas), list(replicas), 0, 1, 1,
                                          {}, 1, 0)
        self.reads = []
        read = self.replicas.read

        def counting_read(topic, partition, *args, **kw):
            self.reads.append(partition)
            return read(topic, partition, *args, **kw)
        self.replicas.read = counting_read


def fetch(session_id, epoch, offsets=None, forgotten=(), max_wait_ms=0, replica_id=1):
    cls = REQUESTS[ApiKey.FETCH]
    parts = [cls.FetchPartition(partition=p, current_leader_epoch=1, fetch_offset=o,
                                last_fetched_epoch=-1, log_start_offset=0,
                                partition_max_bytes=1 << 20)
             for p, o in (offsets or {}).items()]
    body = cls(replica_id=replica_id, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=16 << 20,
               isolation_level=0, session_id=session_id, session_epoch=epoch,
               topics=[cls.FetchTopic(topic="t", partitions=parts)] if parts else [],
               forgotten_topics_data=[cls.ForgottenTopic(topic="t", partitions=list(forgotten))]
               if forgotten else [])
    return types.SimpleNamespace(body=body, api_version=12)


def answered(resp):
    return sorted(p.partition_index for t in resp.responses for p in t.partitions)


async def test_idle_incremental_fetch_reads_and_answers_nothing(tmp_path, autojump_clock):
    b = FakeBroker(tmp_path)
    resp = await handle_fetch(b, fetch(0, 0, {p: 0 for p in range(N)}))
    sid = resp.session_id
    assert sid != 0 and answered(resp) == list(range(N)) and len(b.reads) == N
    assert b.purgatory.watched_keys() == N
    b.reads.clear()
    start = trio.current_time()
    resp = await handle_fetch(b, fetch(sid, 1, max_wait_ms=500))
    assert resp.error_code == 0 and answered(resp) == [] and b.reads == []
    assert trio.current_time() - start >= 0.5                 # it long-polled
    # the session's follower is caught up as of this fetch, without reading any partition
    state = b.replicas.get("t", 5).state
    assert state.followers[1].fetch_clock.last_fetch_ms >= state.followers[1].last_caught_up_ms


async def test_append_wakes_the_session_and_only_that_partition_is_read(tmp_path, autojump_clock):
    b = FakeBroker(tmp_path)
    sid = (await handle_fetch(b, fetch(0, 0, {p: 0 for p in range(N)}))).session_id
    b.reads.clear()
    out = []

    async def follower_fetch():
        out.append(await handle_fetch(b, fetch(sid, 1, max_wait_ms=5_000)))

    async with trio.open_nursery() as n:
        n.start_soon(follower_fetch)
        await trio.testing.wait_all_tasks_blocked()
        start = trio.current_time()
        res = b.replicas.append_records("t", 7, build_batch([(None, b"x", [], T0)]), 1, T0)
        assert res.error == 0
    assert trio.current_time() - start < 5                     # woken, not timed out
    assert answered(out[0]) == [7] and b.reads == [7]
    # the follower sends partition 7's new position: that partition alone is read and, named by
    # the request, answered (the leader's high watermark moved with the follower's fetch)
    b.reads.clear()
    resp = await handle_fetch(b, fetch(sid, 2, {7: 1}))
    assert b.reads == [7] and answered(resp) == [7]
    assert b.replicas.get("t", 7).state.high_watermark == 1
    # that answer carried the high watermark its own fetch moved: the session does not read
    # partition 7 again for it
    b.reads.clear()
    resp = await handle_fetch(b, fetch(sid, 3))
    assert b.reads == [] and answered(resp) == []


async def test_a_high_watermark_move_alone_does_not_wake_another_session(tmp_path,
                                                                         autojump_clock):
    """RF 3: follower 1's fetch moves the high watermark; follower 2's long poll is not woken
    for it (as Kafka's DelayedFetch, it completes on records) and its answer at the end of the
    wait carries the new high watermark."""
    b = FakeBroker(tmp_path, replicas=(0, 1, 2))
    sids = {r: (await handle_fetch(b, fetch(0, 0, {p: 0 for p in range(N)}, replica_id=r)))
            .session_id for r in (1, 2)}
    assert b.replicas.append_records("t", 7, build_batch([(None, b"x", [], T0)]), 1,
                                     T0).error == 0
    for r in (1, 2):                              # both read the record
        assert answered(await handle_fetch(b, fetch(sids[r], 1, replica_id=r))) == [7]
    await handle_fetch(b, fetch(sids[2], 2, {7: 1}, replica_id=2))    # follower 2 has it
    assert b.replicas.get("t", 7).state.high_watermark == 0
    out = []

    async def long_poll():
        start = trio.current_time()
        out.append((await handle_fetch(b, fetch(sids[2], 3, max_wait_ms=5_000, replica_id=2)),
                    trio.current_time() - start))

    async with trio.open_nursery() as n:
        n.start_soon(long_poll)
        await trio.testing.wait_all_tasks_blocked()
        await handle_fetch(b, fetch(sids[1], 2, {7: 1}, replica_id=1))
        assert b.replicas.get("t", 7).state.high_watermark == 1
        b.reads.clear()
        await trio.testing.wait_all_tasks_blocked()
        assert b.reads == []                      # follower 2's session was not woken to read
    resp, waited = out[0]
    assert waited >= 5 and answered(resp) == [7]
    assert resp.responses[0].partitions[0].high_watermark == 1


async def _woken_fetch_with_appends(b, sid, partitions) -> list:
    """A follower fetch long-polls; then one append per scheduler pass (as Produce requests
    of one partition each reach their appends); the partitions its answer carries."""
    out = []

    async def follower_fetch():
        out.append(await handle_fetch(b, fetch(sid, 1, max_wait_ms=5_000)))

    async def producer():
        for p in partitions:
            assert b.replicas.append_records("t", p, build_batch([(None, b"x", [], T0)]), 1,
                                             T0).error == 0
            await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as n:
        n.start_soon(follower_fetch)
        await trio.testing.wait_all_tasks_blocked()
        n.start_soon(producer)
    return answered(out[0])


async def test_a_woken_fetch_gathers_the_appends_under_way(tmp_path, autojump_clock):
    b = FakeBroker(tmp_path)
    sid = (await handle_fetch(b, fetch(0, 0, {p: 0 for p in range(N)}))).session_id
    assert await _woken_fetch_with_appends(b, sid, [3, 4, 5, 6]) == [3, 4, 5, 6]


async def test_a_woken_fetch_does_not_wait_for_appends_without_end(tmp_path, autojump_clock):
    b = FakeBroker(tmp_path)
    sid = (await handle_fetch(b, fetch(0, 0, {p: 0 for p in range(N)}))).session_id
    got = await _woken_fetch_with_appends(b, sid, range(N))
    # the append that woke it, one per pass while it waits, one in the pass it reads in
    assert 1 < len(got) <= COALESCE_MAX_PASSES + 2 < N


async def test_registrations_follow_the_session(tmp_path, autojump_clock):
    b = FakeBroker(tmp_path)
    sid = (await handle_fetch(b, fetch(0, 0, {p: 0 for p in range(10)}))).session_id
    assert b.purgatory.watched_keys() == 10
    await handle_fetch(b, fetch(sid, 1, {10: 0, 11: 0}, forgotten=[0, 1, 2]))
    assert b.purgatory.watched_keys() == 9
    assert b.replicas.get("t", 0).state.followers[1].fetch_clock is None
    resp = await handle_fetch(b, fetch(sid, 3))               # wrong epoch
    assert resp.error_code == 71                              # INVALID_FETCH_SESSION_EPOCH
    await handle_fetch(b, fetch(sid, -1))                     # close the session
    assert b.purgatory.watched_keys() == 0 and not b.fetch_sessions.sessions


async def test_leadership_change_is_read_again(tmp_path, autojump_clock):
    b = FakeBroker(tmp_path)
    sid = (await handle_fetch(b, fetch(0, 0, {p: 0 for p in range(N)}))).session_id
    b.replicas.apply_partition("t", None, 3, [0, 1], [0, 1], 1, 2, 2, {}, 1, 0)   # 1 leads now
    b.purgatory.notify(("t", 3))
    resp = await handle_fetch(b, fetch(sid, 1, max_wait_ms=500))
    parts = [p for t in resp.responses for p in t.partitions]
    assert [(p.partition_index, p.error_code) for p in parts] == [(3, 6)]  # NOT_LEADER_OR_FOLLOWER


def _size(records) -> int:
    """Bytes of a partition's records in an answer: bytes, or a FileRange (sent by sendfile)."""
    return 0 if records is None else getattr(records, "size", None) or len(records)


def _fill(b, partitions, value_bytes=600):
    for p in partitions:
        res = b.replicas.append_records("t", p, build_batch([(None, b"v" * value_bytes, [], T0)]),
                                        1, T0)
        assert res.error == 0


async def test_broker_fetch_max_bytes_caps_a_follower_fetch(tmp_path, autojump_clock):
    """Kafka's broker `fetch.max.bytes` caps what any Fetch is answered with, whatever its
    max_bytes asks: the first batch still goes (KIP-74), the partition that no longer fits is
    read on the session's next fetch."""
    b = FakeBroker(tmp_path)
    b.config = {"fetch.max.bytes": 1024}
    sid = (await handle_fetch(b, fetch(0, 0, {p: 0 for p in range(N)}))).session_id
    _fill(b, (3, 4))
    first = await handle_fetch(b, fetch(sid, 1))               # asks for 16 MiB
    sizes = {p.partition_index: _size(p.records) for t in first.responses for p in t.partitions
             if _size(p.records)}
    assert len(sizes) == 1 and sum(sizes.values()) <= 1024
    second = await handle_fetch(b, fetch(sid, 2))
    assert answered(second) == sorted({3, 4} - set(sizes))


async def test_min_bytes_above_the_broker_cap_is_held_to_it(tmp_path, autojump_clock):
    """A fetch whose min_bytes is above `fetch.max.bytes` could never gather them: like
    Kafka, min_bytes is cut to the cap, so the fetch answers once that much is there instead
    of waiting out max_wait_ms (here the first batch, larger than the cap, goes alone)."""
    b = FakeBroker(tmp_path)
    b.config = {"fetch.max.bytes": 1024}
    sid = (await handle_fetch(b, fetch(0, 0, {p: 0 for p in range(N)}))).session_id
    _fill(b, (3,), value_bytes=1100)
    req = fetch(sid, 1, max_wait_ms=5_000)
    req.body.min_bytes = 4 << 20
    start = trio.current_time()
    resp = await handle_fetch(b, req)
    assert trio.current_time() - start < 5 and answered(resp) == [3]
    b.config = {"fetch.max.bytes": 8 << 20}                  # under a cap above it: it waits
    _fill(b, (4,), value_bytes=1100)
    req = fetch(sid, 2, {3: 1}, max_wait_ms=5_000)
    req.body.min_bytes = 4 << 20
    start = trio.current_time()
    await handle_fetch(b, req)
    assert trio.current_time() - start >= 5


async def test_broker_fetch_max_bytes_caps_a_consumer_fetch(tmp_path, autojump_clock):
    b = FakeBroker(tmp_path, replicas=(0,))           # no follower: appends are committed
    b.config = {"fetch.max.bytes": 1024}
    _fill(b, (3, 4))
    resp = await handle_fetch(b, fetch(0, -1, {3: 0, 4: 0}, replica_id=-1))
    got = [_size(p.records) for t in resp.responses for p in t.partitions]
    assert len([g for g in got if g]) == 1 and sum(got) <= 1024
    b.config = {"fetch.max.bytes": 1 << 20}
    resp = await handle_fetch(b, fetch(0, -1, {3: 0, 4: 0}, replica_id=-1))
    assert all(_size(p.records) for t in resp.responses for p in t.partitions)
