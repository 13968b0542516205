import trio
import trio.testing

from partition_server.purgatory import Purgatory


async def test_waiter_wakes_on_notify_and_rechecks():
    p = Purgatory()
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


async def test_timeout_returns_false(autojump_clock):
    p = Purgatory()
    assert await p.wait_until(["k"], lambda: False, timeout_s=0.5) is False
    assert p.waiters == 0


async def test_waiting_on_several_keys(autojump_clock):
    p = Purgatory()
    flag = {"x": False}

    async def later():
        await trio.sleep(0.1)
        flag["x"] = True
        p.notify("b")

    async with trio.open_nursery() as n:
        n.start_soon(later)
        assert await p.wait_until(["a", "b", "c"], lambda: flag["x"], timeout_s=5)


async def test_bounded_waiters_answer_immediately(autojump_clock):
    p = Purgatory(max_waiters=1)
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


async def test_waiting_on_10000_keys_spawns_no_task_and_wakes_on_any_one():
    p = Purgatory()
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


async def test_10000_keys_timeout_leaves_no_registration(autojump_clock):
    p = Purgatory()
    start = trio.current_time()
    assert await p.wait_until(KEYS, lambda: False, timeout_s=0.5) is False
    assert trio.current_time() - start >= 0.5
    assert p.watched_keys() == 0 and p.waiters == 0


async def test_cancelled_waiter_leaves_no_registration():
    p = Purgatory()
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
