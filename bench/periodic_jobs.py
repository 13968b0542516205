"""Idle cost of the group and transaction coordinators' periodic jobs, before and after they
became O(changed) (issue 17), side by side in one run, in-process.

    python3 bench/periodic_jobs.py                       # 1k, 10k, 30k
    python3 bench/periodic_jobs.py --sizes 30000 --runs 5

Per size N, with nothing changing between ticks (an idle cluster):
- lag refresh: one group caught up on N partitions led here (group/lag.py): the full refresh
  (every group x partition, kept below) against the incremental one;
- lag refresh, remote: one group caught up on N partitions led by another broker (answered by
  an in-process fake leader): every one asked each refresh (`remote_per_refresh=N`, what the
  monitor did before) against the default bound (1,000 a refresh, the rest in turn);
- offsets expiry: N committed offsets over N/100 empty groups, none old enough to expire
  (`state.expired_offsets` over all of them against `OffsetExpiry`, group/offset_expiry.py);
- transaction timeouts: N idle transactional ids, none near expiry (the full scan against the
  due entries of `TxnTable`, txn/timeouts.py).
Median ms per tick; the last column is old/new.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import trio  # noqa: E402

from partition_server.group.lag import LagMonitor, compute_lag, timestamp_at  # noqa: E402
from partition_server.group.offset_expiry import OffsetExpiry  # noqa: E402
from partition_server.group.state import expired_offsets  # noqa: E402
from partition_server.replication.partition import Role  # noqa: E402
from partition_server.txn import state as S  # noqa: E402
from partition_server.txn.timeouts import TxnTable, timeout_actions  # noqa: E402
from wire.errors import ErrorCode  # noqa: E402
from wire.messages.api_keys import ApiKey  # noqa: E402
from wire.messages.index_generated import RESPONSES  # noqa: E402


async def full_refresh(mon: LagMonitor) -> None:
    """LagMonitor.refresh before it became incremental (local partitions only here)."""
    wanted: dict = {}
    for gid, parts in list(mon.groups.offsets.items()):
        if mon.groups.owns(gid) != ErrorCode.NONE:
            continue
        for tp, value in parts.items():
            wanted.setdefault(tp, []).append((gid, value[0]))
    table, now = {}, int(time.time() * 1000)
    mon._used = {}
    for (topic, partition), users in wanted.items():
        hosted = mon.replicas.get(topic, partition)
        if hosted is not None and hosted.state.role is Role.LEADER and not hosted.offline:
            hw = hosted.state.high_watermark
            for gid, committed in users:
                ts = None
                if 0 <= committed < hw:
                    ts = mon._cached(topic, partition, committed, lambda: timestamp_at(
                        hosted.log.read(committed, 1, min_one=True).read_bytes(), committed))
                table[(gid, topic, partition)] = compute_lag(committed, hw, ts, now)
    mon.table = table
    mon._timestamps = mon._used


def lag_monitor(n: int) -> LagMonitor:
    hosted = {("t", p): types.SimpleNamespace(state=types.SimpleNamespace(
        role=Role.LEADER, high_watermark=100), offline=False) for p in range(n)}
    offsets = {"g": {tp: (100, 0, "", 0) for tp in hosted}}
    groups = types.SimpleNamespace(offsets=offsets, owns=lambda gid: ErrorCode.NONE, loaded={0})
    replicas = types.SimpleNamespace(get=lambda t, p: hosted.get((t, p)), watchers=[],
                                     log_dir_failed=False)
    mon = LagMonitor(groups, replicas, lambda: None, None, 5)
    mon.touch("g")
    return mon


def remote_lag_monitor(n: int, per_refresh: int) -> LagMonitor:
    lo = RESPONSES[ApiKey.LIST_OFFSETS]

    async def answer(req, timeout):          # the leader: every high watermark is 100
        return lo(topics=[lo.ListOffsetsTopicResponse(name=t.name, partitions=[
            lo.ListOffsetsPartitionResponse(partition_index=p.partition_index, offset=100)
            for p in t.partitions]) for t in req.topics])

    async def get(leader):
        return types.SimpleNamespace(request=answer)
    offsets = {"g": {("t", p): (100, 0, "", 0) for p in range(n)}}
    groups = types.SimpleNamespace(offsets=offsets, owns=lambda gid: ErrorCode.NONE, loaded={0})
    replicas = types.SimpleNamespace(get=lambda t, p: None, watchers=[], log_dir_failed=False)
    image = types.SimpleNamespace(topics={}, partition=lambda t, p: types.SimpleNamespace(leader=1))
    mon = LagMonitor(groups, replicas, lambda: image, types.SimpleNamespace(get=get), 5,
                     remote_per_refresh=per_refresh)
    mon.touch("g")
    return mon


def timed(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def measure(n: int, runs: int) -> dict:
    out = {}
    old_mon, new_mon = lag_monitor(n), lag_monitor(n)
    trio.run(full_refresh, old_mon)
    trio.run(new_mon.refresh)
    assert old_mon.table == new_mon.table
    out["lag"] = (timed(lambda: trio.run(full_refresh, old_mon), runs),
                  timed(lambda: trio.run(new_mon.refresh), runs))
    every, bounded = remote_lag_monitor(n, n), remote_lag_monitor(n, 1000)
    trio.run(every.refresh)
    trio.run(bounded.refresh)
    assert every.table == bounded.table and len(every.table) == n
    out["lag rem"] = (timed(lambda: trio.run(every.refresh), runs),
                      timed(lambda: trio.run(bounded.refresh), runs))

    now, retention = 10_000_000, 7 * 86_400_000
    offsets = {f"g{i}": {("t", p): (1, 0, "", now) for p in range(100)}
               for i in range(max(1, n // 100))}
    expiry = OffsetExpiry(retention)
    for gid in offsets:
        expiry.touch(gid)

    def new_expiry():
        gone, looked = expiry.expired(now, offsets, {}, {})
        expiry.file(looked, offsets, {}, {})
    new_expiry()
    out["expiry"] = (timed(lambda: expired_offsets(offsets, {}, now, retention, {}), runs),
                     timed(new_expiry, runs))

    table = TxnTable(604_800_000)
    for i in range(n):
        table[f"tx{i}"] = S.TransactionMetadata(f"tx{i}", i, 0, 60_000,
                                                S.TxnState.COMPLETE_COMMIT, last_update_ms=now)
    owned = lambda tid: True                                       # noqa: E731
    out["txn"] = (timed(lambda: timeout_actions(list(table.items()), now, 604_800_000, owned),
                        runs),
                  timed(lambda: timeout_actions(table.due(now), now, 604_800_000, owned), runs))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000,30000")
    ap.add_argument("--runs", type=int, default=11)
    args = ap.parse_args()
    print(f"{'job':>8} {'N':>7} {'old ms':>9} {'new ms':>9} {'old/new':>9}")
    for n in (int(x) for x in args.sizes.split(",")):
        for job, (old, new) in measure(n, args.runs).items():
            print(f"{job:>8} {n:>7,} {old:>9.3f} {new:>9.3f} {old / new:>9.1f}", flush=True)


if __name__ == "__main__":
    main()
