"""common/gc_policy.py: what survives a full collection is frozen (later collections skip it);
a cycle frozen alive and dropped afterwards is reclaimed by the next sweep (on a fake clock),
not before; the callback goes when the run ends."""

import gc
import weakref

from common.gc_policy import GcPolicy


class Node:
    pass


def test_survivors_of_a_full_collection_are_frozen_and_swept_hourly():
    now = [0.0]
    policy = GcPolicy(sweep_every_s=100, clock=lambda: now[0])
    gc.unfreeze()
    policy.before_run()
    try:
        a, b = Node(), Node()
        a.other, b.other = b, a                 # a cycle: reference counting never frees it
        alive = weakref.ref(a)
        gc.collect()                            # a full collection: the survivors are frozen
        assert policy.freezes >= 1 and gc.get_freeze_count() > 0
        del a, b
        gc.collect()                            # frozen: a full collection does not see it
        assert alive() is not None
        now[0] = 99
        policy.before_io_wait(0)
        assert policy.sweeps == 0 and alive() is not None
        now[0] = 100
        policy.before_io_wait(0)
        assert policy.sweeps == 1 and alive() is None     # the sweep reclaimed it
        assert gc.get_freeze_count() > 0                  # and froze what is still alive
        frozen = policy.freezes
        now[0] = 150
        policy.before_io_wait(0)
        assert policy.sweeps == 1 and policy.freezes == frozen
    finally:
        policy.after_run()
        gc.unfreeze()
    assert policy._on_gc not in gc.callbacks
