"""A follower whose fetches from one leader keep failing says so at WARNING (every 30 s), and
that they recovered; a few failures (a leader that died) stay at DEBUG."""

import logging

import trio
import trio.testing

from partition_server.replication.fetcher import FetchFailures


def test_a_fetcher_failing_on_and_on_warns_then_says_it_recovered(caplog):
    caplog.set_level(logging.DEBUG, logger="partition_server.replication.fetcher")

    async def main():
        f = FetchFailures(2)
        for _ in range(FetchFailures.WARN_AFTER - 1):
            f.failed(OSError("refused"))
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
        f.failed(OSError("refused"))
        f.failed(OSError("refused"))              # within 30 s: not again
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and "broker 2" in warnings[0].getMessage()
        await trio.sleep(FetchFailures.WARN_EVERY_S)
        f.failed(OSError("refused"))
        assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 2
        f.answered()
        assert "answered again after 12 failures" in caplog.records[-1].getMessage()
        f.failed(OSError("refused"))              # counting starts afresh
        assert caplog.records[-1].levelno == logging.DEBUG

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
