"""Taking a trio.Lock without a scheduler pass when it is free.

`trio.Lock.acquire` yields even when the lock is free: a whole pass of trio's loop. On the
paths that take a lock per request (a broker connection's request lock, the transaction
coordinator's lock per transactional id) that pass showed in the traces (25 µs of a quiet
EndTxn's ~100 before its append, bench/README.md "Inside one replication round"). Here a free
lock is taken at once; a cancelled task still stops, and a held lock is waited for in turn
(trio hands a released lock to its first waiter, so a free lock has nobody waiting)."""

from __future__ import annotations

import trio


async def acquire(lock: trio.Lock) -> None:
    await trio.lowlevel.checkpoint_if_cancelled()      # (no yield unless cancelled)
    if lock.locked():
        await lock.acquire()
    else:
        lock.acquire_nowait()
