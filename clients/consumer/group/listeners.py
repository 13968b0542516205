"""Calling the application's rebalance listeners (on_partitions_revoked / assigned / lost),
which may be plain functions or coroutines; both protocols and the consumer use it."""

from __future__ import annotations

import inspect


async def call_listener(fn, tps: list) -> None:
    """Call a rebalance listener, sync or async."""
    if fn is None:
        return
    result = fn(tps)
    if inspect.isawaitable(result):
        await result
