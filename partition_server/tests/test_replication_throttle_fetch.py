"""The leader's replication throttle in both follower fetch paths (handlers/fetch_follower.py,
handlers/fetch.py): a held-back partition is answered without records; in a session it is read
again on the next fetch (nothing else would mark it: the follower's position did not move); a
sessionless fetch waits out its max wait rather than answering at once and spinning."""

import trio

from common.clock import steady_ms
from partition_server.handlers.fetch import handle_fetch
from partition_server.replication.throttle import ALL
from partition_server.tests.test_fetch_follower import T0, FakeBroker, fetch
from wire.records.batch import build_batch


def _records(resp, partition: int) -> int:
    for t in resp.responses:
        for p in t.partitions:
            if p.partition_index == partition:
                records = p.records
                if records is None:
                    return 0
                return records.size if hasattr(records, "size") else len(records)
    return -1                                        # not in the answer


def _held_back_broker(tmp_path):
    b = FakeBroker(tmp_path)
    b.replicas.apply_partition("t", None, 0, [0, 1], [0], 0, 1, 2, {}, 1, 0)   # 1 out of the ISR
    assert b.replicas.append_records("t", 0, build_batch([(None, b"x" * 1000, [], T0)]),
                                     1, T0).error == 0
    quota = b.replication_quotas.leader
    quota.configure(1000.0, {"t": ALL})
    quota.record(10**6, steady_ms())                 # ~990 s in debt: held back
    return b, quota


async def test_a_session_reads_a_held_back_partition_again_on_the_next_fetch(tmp_path,
                                                                              autojump_clock):
    b, quota = _held_back_broker(tmp_path)
    resp = await handle_fetch(b, fetch(0, 0, {0: 0, 1: 0}))
    sid = resp.session_id
    assert sid != 0 and _records(resp, 0) == 0
    assert quota.held_back >= 1
    quota.configure(None, {"t": ALL})                # the throttle is lifted
    b.reads.clear()
    resp = await handle_fetch(b, fetch(sid, 1, max_wait_ms=500))
    assert b.reads == [0] and _records(resp, 0) > 1000


async def test_a_sessionless_fetch_waits_instead_of_spinning(tmp_path, autojump_clock):
    b, quota = _held_back_broker(tmp_path)
    start = trio.current_time()
    resp = await handle_fetch(b, fetch(0, -1, {0: 0}, max_wait_ms=500))
    assert resp.session_id == 0 and _records(resp, 0) == 0
    assert trio.current_time() - start >= 0.5
    quota.configure(None, {"t": ALL})
    resp = await handle_fetch(b, fetch(0, -1, {0: 0}, max_wait_ms=500))
    assert _records(resp, 0) > 1000
