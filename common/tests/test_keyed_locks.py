"""KeyedLocks: mutual exclusion per key, and a key's lock gone once nobody holds or waits."""

from __future__ import annotations

import trio
import trio.testing

from common.keyed_locks import KeyedLocks


async def test_one_holder_per_key_and_nothing_kept_after():
    locks = KeyedLocks()
    inside: dict[str, int] = {"a": 0, "b": 0}
    most = {"a": 0, "b": 0}
    release = trio.Event()

    async def user(key):
        async with locks.hold(key):
            inside[key] += 1
            most[key] = max(most[key], inside[key])
            await release.wait()
            inside[key] -= 1

    async with trio.open_nursery() as nursery:
        for key in "aaab":
            nursery.start_soon(user, key)
        await trio.testing.wait_all_tasks_blocked()
        assert inside == {"a": 1, "b": 1}          # two a's wait, b does not wait for a
        assert len(locks) == 2
        release.set()
    assert most == {"a": 1, "b": 1}
    assert len(locks) == 0 and "a" not in locks


async def test_a_waiter_cancelled_leaves_the_holder_its_lock():
    locks = KeyedLocks()
    release = trio.Event()
    held = trio.Event()

    async def holder():
        async with locks.hold("k"):
            held.set()
            await release.wait()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(holder)
        await held.wait()
        with trio.move_on_after(0.01):
            async with locks.hold("k"):
                raise AssertionError("entered a held lock")
        assert "k" in locks                       # still held: not dropped by the waiter
        async with trio.open_nursery() as inner:
            entered = []

            async def second():
                async with locks.hold("k"):
                    entered.append(1)
            inner.start_soon(second)
            await trio.testing.wait_all_tasks_blocked()
            assert entered == []                  # the same lock still excludes
            release.set()
        assert entered == [1]
    assert len(locks) == 0


async def test_a_free_lock_is_taken_without_a_scheduler_pass():
    locks = KeyedLocks()
    ran = []

    async def other():
        ran.append(1)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(other)                           # runs at this task's next yield
        async with locks.hold("k"):
            assert ran == []                                # entered without yielding
        await trio.testing.wait_all_tasks_blocked()
    assert ran == [1] and len(locks) == 0


async def test_a_cancelled_task_does_not_enter_a_free_lock():
    locks = KeyedLocks()
    with trio.CancelScope() as scope:
        scope.cancel()
        async with locks.hold("k"):
            raise AssertionError("entered while cancelled")
    assert scope.cancelled_caught
    assert len(locks) == 0
