"""What one AlterPartition answer logs (replication/isr.py): each outcome when few; the first
few and a count when thousands, so a 30,000-partition restart does not spend its broker's loop
writing log lines."""

import logging

from partition_server.replication import isr


def _lines(caplog, n):
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=isr.__name__):
        lines = isr._Lines("ISR changes")
        for p in range(n):
            lines.note("ISR of %s-%d is now %s", "t", p, [0, 1])
        lines.flush()
    return [r.getMessage() for r in caplog.records]


def test_few_outcomes_are_logged_each(caplog):
    assert _lines(caplog, 3) == [f"ISR of t-{p} is now [0, 1]" for p in range(3)]
    assert _lines(caplog, 0) == []


def test_thousands_are_logged_as_the_first_few_and_a_count(caplog):
    got = _lines(caplog, 5_000)
    assert got[:isr.LOGGED_EACH] == [f"ISR of t-{p} is now [0, 1]" for p in range(isr.LOGGED_EACH)]
    assert got[isr.LOGGED_EACH:] == [
        f"... and {5_000 - isr.LOGGED_EACH} more ISR changes in the same AlterPartition answer"]
