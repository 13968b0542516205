"""ResponsePipeline: first stages run one at a time in request order, second stages overlap,
answers leave in request order, drain waits for every answer, a failure ends the connection."""

import trio
import trio.testing

from common.pipeline import MAX_IN_FLIGHT, MAX_IN_FLIGHT_BYTES, ResponsePipeline, first_stage_done


class Harness:
    def __init__(self):
        self.log: list[str] = []
        self.written: list[list] = []
        self.release: dict[int, trio.Event] = {}

    async def run(self, request):
        n, fail = request
        self.log.append(f"first {n}")
        await trio.sleep(0)
        first_stage_done()
        self.log.append(f"second {n}")
        await self.release.setdefault(n, trio.Event()).wait()
        if fail:
            raise RuntimeError(f"request {n} failed")
        return f"answer {n}"

    def frame(self, request, result):
        return [result]

    async def write(self, chunks):
        self.written.append(list(chunks))
        await trio.sleep(0)


async def test_second_stages_overlap_and_answers_keep_request_order():
    h = Harness()
    async with trio.open_nursery() as nursery:
        p = ResponsePipeline(nursery, h.run, h.frame, h.write)
        nursery.start_soon(p.send_loop)
        for n in range(3):
            await p.submit((n, False))
        # every first stage ran, in order, before the next request was taken
        assert h.log == ["first 0", "second 0", "first 1", "second 1", "first 2", "second 2"]
        h.release.setdefault(2, trio.Event()).set()       # the last finishes first...
        h.release.setdefault(1, trio.Event()).set()
        await trio.testing.wait_all_tasks_blocked()
        assert h.written == []                            # ...but waits behind request 0
        h.release.setdefault(0, trio.Event()).set()
        with trio.fail_after(5):
            await p.drain()
        assert [c for w in h.written for c in w] == ["answer 0", "answer 1", "answer 2"]
        assert h.written[0] == ["answer 0", "answer 1", "answer 2"]     # one write for all
        nursery.cancel_scope.cancel()


async def test_in_flight_requests_are_bounded():
    h = Harness()
    async with trio.open_nursery() as nursery:
        p = ResponsePipeline(nursery, h.run, h.frame, h.write)
        nursery.start_soon(p.send_loop)
        for n in range(MAX_IN_FLIGHT):
            await p.submit((n, False))
        submitted = trio.Event()

        async def one_more():
            await p.submit((MAX_IN_FLIGHT, False))
            submitted.set()
        nursery.start_soon(one_more)
        await trio.testing.wait_all_tasks_blocked()
        assert not submitted.is_set()
        h.release.setdefault(0, trio.Event()).set()
        with trio.fail_after(5):
            await submitted.wait()
        nursery.cancel_scope.cancel()


class Sized(tuple):
    """A request with a frame size, as `wire.connection` requests have."""
    size = 0


def sized(n: int, size: int) -> Sized:
    r = Sized((n, False))
    r.size = size
    return r


async def test_in_flight_bytes_are_bounded_but_one_request_always_passes():
    h = Harness()
    async with trio.open_nursery() as nursery:
        p = ResponsePipeline(nursery, h.run, h.frame, h.write)
        nursery.start_soon(p.send_loop)
        await p.submit(sized(0, 2 * MAX_IN_FLIGHT_BYTES))   # alone: larger than the bound is fine
        submitted = trio.Event()

        async def one_more():
            await p.submit(sized(1, 1))
            submitted.set()
        nursery.start_soon(one_more)
        await trio.testing.wait_all_tasks_blocked()
        assert not submitted.is_set()                       # waits for the bytes ahead of it
        h.release.setdefault(0, trio.Event()).set()
        with trio.fail_after(5):
            await submitted.wait()
        h.release.setdefault(1, trio.Event()).set()
        with trio.fail_after(5):
            await p.drain()
        assert p._bytes == 0                                # noqa: SLF001 - nothing leaks
        nursery.cancel_scope.cancel()


async def test_a_failed_request_ends_the_connection_after_the_answers_before_it():
    h = Harness()
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            p = ResponsePipeline(nursery, h.run, h.frame, h.write)
            nursery.start_soon(p.send_loop)
            await p.submit((0, False))
            await p.submit((1, True))
            for n in (0, 1):
                h.release.setdefault(n, trio.Event()).set()
            await trio.sleep_forever()      # cancelled by the pipeline's failure
    assert isinstance(p.failure, RuntimeError) and "request 1" in str(p.failure)
    assert [c for w in h.written for c in w] == ["answer 0"]


async def test_a_handler_without_first_stage_runs_to_completion_before_the_next():
    order = []

    async def run(request):
        order.append(f"start {request}")
        await trio.sleep(0.01)
        order.append(f"end {request}")
        return request

    async def write(chunks):
        pass

    async with trio.open_nursery() as nursery:
        p = ResponsePipeline(nursery, run, lambda req, res: [res], write)
        nursery.start_soon(p.send_loop)
        await p.submit("a")
        await p.submit("b")
        await p.drain()
        nursery.cancel_scope.cancel()
    assert order == ["start a", "end a", "start b", "end b"]


def test_first_stage_done_outside_a_pipeline_is_harmless():
    first_stage_done()


