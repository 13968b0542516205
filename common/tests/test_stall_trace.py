"""common/stall_trace.py: a task step that holds the loop past the threshold is logged with
the task's name and where it yielded; quicker steps are not; the environment switches it on."""

import logging
import time

import trio

from common import stall_trace


async def _hog(ms: float) -> None:
    end = time.perf_counter() + ms / 1000
    while time.perf_counter() < end:
        pass
    await trio.sleep(0)


async def _main() -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_hog, 80)
        nursery.start_soon(_hog, 1)


def test_a_long_step_is_logged_with_its_task_and_where_it_yielded(caplog):
    with caplog.at_level(logging.WARNING, logger=stall_trace.__name__):
        trio.run(_main, instruments=[stall_trace.StallTracer(40)])
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1, lines
    assert "task common.tests.test_stall_trace._hog ran" in lines[0]
    assert "test_stall_trace.py" in lines[0] and "_hog" in lines[0].split("yielded in")[1]


def test_the_environment_switches_it_on(monkeypatch):
    monkeypatch.delenv(stall_trace.ENV, raising=False)
    assert stall_trace.instruments_from_env() == []
    monkeypatch.setenv(stall_trace.ENV, "250")
    [tracer] = stall_trace.instruments_from_env()
    assert tracer.threshold_s == 0.25
    monkeypatch.setenv(stall_trace.ENV, "soon")
    assert stall_trace.instruments_from_env() == []


async def _collect() -> None:
    import gc
    gc.collect()                    # a full collection inside this task's step
    end = time.perf_counter() + 0.05
    while time.perf_counter() < end:
        pass
    await trio.sleep(0)


def test_the_line_says_how_much_of_the_step_was_garbage_collection(caplog):
    with caplog.at_level(logging.WARNING, logger=stall_trace.__name__):
        trio.run(_collect, instruments=[stall_trace.StallTracer(40)])
    [line] = [r.getMessage() for r in caplog.records]
    assert "(garbage collection " in line and ", 1 full)" in line
