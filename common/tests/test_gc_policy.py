"""common/gc_policy.py: what survives a full collection is frozen (later collections skip it);
a cycle frozen alive and dropped afterwards is reclaimed by the next sweep (in virtual time),
not before; the callback goes when the run ends; a failed sweep does not end the sweeps."""

import gc
import weakref

import trio
import trio.testing

from common.gc_policy import GcPolicy


class Node:
    pass


def test_survivors_of_a_full_collection_are_frozen_and_swept_hourly():
    policy = GcPolicy(sweep_every_s=100)
    gc.unfreeze()
    alive = []

    async def main():
        a, b = Node(), Node()
        a.other, b.other = b, a                 # a cycle: reference counting never frees it
        alive.append(weakref.ref(a))
        gc.collect()                            # a full collection: the survivors are frozen
        assert policy.freezes >= 1 and gc.get_freeze_count() > 0
        del a, b
        gc.collect()                            # frozen: a full collection does not see it
        assert alive[0]() is not None
        await trio.sleep(99)
        assert policy.sweeps == 0 and alive[0]() is not None
        await trio.sleep(2)
        assert policy.sweeps == 1 and alive[0]() is None     # the sweep reclaimed it
        assert gc.get_freeze_count() > 0                     # and froze what is still alive
        frozen = policy.freezes
        await trio.sleep(50)
        assert policy.sweeps == 1 and policy.freezes == frozen
        await trio.sleep(100)
        assert policy.sweeps == 2
        return "done"

    try:
        result = trio.run(policy.run_with_sweeps, main, instruments=[policy],
                          clock=trio.testing.MockClock(autojump_threshold=0))
    finally:
        gc.unfreeze()
    assert result == "done"
    assert policy._on_gc not in gc.callbacks


def test_a_failed_sweep_is_logged_and_the_next_one_still_comes(caplog, monkeypatch):
    policy = GcPolicy(sweep_every_s=10)
    calls = []

    def collect(*args):
        calls.append(args)
        if len(calls) == 1:
            raise RuntimeError("boom")
        return 0

    monkeypatch.setattr(gc, "collect", collect)

    async def main():
        await trio.sleep(25)
        return policy.sweeps

    try:
        sweeps = trio.run(policy.run_with_sweeps, main, instruments=[policy],
                          clock=trio.testing.MockClock(autojump_threshold=0))
    finally:
        gc.unfreeze()
    assert len(calls) == 2 and sweeps == 1
    assert "garbage sweep failed" in caplog.text
