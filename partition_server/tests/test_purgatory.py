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
