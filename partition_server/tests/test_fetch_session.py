"""Incremental fetch sessions (KIP-227): the pure cache and context rules."""

import dataclasses
import random

from partition_server.fetch_session import FetchSessionCache
from wire.errors import ErrorCode as E


@dataclasses.dataclass
class Req:
    fetch_offset: int


@dataclasses.dataclass
class Res:
    high_watermark: int = 10
    last_stable_offset: int = 10
    log_start_offset: int = 0
    size: int = 0
    error: E = E.NONE
    diverging_epoch: tuple | None = None


A0, A1, B0 = ("a", 0), ("a", 1), ("b", 0)


def cache(**kw):
    return FetchSessionCache(rng=random.Random(7), **kw)


def test_sessionless_and_full_fetches():
    c = cache()
    ctx = c.new_context(0, -1, [(A0, Req(0))], [], 0)
    assert ctx.session_id == 0 and ctx.partitions == [(A0, Req(0))] and not c.sessions
    results = [(A0, Res())]
    assert ctx.select(results) == results
    ctx = c.new_context(0, 0, [(A0, Req(0)), (A1, Req(5))], [], 0)
    assert ctx.session_id != 0 and ctx.session.next_epoch == 1 and list(c.sessions) == [ctx.session_id]
    results = [(A0, Res()), (A1, Res(size=0))]
    assert ctx.select(results) == results                # a full response has every partition


def test_incremental_sends_only_changes_and_remembers_positions():
    c = cache()
    sid = c.new_context(0, 0, [(A0, Req(0)), (A1, Req(0))], [], 0).session_id
    c.sessions[sid].partitions[A0].high_watermark = 10
    c.sessions[sid].partitions[A1].high_watermark = 10
    c.sessions[sid].partitions[A0].last_stable_offset = c.sessions[sid].partitions[A1].last_stable_offset = 10
    c.sessions[sid].partitions[A0].log_start_offset = c.sessions[sid].partitions[A1].log_start_offset = 0
    # epoch 1: nothing in the request, so every session partition is fetched at its old position
    ctx = c.new_context(sid, 1, [], [], 1)
    assert ctx.incremental and [k for k, _ in ctx.partitions] == [A0, A1]
    assert ctx.select([(A0, Res()), (A1, Res())]) == []                 # nothing new
    # epoch 2: A1 moved on; B0 added; A1 has records, A0's high watermark moved
    ctx = c.new_context(sid, 2, [(A1, Req(10)), (B0, Req(3))], [], 2)
    assert dict(ctx.partitions) == {A0: Req(0), A1: Req(10), B0: Req(3)}
    sent = ctx.select([(A0, Res(high_watermark=12)), (A1, Res(size=100)), (B0, Res())])
    assert [k for k, _ in sent] == [A0, A1, B0]
    # the partition that returned records moved to the back (fairness under max_bytes)
    assert list(c.sessions[sid].partitions) == [A0, B0, A1]
    # epoch 3: forget A0; errors and diverging epochs are always sent
    ctx = c.new_context(sid, 3, [], [A0], 3)
    assert [k for k, _ in ctx.partitions] == [B0, A1]
    sent = ctx.select([(B0, Res(-1, -1, -1, error=E.NOT_LEADER_OR_FOLLOWER)),
                       (A1, Res(diverging_epoch=(1, 5)))])
    assert [k for k, _ in sent] == [B0, A1]
    ctx = c.new_context(sid, 4, [], [], 4)
    assert [k for k, _ in ctx.select([(B0, Res()), (A1, Res(log_start_offset=3))])] == [B0, A1]


def test_session_errors_and_closing():
    c = cache()
    sid = c.new_context(0, 0, [(A0, Req(0))], [], 0).session_id
    assert c.new_context(sid + 1, 1, [], [], 0).error == E.FETCH_SESSION_ID_NOT_FOUND
    assert c.new_context(sid, 2, [], [], 0).error == E.INVALID_FETCH_SESSION_EPOCH
    assert c.new_context(sid, 1, [], [], 0).error == E.NONE
    assert c.new_context(sid, 1, [], [], 0).error == E.INVALID_FETCH_SESSION_EPOCH   # replayed
    ctx = c.new_context(sid, -1, [(A1, Req(0))], [], 0)           # close, then sessionless
    assert ctx.session_id == 0 and sid not in c.sessions and ctx.partitions == [(A1, Req(0))]
    sid2 = c.new_context(0, 0, [(A0, Req(0))], [], 0).session_id
    ctx = c.new_context(sid2, 0, [(B0, Req(0))], [], 0)           # close and open a new one
    assert sid2 not in c.sessions and ctx.session_id in c.sessions
    assert [k for k, _ in ctx.partitions] == [B0]


def test_full_cache_evicts_only_idle_sessions():
    c = cache(max_slots=2, eviction_ms=1000)
    s1 = c.new_context(0, 0, [(A0, Req(0))], [], 0).session_id
    s2 = c.new_context(0, 0, [(A1, Req(0))], [], 500).session_id
    assert c.new_context(0, 0, [(B0, Req(0))], [], 900).session_id == 0     # nobody idle enough
    c.new_context(s1, 1, [], [], 1200)                  # s1 used: s2 is now the LRU one
    s3 = c.new_context(0, 0, [(B0, Req(0))], [], 1600).session_id
    assert s3 != 0 and set(c.sessions) == {s1, s3}
    assert cache(max_slots=0).new_context(0, 0, [(A0, Req(0))], [], 0).session_id == 0


def test_incremental_always_answers_the_partitions_it_names():
    """A follower that dropped an answer as stale re-sends the partition's position; the answer
    must carry the partition even if the leader already told it the same high watermark."""
    c = cache()
    sid = c.new_context(0, 0, [(A0, Req(0)), (A1, Req(0))], [], 0).session_id
    ctx = c.new_context(sid, 1, [], [], 1)
    ctx.select([(A0, Res()), (A1, Res())])
    ctx = c.new_context(sid, 2, [(A1, Req(10))], [], 2)
    ctx.answer_requested = True                      # a follower's fetch (handlers/fetch_follower.py)
    assert [k for k, _ in ctx.select([(A0, Res()), (A1, Res())])] == [A1]
    ctx = c.new_context(sid, 3, [(A1, Req(11))], [], 3)
    assert ctx.select([(A0, Res()), (A1, Res())]) == []   # a consumer: Kafka's rule, news only
