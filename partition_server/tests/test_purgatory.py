import contextlib

import pytest
import trio
import trio.testing

from partition_server.deadlines import Deadlines
from partition_server.purgatory import Purgatory

# "scope": a waiter waits on an event in its own cancel scope (no `run()`: unit tests of
# handlers); "parked": the broker runs `Purgatory.run()`, waiters park and one task times out
MODES = pytest.mark.parametrize("mode", ["scope", "parked"])


@contextlib.asynccontextmanager
async def purgatory(mode: str, **kw):
    p = Purgatory(**kw)
    async with trio.open_nursery() as n:
        if mode == "parked":
            n.start_soon(p.run)
            while not p.deadlines.running:
                await trio.sleep(0)
        yield p
        assert len(p.deadlines) == 0            # every timer was cancelled or fired
        n.cancel_scope.cancel()


@MODES
async def test_waiter_wakes_on_notify_and_rechecks(mode):
    async with purgatory(mode) as p:
        state = {"hw": 0}
        results = []

        async def produce_waiter():
            results.append(await p.wait_until([("t", 0)], lambda: state["hw"] >= 5, timeout_s=10))

        async with trio.open_nursery() as n:
            n.start_soon(produce_waiter)
            await trio.testing.wait_all_tasks_blocked()
            state["hw"] = 3
            p.notify(("t", 0))             # spurious for this waiter: condition still false
            await trio.testing.wait_all_tasks_blocked()
            assert results == []
            state["hw"] = 5
            p.notify(("t", 0))
        assert results == [True]
        assert p.waiters == 0


@MODES
async def test_timeout_returns_false(autojump_clock, mode):
    async with purgatory(mode) as p:
        assert await p.wait_until(["k"], lambda: False, timeout_s=0.5) is False
        assert p.waiters == 0


@MODES
async def test_waiting_on_several_keys(autojump_clock, mode):
    async with purgatory(mode) as p:
        flag = {"x": False}

        async def later():
            await trio.sleep(0.1)
            flag["x"] = True
            p.notify("b")

        async with trio.open_nursery() as n:
            n.start_soon(later)
            assert await p.wait_until(["a", "b", "c"], lambda: flag["x"], timeout_s=5)


@MODES
async def test_bounded_waiters_answer_immediately(autojump_clock, mode):
    async with purgatory(mode, max_waiters=1) as p:
        out = []

        async def first():
            out.append(await p.wait_until(["k"], lambda: False, timeout_s=1))

        async with trio.open_nursery() as n:
            n.start_soon(first)
            await trio.testing.wait_all_tasks_blocked()
            start = trio.current_time()
            assert await p.wait_until(["k"], lambda: False, timeout_s=1) is False
            assert trio.current_time() == start   # did not wait: the room was full
        assert out == [False]


class _SpawnCounter(trio.abc.Instrument):
    def __init__(self):
        self.spawned = 0

    def task_spawned(self, task):
        self.spawned += 1


KEYS = [("t", i) for i in range(10_000)]


@MODES
async def test_waiting_on_10000_keys_spawns_no_task_and_wakes_on_any_one(mode):
    async with purgatory(mode) as p:
        flag = {"x": False}
        out = []
        counter = _SpawnCounter()

        async def waiter():
            trio.lowlevel.add_instrument(counter)
            try:
                out.append(await p.wait_until(KEYS, lambda: flag["x"], timeout_s=60))
            finally:
                trio.lowlevel.remove_instrument(counter)

        async with trio.open_nursery() as n:
            n.start_soon(waiter)
            await trio.testing.wait_all_tasks_blocked()
            assert p.watched_keys() == len(KEYS)
            p.notify(("t", 1234))          # spurious: condition false, the waiter keeps waiting
            await trio.testing.wait_all_tasks_blocked()
            assert out == []
            flag["x"] = True
            p.notify(("t", 9999))
        assert out == [True]
        assert counter.spawned == 0
        assert p.watched_keys() == 0 and p.waiters == 0


