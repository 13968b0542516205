"""Which partitions have acks=all produces waiting for replication (ReplicaManager
.produce_waiting): the ISR loop proposes their ISR changes first (housekeeping.isr_loop)."""

import types

import trio

from partition_server.handlers.produce import _replicated
from partition_server.log import LogConfig, PartitionLog
from partition_server.purgatory import Purgatory
from partition_server.replica_manager import ReplicaManager
from wire.errors import ErrorCode
from wire.records.batch import build_batch


async def test_a_waiting_produce_is_counted_until_it_is_answered(tmp_path, autojump_clock):
    rm = ReplicaManager(0, lambda t, p, cfg: PartitionLog(str(tmp_path / f"{t}-{p}"),
                                                            LogConfig()))
    rm.apply_partition("t", None, 0, [0, 1], [0, 1], 0, 1, 1, {}, 2, 0)
    hctx = types.SimpleNamespace(replicas=rm, purgatory=Purgatory())
    appended = [rm.append_records("t", 0, build_batch([(None, b"v", [], 0)]), -1, 0)
                for _ in range(2)]
    assert all(r.error == ErrorCode.NONE for r in appended)
    async with trio.open_nursery() as nursery:
        for r in appended:                           # two requests wait on the partition
            nursery.start_soon(_replicated, hctx, [("t", 0, r)], 30.0)
        await trio.sleep(1)
        assert rm.produce_waiting == {("t", 0): 2}
        rm.get("t", 0).state.update_follower_fetch(1, 2, 0)        # the follower caught up
        hctx.purgatory.notify(("t", 0))
    assert rm.produce_waiting == {}
    assert [r.error for r in appended] == [ErrorCode.NONE, ErrorCode.NONE]
    late = rm.append_records("t", 0, build_batch([(None, b"v", [], 0)]), -1, 0)
    await _replicated(hctx, [("t", 0, late)], 5.0)   # nobody fetches: it times out
    assert late.error == ErrorCode.REQUEST_TIMED_OUT and rm.produce_waiting == {}