@MODES
async def test_10000_keys_timeout_leaves_no_registration(autojump_clock, mode):
    async with purgatory(mode) as p:
        start = trio.current_time()
        assert await p.wait_until(KEYS, lambda: False, timeout_s=0.5) is False
        assert trio.current_time() - start >= 0.5
        assert p.watched_keys() == 0 and p.waiters == 0


@MODES
async def test_cancelled_waiter_leaves_no_registration(mode):
    async with purgatory(mode) as p:
        async with trio.open_nursery() as n:
            n.start_soon(p.wait_until, KEYS, lambda: False, 60)
            await trio.testing.wait_all_tasks_blocked()
            assert p.watched_keys() == len(KEYS) and p.waiters == 1
            n.cancel_scope.cancel()
        assert p.watched_keys() == 0 and p.waiters == 0


async def test_notify_wakes_only_watchers_of_that_key():
    p = Purgatory()
    woken = []
    a = p.watch(["a", "b"], lambda k: woken.append(("A", k)))
    p.watch(["c"], lambda k: woken.append(("C", k)))
    p.notify("b")
    p.notify("zz")
    assert woken == [("A", "b")]
    a.remove_keys(["b"])
    p.notify("b")
    assert woken == [("A", "b")]
    p.notify_all()
    assert sorted(woken[1:]) == [("A", None), ("C", None)]
    a.cancel()
    a.cancel()                          # idempotent
    assert p.watched_keys() == 1


@MODES
async def test_a_high_watermark_move_wakes_waiters_and_only_notes_for_sessions(mode):
    """notify_high_watermark: a produce waiter wakes; a watch with `note` (a follower's fetch
    session) is only noted, and a plain notify still wakes it."""
    async with purgatory(mode) as p:
        noted, woken, hw = [], [], {"t": 0}
        p.watch(["k"], lambda k: woken.append(k), note=lambda k: noted.append(k))
        out = []

        async def produce_waiter():
            out.append(await p.wait_until(["k"], lambda: hw["t"] >= 1, timeout_s=10))

        async with trio.open_nursery() as n:
            n.start_soon(produce_waiter)
            await trio.testing.wait_all_tasks_blocked()
            hw["t"] = 1
            p.notify_high_watermark("k")
        assert out == [True] and noted == ["k"] and woken == []
        p.notify("k")
        assert woken == ["k"] and noted == ["k"]


async def test_parked_waiter_times_out_at_its_deadline_among_others(autojump_clock):
    async with purgatory("parked") as p:
        out = {}

        async def waiter(name, timeout_s):
            start = trio.current_time()
            ok = await p.wait_until([name], lambda: False, timeout_s=timeout_s)
            out[name] = (ok, round(trio.current_time() - start, 3))

        async with trio.open_nursery() as n:
            n.start_soon(waiter, "late", 5.0)
            await trio.testing.wait_all_tasks_blocked()
            n.start_soon(waiter, "early", 0.5)     # earlier than what the timer task sleeps to
        assert out == {"early": (False, 0.5), "late": (False, 5.0)}
        assert p.watched_keys() == 0 and p.waiters == 0


async def test_deadlines_fire_in_order_skip_cancelled_and_compact(autojump_clock):
    d = Deadlines()
    fired = []
    async with trio.open_nursery() as n:
        n.start_soon(d.run)
        await trio.testing.wait_all_tasks_blocked()
        now = trio.current_time()
        handles = [d.add(now + 1 + i / 1000, lambda i=i: fired.append(i)) for i in range(3000)]
        for h in handles[1:]:
            d.cancel(h)
            d.cancel(h)                             # idempotent
        assert len(d) == 1
        d.add(now + 2, lambda: fired.append("two"))
        assert len(d._heap) < 2 * 2 + 1024 + 1      # noqa: SLF001 - dead entries were dropped
        d.add(now + 0.5, lambda: fired.append("half"))
        await trio.sleep(3)
        assert fired == ["half", 0, "two"] and len(d) == 0
        n.cancel_scope.cancel()
    assert not d.running
